"""Programs nobody here wrote that some tests drive (nginx, Chromium): on a laptop without
one those tests skip; CI sets FEEDPUB_REQUIRE_<NAME> so that they fail instead."""

from __future__ import annotations

import os

import pytest


def require(binary: str | None, *, name: str, install: str) -> str:
    """`binary`, found; else skip, or fail when FEEDPUB_REQUIRE_<NAME> is set."""
    if binary is None:
        message = f"needs {name} (Debian: apt-get install -y {install})"
        variable = f"FEEDPUB_REQUIRE_{name.upper()}"
        if os.environ.get(variable):
            pytest.fail(f"{message}; {variable} is set, so this is an error")
        pytest.skip(message)
    return binary
