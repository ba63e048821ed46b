"""Polls answered from each process's copy of the feeds' heads (archives/db/heads.py): the
fallback to the database (SQLite, inside a transaction) and the rules that keep heads
true, one at a time. tests/test_heads_postgres.py runs them against LISTEN/NOTIFY."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from archives.db import fastsql
from archives.db.heads import Heads, announce, heads, version
from archives.log import publishing
from archives.models import Feed

from .factories import FeedFactory, record_data


@pytest.fixture
def books(db):
    feed = FeedFactory(slug="books", title="Books", page_size=3)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    return feed


@pytest.fixture
def trusting(monkeypatch):
    """A Heads of its own that believes it listens, reading outside any transaction."""
    kept = Heads()
    kept.listening = True
    kept._renewed = float("inf")  # a lease that never ends
    monkeypatch.setattr(Heads, "enabled", staticmethod(lambda: True))
    monkeypatch.setattr(Heads, "start", lambda self: None)
    monkeypatch.setattr(Heads, "reads_committed", staticmethod(lambda: True))
    return kept


@pytest.mark.parametrize("path", ["", "rss/", "paged/", "pages/latest"])
def test_inside_a_transaction_and_on_sqlite_every_poll_reads_the_feed_row(client, books,
                                                                          path):
    first = client.get(f"/feeds/books/{path}")
    headers = {"HTTP_IF_NONE_MATCH": first["ETag"]} if "ETag" in first else {}
    for _ in range(3):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/feeds/books/{path}", **headers).status_code == \
                (304 if headers else 302)
        assert len(queries) == 1
    assert heads._thread is None  # nothing could be kept: no listener either
    assert len(heads) == 0


def test_announce_sends_nothing_on_sqlite(books):
    if connection.vendor == "postgresql":
        pytest.skip("SQLite only")
    with CaptureQueriesContext(connection) as queries:
        announce(books.pk)
    assert not queries


def test_a_head_is_never_replaced_by_an_older_one(books, trusting):
    older = Feed.objects.get(pk=books.pk)
    publishing.put_record(feed=books, key="k2", data=record_data(2))
    newer = Feed.objects.get(pk=books.pk)
    assert version(newer) > version(older)
    with trusting._lock:
        trusting._store(newer)
        trusting._store(older)
    assert trusting.cached("books") is newer


def test_a_head_read_while_a_notification_arrives_is_not_kept(books, trusting, monkeypatch):
    """The read may be older than the change the notification announced, and the listener
    refreshes only heads it keeps: such a read is served, never kept."""
    read = fastsql.feed_by_slug

    def read_while_a_notification_arrives(slug):
        row = read(slug)
        with trusting._lock:  # what the listener does on receipt, before any refresh
            trusting._notify(row.pk)
        return row

    monkeypatch.setattr(fastsql, "feed_by_slug", read_while_a_notification_arrives)
    assert trusting.feed_by_slug("books").slug == "books"
    assert trusting.cached("books") is None
    monkeypatch.setattr(fastsql, "feed_by_slug", read)
    trusting.feed_by_slug("books")
    assert trusting.cached("books") is not None


def test_a_renamed_feed_is_kept_under_its_new_slug_only(db, trusting):
    films = FeedFactory(slug="films")  # no entry yet: the slug may still change
    trusting.feed_by_slug("films")
    renamed = publishing.update_feed(feed=films, slug="livres")
    with trusting._lock:
        trusting._store(Feed.objects.get(pk=renamed.pk))
    assert trusting.cached("films") is None
    assert trusting.cached("livres").pk == films.pk
    assert len(trusting) == 1


def test_nothing_is_trusted_while_not_listening(books, trusting):
    trusting.feed_by_slug("books")
    trusting._set_listening(False)
    assert trusting.cached("books") is None
    with CaptureQueriesContext(connection) as queries:
        trusting.feed_by_slug("books")
    assert len(queries) == 1
    assert len(trusting) == 0


def test_values_derived_from_a_head_live_as_long_as_it_is_kept(books, trusting):
    kept = trusting.feed_by_slug("books")
    trusting.memo(kept)["etag"] = "derived"
    assert trusting.memo(kept) == {"etag": "derived"}
    assert trusting.memo(Feed.objects.get(slug="books")) is None  # a row of one's own
    publishing.put_record(feed=books, key="k2", data=record_data(2))
    with trusting._lock:  # what the listener does on the write's notification
        trusting._store(Feed.objects.get(slug="books"))
    assert trusting.memo(kept) is None
    assert trusting.memo(trusting.cached("books")) == {}


def test_inside_a_transaction_a_read_sees_its_own_write(books, trusting, monkeypatch):
    """A kept head is not the answer inside atomic(): the block may have written it."""
    trusting.feed_by_slug("books")
    assert trusting.cached("books") is not None
    monkeypatch.setattr(Heads, "reads_committed",
                        staticmethod(lambda: not connection.in_atomic_block))
    with transaction.atomic():
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        assert trusting.feed_by_slug("books").last_seq == 2


def test_a_notification_for_another_feed_does_not_stop_a_read_from_being_kept(
        books, trusting, monkeypatch):
    other = FeedFactory(slug="films")
    read = fastsql.feed_by_slug

    def read_while_another_feed_is_notified(slug):
        row = read(slug)
        with trusting._lock:
            trusting._notify(other.pk)
        return row

    monkeypatch.setattr(fastsql, "feed_by_slug", read_while_another_feed_is_notified)
    trusting.feed_by_slug("books")
    assert trusting.cached("books") is not None


def test_the_notifications_remembered_stay_within_their_bound(trusting, monkeypatch):
    monkeypatch.setattr("archives.db.heads.NOTIFIED_KEPT", 3)
    token = (trusting._epoch, trusting._changes)
    with trusting._lock:
        for pk in range(1, 6):
            trusting._notify(pk)
        assert list(trusting._notified) == [3, 4, 5]
        # A feed no longer remembered counts as notified as late as the last one forgotten.
        assert not trusting._unchanged_since(token, 1)
        assert trusting._unchanged_since((trusting._epoch, trusting._changes), 1)


def test_polls_of_a_feed_not_kept_make_one_read_together(books, trusting, monkeypatch):
    """A burst of first polls: one goes to the database, the others take its row."""
    row = Feed.objects.get(slug="books")
    reads, release = [], threading.Event()

    def slow_read(slug):
        reads.append(slug)
        release.wait(5)
        return row

    monkeypatch.setattr(fastsql, "feed_by_slug", slow_read)
    with ThreadPoolExecutor(8) as pool:
        polls = [pool.submit(trusting.feed_by_slug, "books") for _ in range(8)]
        deadline = time.monotonic() + 5
        while not (trusting._flights.get("books") and
                   trusting._flights["books"].waiting == 7):
            assert time.monotonic() < deadline, "the polls never met"
            time.sleep(0.005)
        release.set()
        assert {poll.result(timeout=5).pk for poll in polls} == {books.pk}
    assert reads == ["books"]
    assert trusting.cached("books") is row


def test_a_poll_does_not_take_a_read_that_overlapped_its_feeds_notification(
        books, trusting, monkeypatch):
    row = Feed.objects.get(slug="books")
    reads, release = [], threading.Event()

    def slow_read(slug):
        reads.append(slug)
        if len(reads) == 1:
            release.wait(5)
        return row

    monkeypatch.setattr(fastsql, "feed_by_slug", slow_read)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(trusting.feed_by_slug, "books")
        while not trusting._flights.get("books"):
            time.sleep(0.005)
        second = pool.submit(trusting.feed_by_slug, "books")
        while trusting._flights["books"].waiting < 1:
            time.sleep(0.005)
        trusting.forget(books.pk)  # a write to it committed while it was read
        release.set()
        first.result(timeout=5), second.result(timeout=5)
    assert reads == ["books", "books"]  # the second read again
    assert trusting.cached("books") is None
