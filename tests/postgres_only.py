"""Tests marked `postgres` (pyproject's markers: row locks, real concurrency) run only on
PostgreSQL. On SQLite they skip, and the run ends by saying how many, in which files, and
the command that runs them. Where FEEDPUB_REQUIRE_POSTGRES is set (.ci/run sets it for its
PostgreSQL runs) none may skip: a run on another database is refused, and a skip of one is
a failure, so CI cannot pass without them.

A pytest plugin: tests/conftest.py loads it (tests/test_postgres_only.py runs it alone).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from django.db import connection

MARKER = "postgres"
REQUIRED = "FEEDPUB_REQUIRE_POSTGRES"
# The README's test command, on the PostgreSQL it names, for the marked tests alone.
COMMAND = "DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/pytest -q -m postgres"


def _on_postgresql() -> bool:
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config, items):
    if _on_postgresql():
        return
    if os.environ.get(REQUIRED):
        raise pytest.UsageError(
            f"{REQUIRED} is set, but the tests would run on {connection.vendor}: set "
            "DATABASE_URL=postgres://... (or unset it to skip the PostgreSQL-only tests)")
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if MARKER in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and MARKER in item.keywords and os.environ.get(REQUIRED) \
            and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"a test marked {MARKER} skipped ({reason}), but {REQUIRED} is "
                           "set: it must run on this PostgreSQL")
    return report


def pytest_terminal_summary(terminalreporter):
    """(From the reports, which xdist's workers send back too: they collect, not this one.)"""
    if _on_postgresql():
        return
    files = Counter(report.nodeid.split("::")[0]
                    for report in terminalreporter.stats.get("skipped", ())
                    if MARKER in getattr(report, "keywords", {}))
    if not files:
        return
    total = sum(files.values())
    tests = f"{total} tests need" if total != 1 else "1 test needs"
    terminalreporter.write_sep("=", "PostgreSQL-only tests")
    terminalreporter.write_line(
        f"{tests} PostgreSQL and {'were' if total != 1 else 'was'} skipped: "
        + ", ".join(f"{name} ({count})" for name, count in sorted(files.items()))
        + f"; run them with: {COMMAND}")
