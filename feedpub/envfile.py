"""The checkout's `.env`, read into the environment before the settings (python-dotenv), by
every process that loads them (manage.py, gunicorn and uvicorn through feedpub/wsgi.py and
feedpub/asgi.py, deploy/gunicorn.conf.py for gunicorn's own): a command in a second
terminal gets the same FEEDPUB_BASE_URL as the server in the first.

The environment wins over the file. FEEDPUB_DOTENV names another file, or none when
empty. A test run reads none unless it names one: pytest sets PYTEST_VERSION for its own
process and every process it starts, and a developer's .env must not change what the tests
see. The image has no .env (.dockerignore): compose passes the environment itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

CHECKOUT = Path(__file__).resolve().parent.parent


def load() -> Path | None:
    """Read the .env file into os.environ (variables already set keep their values); the
    file read, if any."""
    named = os.environ.get("FEEDPUB_DOTENV")
    if named is None:
        path = CHECKOUT / ".env"
        if "PYTEST_VERSION" in os.environ or not path.is_file():
            return None
    elif not named:
        return None
    else:
        path = Path(named)
        if not path.is_file():
            raise ImproperlyConfigured(f"FEEDPUB_DOTENV={named}: no such file")
    load_dotenv(path, override=False)
    return path
