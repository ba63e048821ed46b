"""A snapshot's life (archives/storage/snapshots.py): started, resumed by the next start
when the process taking it was killed, complete, superseded and still readable for
FEEDPUB_SNAPSHOT_GRACE_SECONDS, then deleted; and what `manage.py snapshot` refuses and
prints."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction

from archives.documents import base
from archives.log import publishing
from archives.models import Feed, Snapshot, SnapshotPage
from archives.storage import snapshots

from .factories import FeedFactory, record_data
from .test_stopping import wait_for_line

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "tests" / "schema" / "snapshot-index.schema.json").read_text())


def write(feed: Feed, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))


def unfinished() -> list[int]:
    """The pages stored of each unfinished snapshot."""
    return sorted(Snapshot.objects.filter(complete=False).values_list("pages", flat=True))


# A sealer killed half-way through a snapshot ----------------------------------------------

class SlowPages:
    """Each snapshot page takes 0.3 s of a fake clock: a half-second slice stores two."""

    def __init__(self, monkeypatch):
        self.now, self.make_page = 0.0, snapshots._page
        monkeypatch.setattr(snapshots, "_page", self.page)
        monkeypatch.setattr(snapshots.time, "monotonic", lambda: self.now)

    def page(self, snapshot, number, parts):
        self.now += 0.3
        return self.make_page(snapshot, number, parts)


def test_a_sealer_killed_again_and_again_resumes_its_snapshot_instead_of_piling_them_up(
        db, monkeypatch):
    """Each start of a watching sealer takes one slice of the snapshot and is then killed
    (its Snapshotting dropped, never abandoned), while writes go on: the next start
    resumes the one unfinished snapshot, which the sixth completes, the same bytes as a
    snapshot of that entry taken at once."""
    feed = FeedFactory(slug="big", page_size=3)
    write(feed, 30)  # 10 pages of snapshot
    SlowPages(monkeypatch)
    seen = []
    for start in range(6):
        sealer = snapshots.Snapshotting(slug=None, keep=3, every=3600)
        completed = sealer.step()
        seen.append(unfinished())
        write(feed, 1, start=100 + start)  # the feed goes on between the restarts

    assert seen == [[2], [4], [6], [8], [10], []]
    snapshot = Snapshot.objects.get()
    assert completed == [snapshot]
    assert (snapshot.complete, snapshot.last_seq, snapshot.pages) == (True, 30, 10)
    at_once = [snapshots.linkedpages.render(parts) for parts in snapshots._chunks(
        snapshots.live_entities(Feed.objects.get(pk=feed.pk), 30), 3)]
    assert [bytes(body) for body in snapshot.page_set.order_by("number")
            .values_list("body", flat=True)] == at_once


def test_the_snapshot_command_finishes_an_unfinished_snapshot_of_the_newest_entry(
        feed, monkeypatch):
    """`snapshot` killed half-way and run again resumes its snapshot; one cut before the
    feed's newest entry (the feed went on) is deleted, and the new one is of the newest."""
    write(feed, 12)
    SlowPages(monkeypatch)
    started = snapshots.start_snapshot(feed)
    snapshots.advance_snapshot(started, until=0.5)  # two pages, then killed
    call_command("snapshot", "--feed", "books", stdout=StringIO())
    assert list(Snapshot.objects.values_list("uuid", "complete", "pages")) == [
        (started.uuid, True, 4)]

    started = snapshots.start_snapshot(feed)  # cut at entry 12, then the feed goes on
    write(feed, 1, start=12)
    snapshots.advance_snapshot(started, until=snapshots.time.monotonic() + 0.5)
    call_command("snapshot", "--feed", "books", stdout=StringIO())
    assert unfinished() == []
    newest = Snapshot.objects.order_by("-created").first()
    assert (newest.uuid != started.uuid, newest.last_seq) == (True, 13)
    assert not Snapshot.objects.filter(uuid=started.uuid).exists()


