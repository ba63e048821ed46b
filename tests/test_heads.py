"""Polls answered from each process's copy of the feeds' heads (archives/heads.py): the
fallback to the database (SQLite, inside a transaction) and the rules that keep heads
true, one at a time. tests/test_heads_postgres.py runs them against LISTEN/NOTIFY."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from archives import fastsql, publishing
from archives.heads import Heads, announce, heads, version
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
        trusting._changes += 1  # what the listener does on receipt, before any refresh
        return row

    monkeypatch.setattr(fastsql, "feed_by_slug", read_while_a_notification_arrives)
    assert trusting.feed_by_slug("books").slug == "books"
    assert trusting.cached("books") is None
    monkeypatch.setattr(fastsql, "feed_by_slug", read)
    trusting.feed_by_slug("books")
    assert trusting.cached("books") is not None


def test_a_renamed_feed_is_kept_under_its_new_slug_only(books, trusting):
    trusting.feed_by_slug("books")
    renamed = publishing.update_feed(feed=books, slug="livres")
    with trusting._lock:
        trusting._store(Feed.objects.get(pk=renamed.pk))
    assert trusting.cached("books") is None
    assert trusting.cached("livres").pk == books.pk
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
