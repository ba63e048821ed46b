"""Polls from memory against a real PostgreSQL LISTEN/NOTIFY (archives/db/heads.py): with a
warm head a 304 costs no query, and every committed write (through the API, the sealer,
another process) is seen by the next poll within a second; losing the listener makes polls
read the database until it listens again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from lxml import etree

from archives.db.heads import heads, lease
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed

from .factories import FeedFactory, record_data
from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client
from .walking import NS

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
BOUND = 1.0  # seconds from a commit to every poll showing it (docs/consuming/polling.md)


@pytest.fixture(autouse=True)
def listening(settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False  # each test seals when it means to
    heads.start()
    assert heads.wait_until_listening(5), "the listener did not start"
    return heads


@pytest.fixture
def elsewhere(monkeypatch):
    """Writes as if another process made them: this one learns of them by NOTIFY only
    (announce's forgetting of the writer's own copy is switched off)."""
    monkeypatch.setattr(heads, "forget", lambda feed_id: None)


@pytest.fixture
def books(db):
    feed = FeedFactory(slug="books", title="Books", page_size=3)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    return feed


def poll(client, slug="books", etag=None, path=""):
    headers = {"HTTP_IF_NONE_MATCH": etag} if etag else {}
    return client.get(f"/feeds/{slug}/{path}", **headers)


def warm(client, slug="books", path=""):
    """Poll until the head is kept (the first read may overlap the listener's start or a
    notification), and return the current ETag."""
    etag = poll(client, slug, path=path)["ETag"]
    for _ in range(50):
        with CaptureQueriesContext(connection) as queries:
            assert poll(client, slug, etag, path).status_code == 304
        if not queries:
            return etag
    raise AssertionError("the head was never kept")


def seen_within(client, check, *, slug="books", etag=None, bound=BOUND):
    """The first poll's response for which `check` holds, polling for at most `bound`."""
    began = time.monotonic()
    while True:
        response = poll(client, slug, etag)
        if check(response):
            return response
        assert time.monotonic() - began < bound, f"not seen within {bound} s"
        time.sleep(0.005)


def titles(response) -> list[str]:
    document = etree.fromstring(response.content)
    return [title.text for title in document.findall("a:entry/a:title", NS)]


def changed(response) -> bool:
    return response.status_code != 304


@pytest.mark.parametrize("path", ["", "rss/", "paged/", "complete/"])
def test_a_poll_that_finds_nothing_new_runs_no_query(client, books, path):
    etag = warm(client, path=path)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert poll(client, etag=etag, path=path).status_code == 304
    assert not queries


@pytest.mark.usefixtures("elsewhere")
@pytest.mark.parametrize("write", ["api put", "api batch", "api delete", "seal", "retitle"])
def test_every_committed_write_is_seen_by_the_next_poll_within_the_bound(client, books,
                                                                         write):
    api = token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))
    if write == "seal":
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        publishing.put_record(feed=books, key="k3", data=record_data(3))
    etag = warm(client)
    if write == "api put":
        assert api.put("/api/feeds/books/records/k2", record_data(2),
                       format="json").status_code == 201
    elif write == "api batch":
        operations = [{"op": "put", "key": "k2", "record": record_data(2)},
                      {"op": "put", "key": "k3", "record": record_data(3)}]
        assert api.post("/api/feeds/books/batch", {"operations": operations},
                        format="json").status_code == 200
    elif write == "api delete":
        assert api.delete("/api/feeds/books/records/k1").status_code == 204
    elif write == "seal":
        assert len(seal_feed(books)) == 1
    elif write == "retitle":
        assert api.patch("/api/feeds/books/", {"title": "Livres"},
                         format="json").status_code == 200
    response = seen_within(client, changed, etag=etag)
    assert response.status_code == 200
    assert titles(response) == {
        "api put": ["Record 2", "Record 1"],
        "api batch": ["Record 3", "Record 2", "Record 1"],
        "api delete": ["Record 1", "Record 1"],  # the deletion entry, newest first
        "seal": [],  # page 1 is sealed: nothing after it yet
        "retitle": ["Record 1"],
    }[write]
    document = etree.fromstring(response.content)
    if write == "seal":
        assert document.find("a:link[@rel='prev-archive']", NS) is not None
    if write == "retitle":
        assert document.findtext("a:title", namespaces=NS) == "Livres"


def test_this_process_sees_its_own_write_at_once(client, books):
    etag = warm(client)
    publishing.put_record(feed=books, key="k2", data=record_data(2))
    assert poll(client, etag=etag).status_code == 200