def test_the_snapshot_command_and_a_sealer_taking_on_the_same_snapshot_finish_it_once(
        feed, monkeypatch):
    """`snapshot` resumes the unfinished snapshot a watching sealer is taking; when the
    sealer's next slice stores pages first, the command goes on after them."""
    write(feed, 12)
    slow = SlowPages(monkeypatch)
    sealer = snapshots.Snapshotting(slug=None, keep=3, every=3600)
    sealer.step()  # pages 1 and 2
    make_page, interleaved = slow.page, []

    def page(snapshot, number, parts):
        if not interleaved:  # the command renders page 3: the sealer stores 3 and 4
            interleaved.append(number)
            assert sealer.step() == []
        return make_page(snapshot, number, parts)

    monkeypatch.setattr(snapshots, "_page", page)
    out = StringIO()
    call_command("snapshot", "--feed", "books", stdout=out)

    snapshot = Snapshot.objects.get()
    assert interleaved == [3]
    assert unfinished() == []
    assert (snapshot.pages, snapshot.records) == (4, 12)
    assert out.getvalue() == (f"books: snapshot {snapshot.uuid}, 12 records as of entry 12, "
                              "4 page(s)\n")
    at_once = [snapshots.linkedpages.render(parts) for parts in snapshots._chunks(
        snapshots.live_entities(Feed.objects.get(pk=feed.pk), 12), 3)]
    assert [bytes(body) for body in snapshot.page_set.order_by("number")
            .values_list("body", flat=True)] == at_once


def test_an_unfinished_snapshot_of_other_urls_is_taken_again(feed, monkeypatch, settings):
    """Pages stored under another base URL (a move: `rerender_documents` renders complete
    snapshots only) are not resumed: the snapshot is taken again."""
    write(feed, 12)
    SlowPages(monkeypatch)
    started = snapshots.start_snapshot(feed)
    snapshots.advance_snapshot(started, until=0.5)
    settings.FEEDPUB_BASE_URL = "https://feeds.example.org"
    call_command("rerender_documents", stdout=StringIO())  # the move, recorded

    snapshot = snapshots.take_snapshot(feed)

    assert snapshot.uuid != started.uuid
    assert list(Snapshot.objects.values_list("uuid", flat=True)) == [snapshot.uuid]
    bodies = SnapshotPage.objects.values_list("body", flat=True)
    assert all(b"https://feeds.example.org/feeds/books/records/" in bytes(b) for b in bodies)
    assert not any(b"127.0.0.1" in bytes(body) for body in bodies)


def test_one_unfinished_snapshot_a_feed_is_all_the_database_holds(feed):
    write(feed, 3)
    Snapshot.objects.create(feed=feed, last_seq=3, created=base.change_stamp())
    with pytest.raises(IntegrityError), transaction.atomic():
        Snapshot.objects.create(feed=feed, last_seq=3, created=base.change_stamp())
    assert snapshots.start_snapshot(feed) == Snapshot.objects.get()  # resumed


# Killed for real ----------------------------------------------------------------------

# Run by `manage.py shell -c`: says what it finds unfinished, writes the feed the first
# time, then runs the sealer with snapshot pages slowed to 0.2 s each (a page printed
# before it is stored).
SEALER = """
import time
from django.core.management import call_command
from archives.log import publishing
from archives.models import Feed, Snapshot
from archives.storage import snapshots
print("unfinished", sorted(Snapshot.objects.filter(complete=False)
                           .values_list("pages", flat=True)), flush=True)
if not Feed.objects.exists():
    feed = publishing.create_feed(slug="books", title="Books", page_size=3)
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": {"title": f"Record {n}"}} for n in range(90)])
make_page = snapshots._page
def slow_page(snapshot, number, parts):
    time.sleep(0.2)
    print("rendering page", number, flush=True)
    return make_page(snapshot, number, parts)
snapshots._page = slow_page
call_command("seal_archives", "--watch", "1", "--snapshot-every", "3600")
"""


