"""Validators tell the truth: each document's ETag changes exactly when its bytes do, and
its Last-Modified moves forward whenever they change, so that If-Modified-Since answered
by us or by any cache in front never keeps a client on stale bytes
(docs/how-it-works/invariants.md#http)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.http import http_date
from lxml import etree

from archives.documents import base
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed

from .factories import FeedFactory, record_data
from .walking import NS

IMMUTABLE = "public, max-age=31536000, immutable"


class Clock:
    """The wall clock of documents' change stamps and of their Last-Modified checks."""

    def __init__(self):
        self.now = datetime(2030, 5, 1, 12, 0, 0, 100_000, tzinfo=UTC)

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(base, "now", lambda: clock.now)
    monkeypatch.setattr(base, "change_stamp", lambda: clock.now)
    monkeypatch.setattr(timezone, "now", lambda: clock.now)  # entries' `updated`
    monkeypatch.setattr(base, "RENDERER_MODIFIED", clock.now - timedelta(days=1))
    return clock


@pytest.fixture
def books(db, clock, settings):
    """4 entries of page size 3: page 1 sealed (the newest page), k4 in the subscription."""
    settings.FEEDPUB_LAST_MODIFIED_SETTLE = 1
    feed = FeedFactory(slug="books", title="Books", page_size=3)
    for n in range(1, 5):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)
    clock.tick(5)
    return feed


def fresh(feed: Feed) -> Feed:
    return Feed.objects.get(pk=feed.pk)


CHANGES = {
    "retitle": lambda feed: publishing.update_feed(feed=fresh(feed), title="Livres"),
    "subtitle": lambda feed: publishing.update_feed(feed=fresh(feed), subtitle="All of them"),
    "author": lambda feed: publishing.update_feed(feed=fresh(feed), author="The library"),
    "same title": lambda feed: publishing.update_feed(feed=fresh(feed), title="Books"),
    "put another record": lambda feed: publishing.put_record(
        feed=feed, key="k9", data=record_data(9)),
    "update k1": lambda feed: publishing.put_record(
        feed=feed, key="k1", data=record_data(1, title="Renamed")),
    "identical put of k1": lambda feed: publishing.put_record(
        feed=feed, key="k1", data=record_data(1)),
    "delete k3": lambda feed: publishing.delete_record(feed=feed, key="k3"),
    "seal page 2": lambda feed: fill_pages(feed, 5, 6),
    # The documents rendered from the feed as it is now link its record schema in force.
    "give a schema": lambda feed: publishing.update_feed(feed=fresh(feed), record_schema=SCHEMA),
    "a schema, then the same again": lambda feed: schemas(feed, SCHEMA, dict(SCHEMA)),
    "a schema, then another": lambda feed: schemas(feed, SCHEMA, {
        **SCHEMA, "properties": {"n": {"type": "integer", "title": "Number"}}}),
    "a schema, then none": lambda feed: schemas(feed, SCHEMA, None),
}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


def schemas(feed: Feed, *versions: dict | None) -> None:
    for schema in versions:
        publishing.update_feed(feed=fresh(feed), record_schema=schema)


def fill_pages(feed: Feed, *numbers: int) -> None:
    """Records k<n> and a seal (the test database never commits, so writes do not seal)."""
    for n in numbers:
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(fresh(feed))
URLS = ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/records/k1",
        "/feeds/books/records/k1?format=json",
        "/feeds/books/rss/", "/feeds/books/archives/1/rss/"]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("url", URLS)
def test_validators_change_exactly_when_the_bytes_do(client, books, clock, url, change):
    before = client.get(url)
    clock.tick(0.3)
    CHANGES[change](books)
    clock.tick(2)
    after = client.get(url)

    assert before.status_code == after.status_code == 200
    bytes_changed = before.content != after.content
    assert (before["ETag"] != after["ETag"]) == bytes_changed
    if bytes_changed:
        assert date(after) > date(before)
    else:
        assert date(after) >= date(before)


def date(response) -> datetime:
    return parsedate_to_datetime(response["Last-Modified"])


def test_the_changes_above_change_every_document_at_least_once(client, books, clock):
    # Guards the test above against a fixture in which nothing ever changes.
    changed = set()
    for change in CHANGES.values():
        before = {url: client.get(url).content for url in URLS}
        change(books)
        clock.tick(2)
        changed |= {url for url in URLS if client.get(url).content != before[url]}
    assert changed == set(URLS)


def test_a_document_changed_in_the_current_second_has_no_last_modified_yet(
        client, books, clock):
    publishing.put_record(feed=books, key="k9", data=record_data(9))
    clock.tick(0.5)
    unsettled = client.get("/feeds/books/")
    clock.tick(1.5)  # the second is over, and the settle margin too
    settled = client.get("/feeds/books/")

    assert "Last-Modified" not in unsettled
    assert settled.content == unsettled.content
    # The first whole second at which the write is certainly visible: its own second
    # over, and one more (FEEDPUB_LAST_MODIFIED_SETTLE).
    written = clock.now - timedelta(seconds=2)
    assert date(settled) == written.replace(microsecond=0) + timedelta(seconds=2)


