"""The app containers' health checks (the Dockerfile's HEALTHCHECK, docker-compose.yml):

    python deploy/healthcheck.py             GET /healthz from the gunicorn in this container
    python deploy/healthcheck.py HOST:PORT   GET /healthz from another server (the long-poll
                                             service's uvicorn)
    python deploy/healthcheck.py --database  the services without a port (sealer, websub):
                                             their database answers a query

Exit status 0 when healthy, 1 otherwise (with the reason on stderr). /healthz itself asks
the database too (feedpub/health.py).

It sends a Host that ALLOWED_HOSTS accepts: Django answers any other Host with 400 before a
view runs, and the 127.0.0.1 it connects to is rarely one of a deployment's hosts.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path


def allowed_host(allowed_hosts: list[str]) -> str:
    """A Host header that Django's ALLOWED_HOSTS accepts: its first entry, as a name."""
    for pattern in allowed_hosts:
        if pattern == "*":
            break
        host = pattern.lstrip(".")  # ".example.org" accepts example.org itself too
        if host:
            return host
    # `*`, or an empty list, which with DEBUG on accepts localhost.
    return "localhost"


def health_url(bind: str) -> str:
    """/healthz at gunicorn's bind address (GUNICORN_BIND), wildcards as loopback."""
    if bind.startswith(("unix:", "fd://")) or ":" not in bind:
        host, port = "", "8000"
    else:
        host, port = bind.rsplit(":", 1)
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)  # noqa: S104
    return f"http://{host}:{port}/healthz"


def database_answers() -> int:
    import django
    from django.db import DatabaseError, connection

    django.setup()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        print(f"unhealthy: the database does not answer: {error}", file=sys.stderr)
        return 1
    return 0


def main(arguments: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")
    if arguments == ["--database"]:
        return database_answers()
    from django.conf import settings

    bind = arguments[0] if arguments else os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")  # noqa: S104
    request = urllib.request.Request(  # noqa: S310 (http on loopback)
        health_url(bind), headers={"Host": allowed_host(settings.ALLOWED_HOSTS)})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return 0 if response.status == 200 else 1
    except (OSError, urllib.error.HTTPError) as error:
        print(f"unhealthy: {request.full_url} (Host: {request.get_header('Host')}): {error}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