@pytest.fixture(scope="module")
def migrated_sqlite(tmp_path_factory) -> Path | None:
    if connection.vendor != "sqlite":
        return None
    path = tmp_path_factory.mktemp("lifecycle") / "db.sqlite3"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True,  # noqa: S603
                   env=environment(f"sqlite:///{path}"))
    return path


@pytest.fixture
def process_database(request, migrated_sqlite, tmp_path) -> str:
    """A database URL the processes a test starts share: the test database on PostgreSQL,
    a migrated SQLite file of the test's own on SQLite."""
    if migrated_sqlite is None:
        request.getfixturevalue("transactional_db")
        database = connection.settings_dict
        return (f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
                f"{database['NAME']}")
    shutil.copy(migrated_sqlite, tmp_path / "db.sqlite3")
    return f"sqlite:///{tmp_path / 'db.sqlite3'}"


def environment(url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "INFO",
            "FEEDPUB_EXPORT_PAGES": "false"}


def start_sealer(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", "shell", "--no-imports",  # noqa: S603
                             "-c", SEALER], cwd=ROOT, env=environment(url),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_sealer_killed_with_sigkill_mid_snapshot_leaves_one_to_resume(process_database):
    """kill -9 twice half-way through a snapshot of 30 pages: each start finds one
    unfinished snapshot, further on than the last; the third completes it."""
    found = []
    for _ in range(3):
        sealer = start_sealer(process_database)
        line = wait_for_line(sealer, "unfinished [", timeout=120)[-1]
        found.append(json.loads(line.split(" ", 1)[1]))
        stored = (found[-1] or [0])[0]
        if len(found) == 3:
            break
        # A slice renders three pages at most: the fourth is rendered once it is stored.
        wait_for_line(sealer, f"rendering page {stored + 4}\n", timeout=120)
        sealer.send_signal(signal.SIGKILL)
        sealer.wait(timeout=30)
    output = "".join(wait_for_line(sealer, " of books: ", timeout=120))
    sealer.send_signal(signal.SIGTERM)
    sealer.communicate(timeout=30)

    assert found[0] == []
    assert all(len(pages) == 1 for pages in found[1:]), found
    assert 0 < found[1][0] < found[2][0] < 30, found
    assert "Traceback" not in output
    assert "90 records as of entry 90" in output


# Superseded, and read on for a grace period ---------------------------------------------

class Clock:
    """base.change_stamp, moved on by the test."""

    def __init__(self, monkeypatch):
        self.offset = timedelta()
        monkeypatch.setattr(base, "change_stamp", lambda: datetime.now(tz=UTC) + self.offset)


def test_a_reader_half_way_through_a_superseded_snapshot_reads_it_to_the_end_in_its_grace(
        client, feed, settings, monkeypatch):
    settings.FEEDPUB_SNAPSHOT_GRACE_SECONDS = 600
    clock = Clock(monkeypatch)
    write(feed, 12)
    call_command("snapshot", "--keep", "1", stdout=StringIO())
    index_url = client.get("/feeds/books/snapshots/latest")["Location"]
    index = json.loads(client.get(index_url).content)
    pages = [urlsplit(url).path for url in index["pages"]]
    assert len(pages) == 4
    assert [client.get(page).status_code for page in pages[:2]] == [200, 200]

    write(feed, 1, start=12)  # a newer snapshot completes half-way through the walk
    call_command("snapshot", "--keep", "1", stdout=StringIO())
    assert client.get("/feeds/books/snapshots/latest")["Location"] != index_url
    clock.offset = timedelta(seconds=590)
    call_command("snapshot", "--keep", "1", stdout=StringIO())  # within the grace: kept
    assert [client.get(page).status_code for page in pages[2:]] == [200, 200]
    assert client.get(index_url).status_code == 200

    clock.offset = timedelta(seconds=601)  # the grace is over
    call_command("snapshot", "--keep", "1", stdout=StringIO())
    assert [client.get(page).status_code for page in pages] == [404] * 4
    assert client.get(index_url).status_code == 404
    assert Snapshot.objects.count() == 3  # the newest, and two in their grace


