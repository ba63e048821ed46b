"""The tests marked `postgres` (tests/postgres_only.py): a run on SQLite says which it skipped
and how to run them; a run where FEEDPUB_REQUIRE_POSTGRES is set (CI's) cannot skip them.

Each case runs pytest on a few tests of its own, with the plugin alone (no database is
reached: which one the run is on is told by DATABASE_URL).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .postgres_only import COMMAND

ROOT = Path(__file__).resolve().parent.parent
NOWHERE = "postgres://postgres@127.0.0.1:9/none"  # a PostgreSQL URL, never connected to

TESTS = {
    "test_locks.py": '''
import pytest

@pytest.mark.postgres
def test_one_row_lock():
    pass

@pytest.mark.postgres
def test_another_row_lock():
    pass

def test_anywhere():
    pass
''',
    "test_listen.py": '''
import pytest

pytestmark = pytest.mark.postgres

def test_a_notification():
    pass
''',
}


def run(tmp_path: Path, files: dict[str, str], **environ: str) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = --strict-markers\nmarkers =\n    postgres: needs PostgreSQL\n")
    env = {name: value for name, value in os.environ.items()
           if name not in ("DATABASE_URL", "POSTGRES_HOST", "FEEDPUB_REQUIRE_POSTGRES")}
    env |= {"PYTHONPATH": str(ROOT), **environ}
    return subprocess.run(  # noqa: S603 (our own arguments)
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "tests.postgres_only", "--ds=feedpub.settings", *files],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_run_on_sqlite_names_the_skipped_tests_files_and_the_command_that_runs_them(
        tmp_path):
    result = run(tmp_path, TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 3 skipped" in result.stdout
    assert ("3 tests need PostgreSQL and were skipped: test_listen.py (1), test_locks.py (2); "
            f"run them with: {COMMAND}") in result.stdout


def test_the_command_given_is_the_readmes_on_postgresql_for_the_marked_tests():
    readme = (ROOT / "README.md").read_text()
    assert COMMAND.removesuffix(" -q -m postgres") in readme


def test_a_run_on_sqlite_without_marked_tests_says_nothing_of_postgresql(tmp_path):
    result = run(tmp_path, {"test_plain.py": "def test_anywhere():\n    pass\n"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PostgreSQL" not in result.stdout


def test_on_postgresql_the_marked_tests_run(tmp_path):
    result = run(tmp_path, TESTS, DATABASE_URL=NOWHERE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout
    assert "skipped" not in result.stdout


def test_where_postgresql_is_required_a_run_on_sqlite_is_refused(tmp_path):
    result = run(tmp_path, TESTS, FEEDPUB_REQUIRE_POSTGRES="1")
    assert result.returncode == 4, result.stdout + result.stderr  # a usage error
    assert "FEEDPUB_REQUIRE_POSTGRES is set, but the tests would run on sqlite" in result.stderr


def test_where_postgresql_is_required_a_marked_test_that_skips_fails(tmp_path):
    skipping = {"test_skipping.py": '''
import pytest

@pytest.mark.postgres
def test_that_skips():
    pytest.skip("no row locks today")

def test_unmarked_that_skips():
    pytest.skip("not ours to require")
'''}
    required = run(tmp_path, skipping, DATABASE_URL=NOWHERE, FEEDPUB_REQUIRE_POSTGRES="1")
    assert required.returncode == 1, required.stdout + required.stderr
    assert "1 failed, 1 skipped" in required.stdout
    assert ("a test marked postgres skipped (Skipped: no row locks today), but "
            "FEEDPUB_REQUIRE_POSTGRES is set") in required.stdout
    relaxed = run(tmp_path, skipping, DATABASE_URL=NOWHERE)
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "2 skipped" in relaxed.stdout