def test_if_modified_since_answers_304_once_a_document_is_settled(client, books):
    for url in URLS:
        response = client.get(url)
        by_date = client.get(url, HTTP_IF_MODIFIED_SINCE=response["Last-Modified"])
        assert by_date.status_code == 304, url
        assert by_date["ETag"] == response["ETag"]


def test_a_second_write_in_the_same_second_is_not_hidden_by_a_date_poll(client, books, clock):
    clock.now = clock.now.replace(microsecond=100_000)
    publishing.put_record(feed=books, key="a", data=record_data(1))
    clock.tick(0.1)
    first = client.get("/feeds/books/")
    fetched = http_date(clock.now.timestamp())  # its Date header
    clock.tick(0.3)
    publishing.put_record(feed=books, key="b", data=record_data(2))
    clock.tick(3)

    # Without a Last-Modified, caches send the Date of their copy (RFC 9110 13.1.3).
    assert "Last-Modified" not in first
    poll = client.get("/feeds/books/", HTTP_IF_MODIFIED_SINCE=fetched)
    assert poll.status_code == 200
    keys = [entry.findtext("a:title", namespaces=NS) for entry in
            etree.fromstring(poll.content).findall("a:entry", NS)]
    assert len(keys) == 3  # k4, a and b


def test_the_newest_page_gains_its_next_archive_link_under_a_new_date(client, books, clock):
    before = client.get("/feeds/books/archives/1/")
    clock.tick(0.1)
    fill_pages(books, 5, 6)  # page 2, within the same second
    clock.tick(2)
    by_etag = client.get("/feeds/books/archives/1/", HTTP_IF_NONE_MATCH=before["ETag"])
    by_date = client.get("/feeds/books/archives/1/",
                         HTTP_IF_MODIFIED_SINCE=before["Last-Modified"])

    assert before["Cache-Control"] != IMMUTABLE
    for after in (by_etag, by_date):
        assert after.status_code == 200
        assert after["Cache-Control"] == IMMUTABLE
        assert date(after) > date(before)
        links = [link.get("rel") for link in etree.fromstring(after.content).findall(
            "a:link", NS)]
        assert "next-archive" in links


def test_a_page_changed_within_a_second_of_a_read_gets_a_later_date(client, db, clock, settings):
    settings.FEEDPUB_LAST_MODIFIED_SETTLE = 1
    feed = FeedFactory(slug="books", page_size=2)
    fill_pages(feed, 1, 2)
    newest = client.get("/feeds/books/archives/1/")
    fetched = http_date(clock.now.timestamp())
    clock.tick(0.2)
    fill_pages(feed, 3, 4)
    final = client.get("/feeds/books/archives/1/")
    clock.tick(2)
    settled = client.get("/feeds/books/archives/1/", HTTP_IF_MODIFIED_SINCE=fetched)

    assert "Last-Modified" not in newest
    # Final bytes never change again, but their date must still be later than the Date
    # of any copy of the bytes before them.
    assert final["Cache-Control"] == IMMUTABLE
    assert "Last-Modified" not in final
    assert settled.status_code == 200
    assert date(settled) > parsedate_to_datetime(fetched)


def test_the_feed_author_reaches_the_record_document_and_its_etag(client, books, clock):
    before = client.get("/feeds/books/records/k1")
    publishing.update_feed(feed=fresh(books), author="The library")
    clock.tick(2)
    after = client.get("/feeds/books/records/k1", HTTP_IF_NONE_MATCH=before["ETag"])

    assert after.status_code == 200
    assert b"The library" in after.content


def test_a_new_renderer_changes_every_rendered_etag(client, books, monkeypatch):
    before = {url: client.get(url)["ETag"] for url in URLS}
    monkeypatch.setattr(base, "RENDERER", "a later release")
    after = {url: client.get(url)["ETag"] for url in URLS}

    for url in ["/feeds/books/", "/feeds/books/records/k1"]:
        assert before[url] != after[url]
    # Frozen pages keep their stored bytes, and with them their ETag.
    assert before["/feeds/books/archives/1/"] == after["/feeds/books/archives/1/"]


@pytest.mark.parametrize("url", ["/", "/feeds/books/", "/feeds/books/archives/1/",
                                 "/feeds/books/records/k1"])
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_write_methods_on_read_only_urls_answer_405_with_allow(books, url, method):
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(url)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("key", ["a%00", "a%00b", "%0B", "x" * 201])
def test_a_record_url_with_a_key_no_record_can_have_is_a_404(client, books, key):
    assert client.get(f"/feeds/books/records/{key}").status_code == 404
    assert client.head(f"/feeds/books/records/{key}").status_code == 404