def test_a_watching_sealer_deletes_snapshots_past_their_grace_without_a_change(
        client, feed, settings, monkeypatch):
    settings.FEEDPUB_SNAPSHOT_GRACE_SECONDS = 600
    clock = Clock(monkeypatch)
    write(feed, 4)
    older = snapshots.take_snapshot(feed, keep=1)
    write(feed, 1, start=4)
    newer = snapshots.take_snapshot(feed, keep=1)
    sealer = snapshots.Snapshotting(slug=None, keep=1, every=3600)
    assert sealer.step() == []  # nothing changed: no snapshot, and the older one is kept
    assert client.get(f"/feeds/books/snapshots/{older.uuid}/").status_code == 200

    clock.offset = timedelta(seconds=601)
    sealer.due = 0  # its next round
    assert sealer.step() == []
    assert client.get(f"/feeds/books/snapshots/{older.uuid}/").status_code == 404
    assert client.get(f"/feeds/books/snapshots/{newer.uuid}/").status_code == 200


# What the command refuses and prints ------------------------------------------------------

def test_the_snapshot_command_refuses_a_feed_with_no_entries(client, feed):
    with pytest.raises(CommandError, match="feed 'books' has no entries yet: nothing to "
                                           "snapshot"):
        call_command("snapshot", "--feed", "books", stdout=StringIO())
    assert not Snapshot.objects.exists()
    assert client.get("/feeds/books/snapshots/latest").status_code == 404

    other = FeedFactory(slug="other")
    write(other, 2)
    out = StringIO()
    call_command("snapshot", stdout=out)  # every feed: the empty one is named and skipped
    assert "books: no entries yet, no snapshot\n" in out.getvalue()
    assert "other: snapshot " in out.getvalue()
    assert list(Snapshot.objects.values_list("feed__slug", flat=True)) == ["other"]


def test_every_url_of_a_snapshot_of_a_feed_whose_records_are_all_deleted_answers(
        client, feed):
    write(feed, 2)
    for n in range(2):
        publishing.delete_record(feed=feed, key=f"k{n}")
    call_command("snapshot", "--feed", "books", stdout=StringIO())

    index = json.loads(client.get(client.get("/feeds/books/snapshots/latest")["Location"])
                       .content)
    jsonschema.validate(index, SCHEMA)
    assert (index["pages"], index["records"]) == ([], 0)
    assert client.get(urlsplit(index["feed"]["resumePage"]).path).status_code == 200


def test_the_snapshot_command_and_the_sealer_print_each_snapshot_once(feed, monkeypatch):
    """What a command writes and what it logs both go to stdout (the LOGGING handler):
    each snapshot is one line of it."""
    from archives.management.commands import seal_archives

    stdout = StringIO()
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # settings.LOGGING's, not pytest's
            monkeypatch.setattr(handler, "stream", stdout)
    write(feed, 1)
    call_command("snapshot", stdout=stdout)
    write(feed, 1, start=1)
    monkeypatch.setattr(seal_archives.time, "sleep", lambda seconds: sys.exit(0))
    with pytest.raises(SystemExit):  # one pass, which takes the snapshot, then stopped
        call_command("seal_archives", "--watch", "60", "--snapshot-every", "3600",
                     stdout=stdout)

    first, second = Snapshot.objects.order_by("created")
    assert [line for line in stdout.getvalue().splitlines() if "snapshot" in line] == [
        f"books: snapshot {first.uuid}, 1 records as of entry 1, 1 page(s)",
        f"snapshot {second.uuid} of books: 2 records as of entry 2"]
