"""The long-running commands stop cleanly on SIGTERM (archives/management/stopping.py): each
runs as a process of its own, as in its container, is sent SIGTERM, and must exit 0 within
seconds, leaving nothing half-written."""

from __future__ import annotations

import os
import re
import runpy
import signal
import sqlite3
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
QUICK = 5  # seconds: far below the 10 s after which Docker kills a container

# Writes a feed of 2,000 entries in pages of 5, none sealed: a sealer's backlog of 400
# pages, 20 runs of 20.
BACKLOG = """
from archives.log import publishing
feed = publishing.create_feed(slug="books", title="Books", page_size=5)
for start in range(0, 2000, 200):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": {"title": f"Record {n}"}}
        for n in range(start, start + 200)])
"""


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory) -> str:
    """A database file of the processes' own, migrated, holding BACKLOG."""
    url = f"sqlite:///{tmp_path_factory.mktemp('stopping') / 'db.sqlite3'}"
    manage(url, "migrate", "-v0")
    manage(url, "shell", "--no-imports", "-c", BACKLOG, FEEDPUB_SEAL_ON_WRITE="false")
    return url


def environment(url: str, **more: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "INFO",
            **more}


def manage(url: str, *args: str, **more: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True,  # noqa: S603
                   env=environment(url, **more))


def start(url: str, *args: str, pages_dir: Path | None = None) -> subprocess.Popen:
    more = {"FEEDPUB_PAGES_DIR": str(pages_dir)} if pages_dir else {}
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT,  # noqa: S603
                            env=environment(url, **more), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_line(process: subprocess.Popen, text: str, timeout: float = 60) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        if text in line:
            return lines
    process.kill()
    raise AssertionError(f"never printed {text!r}: {''.join(lines)}")


def terminate(process: subprocess.Popen) -> tuple[int, float, str]:
    """Send SIGTERM: the exit status, the seconds it took to exit, the rest of its output."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, time.monotonic() - sent, output


def sealed_state(url: str) -> tuple[int, list[tuple[int, int, int, bool]]]:
    """The feed's sealed_pages, and each stored page's number, seq range and whether it
    has its body."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        (sealed,) = db.execute("SELECT sealed_pages FROM archives_feed").fetchone()
        pages = db.execute("SELECT number, first_seq, last_seq, length(body) > 0 "
                           "FROM archives_archivepage ORDER BY number").fetchall()
    return sealed, pages


def test_a_sealer_stops_on_sigterm_between_runs_leaving_whole_pages(sqlite_url, tmp_path):
    sealer = start(sqlite_url, "seal_archives", "--watch", "60", pages_dir=tmp_path)
    wait_for_line(sealer, "sealed books pages")  # the log line of its first committed run

    status, seconds, output = terminate(sealer)

    assert (status, "Traceback" in output) == (0, False), output
    assert seconds < QUICK
    sealed, pages = sealed_state(sqlite_url)
    assert sealed == len(pages) > 0
    assert pages == [(n, (n - 1) * 5 + 1, n * 5, True) for n in range(1, sealed + 1)]
    assert [p.name for p in tmp_path.rglob(".*")] == []  # no temporary file left behind


def test_a_watching_sealer_stops_at_once_while_it_waits(sqlite_url, tmp_path):
    sealer = start(sqlite_url, "seal_archives", "--watch", "60", pages_dir=tmp_path)
    wait_for_line(sealer, "sealed books page 400 ")  # the backlog done: it waits 60 s
    time.sleep(0.5)

    status, seconds, output = terminate(sealer)

    assert (status, "Traceback" in output) == (0, False), output
    assert seconds < QUICK
    assert sealed_state(sqlite_url)[0] == 400


def test_the_websub_worker_stops_at_once_while_it_waits(sqlite_url):
    worker = start(sqlite_url, "websub_worker", "--poll", "60")
    wait_for_line(worker, "websub_worker: running")
    time.sleep(1)  # its first round done: waiting out its poll

    status, seconds, output = terminate(worker)

    assert (status, "Traceback" in output) == (0, False), output
    assert seconds < QUICK


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_websub_worker_stops_at_once_while_it_listens_on_postgresql():
    database = connection.settings_dict
    url = (f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
           f"{database['NAME']}")
    worker = start(url, "websub_worker", "--poll", "60")
    deadline = time.monotonic() + 30
    while not listening() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listening()

    status, seconds, output = terminate(worker)

    assert (status, "Traceback" in output) == (0, False), output
    assert seconds < QUICK
    assert not listening()  # its LISTEN connection closed on the way out


def listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'")
        return cursor.fetchone()[0] > 0


def test_compose_gives_the_sealer_and_websub_at_least_gunicorns_graceful_timeout():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    graceful = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))["graceful_timeout"]
    for service in ("sealer", "websub"):
        grace = re.fullmatch(r"(\d+)s", compose["services"][service]["stop_grace_period"])
        assert int(grace[1]) >= graceful, service


def test_a_sealer_stopped_during_a_snapshot_deletes_the_unfinished_snapshot(db, settings,
                                                                            monkeypatch):
    """In this process: SIGTERM while a snapshot is half taken ends the slice, then the
    sealer, which deletes the snapshot it will never finish (nothing incomplete stays)."""
    from django.core.management import call_command

    from archives.log import publishing
    from archives.management.commands import seal_archives
    from archives.models import Feed, Snapshot, SnapshotPage
    from archives.storage import snapshots

    from .factories import FeedFactory, record_data

    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(slug="big", page_size=3)
    for n in range(20):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    clock, stored = [0.0], []
    make_page = snapshots._page

    def slow_page(snapshot, number, parts):  # 0.3 s a page: a slice holds two
        clock[0] += 0.3
        stored.append(SnapshotPage.objects.count())
        if number == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return make_page(snapshot, number, parts)

    monkeypatch.setattr(snapshots, "_page", slow_page)
    monkeypatch.setattr(seal_archives.time, "monotonic", lambda: clock[0])
    call_command("seal_archives", "--watch", "60", "--snapshot-every", "3600",
                 stdout=StringIO())

    assert max(stored) > 0  # pages of it had been stored
    assert not Snapshot.objects.exists()
    assert not SnapshotPage.objects.exists()
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 6