def test_a_write_committed_by_another_process_is_seen_within_the_bound(client, books):
    etag = warm(client)
    database = connection.settings_dict
    url = (f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
           f"{database['NAME']}")
    script = ("from archives.log import publishing; from archives.models import Feed; "
              "publishing.put_record(feed=Feed.objects.get(slug='books'), key='k9', "
              "data={'title': 'From elsewhere'}); print('committed', flush=True); "
              "import time; time.sleep(10)")
    writer = subprocess.Popen(  # noqa: S603
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", script], cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "FEEDPUB_SEAL_ON_WRITE": "false"},
        stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "committed"
        response = seen_within(client, changed, etag=etag)
        assert titles(response) == ["From elsewhere", "Record 1"]
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()


@pytest.mark.usefixtures("elsewhere")
def test_a_renamed_or_deleted_feed_is_gone_from_its_old_slug(client, db):
    films = FeedFactory(slug="films")  # no entry yet: it may still be renamed and deleted
    warm(client, "films")
    publishing.update_feed(feed=films, slug="livres")
    seen_within(client, lambda response: response.status_code == 404, slug="films")
    etag = warm(client, "livres")
    publishing.delete_feed(feed=Feed.objects.get(slug="livres"))
    seen_within(client, lambda response: response.status_code == 404, slug="livres",
                etag=etag)
    assert len(heads) == 0


@pytest.mark.usefixtures("elsewhere")
def test_concurrent_polls_and_writes_end_on_the_last_write(client, books):
    """Polls in threads keep heads while writers commit and the listener refreshes them;
    whatever the interleaving, once the writes stop the head kept is the last write's
    (never an older one kept over a newer one)."""
    stop = threading.Event()

    def poller():
        other = Client()
        while not stop.is_set():
            other.get("/feeds/books/")
        connections.close_all()

    def writer(worker):
        for n in range(15):
            publishing.put_record(feed=books, key=f"w{worker}-{n}", data=record_data(n))
        connections.close_all()

    pollers = [threading.Thread(target=poller) for _ in range(3)]
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in pollers + writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    time.sleep(BOUND)
    stop.set()
    for thread in pollers:
        thread.join(timeout=10)
    stored = Feed.objects.get(slug="books")
    assert stored.last_seq == 31
    kept = heads.cached("books")
    assert kept is not None
    assert (kept.last_seq, kept.sealed_pages, kept.subscription_modified) == \
        (stored.last_seq, stored.sealed_pages, stored.subscription_modified)
    entries = etree.fromstring(poll(client).content).findall("a:entry", NS)
    assert len(entries) == stored.last_seq - stored.sealed_seq


@pytest.mark.usefixtures("elsewhere")
def test_losing_the_listener_makes_polls_read_the_database_until_it_listens_again(
        client, books):
    etag = warm(client)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [heads.backend_pid])
    deadline = time.monotonic() + 5
    while heads.listening:
        assert time.monotonic() < deadline, "the listener did not notice its loss"
        time.sleep(0.01)
    publishing.put_record(feed=books, key="k2", data=record_data(2))  # heard by nobody
    with CaptureQueriesContext(connection) as queries:
        assert poll(client, etag=etag).status_code == 200
    assert len(queries) >= 1
    assert heads.wait_until_listening(10), "the listener did not listen again"
    etag = warm(client)
    publishing.put_record(feed=books, key="k3", data=record_data(3))
    response = seen_within(client, changed, etag=etag)
    assert titles(response) == ["Record 3", "Record 2", "Record 1"]


def test_the_heads_kept_stay_within_their_bound(client, settings):
    settings.FEEDPUB_HEADS_CACHE_SIZE = 3
    slugs = [f"feed-{n}" for n in range(5)]
    for slug in slugs:
        FeedFactory(slug=slug)
    for slug in slugs:
        warm(client, slug)
    assert len(heads) == 3
    assert [heads.cached(slug) is not None for slug in slugs] == \
        [False, False, True, True, True]


def test_a_forked_child_starts_with_no_heads_and_no_listener(client, books):
    warm(client)
    pid = os.fork()
    if pid == 0:  # the child reports by its exit status only
        os._exit(0 if not heads.listening and len(heads) == 0 and heads._thread is None
                 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert heads.listening
    assert len(heads) == 1


@pytest.mark.usefixtures("elsewhere")
def test_a_stalled_listener_stops_being_trusted_within_the_lease(client, books, settings,
                                                                monkeypatch):
    """Its connection alive but silent (a partition, a stuck thread): polls read the
    database once the lease runs out, so a change is seen within SETTLE seconds of its
    commit (archives/documents/base.py's Last-Modified relies on it), not after TCP timeouts."""
    settings.FEEDPUB_LAST_MODIFIED_SETTLE = 1
    etag = warm(client)
    stalled, unstall = threading.Event(), threading.Event()
    round_trip = heads._round_trip

    def stuck(db):
        stalled.set()
        unstall.wait(10)
        round_trip(db)

    monkeypatch.setattr(heads, "_round_trip", stuck)
    try:
        assert stalled.wait(2), "the listener made no round trip"
        began = time.monotonic()
        publishing.put_record(feed=books, key="k2", data=record_data(2))  # heard by nobody
        response = seen_within(client, changed, etag=etag, bound=lease() + 0.2)
        assert titles(response) == ["Record 2", "Record 1"]
        assert time.monotonic() - began <= lease() + 0.2
        assert heads.listening
        assert not heads.trusted()
    finally:
        unstall.set()
    assert heads.wait_until_listening(5)
    assert seen_within(client, lambda response: response.status_code == 304,
                       etag=response["ETag"])
