"""RFC 5005's complete feed (/complete/) and paged feed (/paged/, /paged/<n>/), read as a
user's reader would: feedparser, gPodder's podcastparser, the RELAX NG schema."""

from __future__ import annotations

import gzip
import io
from datetime import UTC, datetime, timedelta

import feedparser
import podcastparser
import pytest
from django.utils.http import http_date
from feedpub_consumer.http import parse_links
from lxml import etree

from archives.conf import settings
from archives.documents import atom, base
from archives.documents.feeds import CompleteDocument
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Entry, Feed, Record

from .factories import record_data
from .walking import NS

FH_COMPLETE = "{http://purl.org/syndication/history/1.0}complete"
FH_ARCHIVE = "{http://purl.org/syndication/history/1.0}archive"


def path_of(url: str) -> str:
    return url.removeprefix(settings.FEEDPUB_BASE_URL)


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def live_atom_ids(feed: Feed) -> list[str]:
    return sorted(record.atom_id for record in
                  Record.objects.filter(feed=feed, deleted_at__isnull=True).select_related("feed"))


def links_of(root) -> dict[str, str]:
    return {link.get("rel"): link.get("href") for link in root.findall("a:link", NS)
            if link.get("type") != "text/html"}


# The complete feed ---------------------------------------------------------------------


def test_the_complete_feed_holds_one_active_entry_per_live_record(client, sealed_feed):
    response = client.get("/feeds/books/complete/")
    assert response.status_code == 200
    assert response.streaming
    parsed = feedparser.parse(body_of(response))
    assert not parsed.bozo
    ids = [entry.id for entry in parsed.entries]
    assert sorted(ids) == live_atom_ids(sealed_feed)  # each live record once, k2 (deleted) not
    assert len(ids) == 4
    by_id = {record.atom_id: record for record in Record.objects.filter(feed=sealed_feed)}
    for entry in parsed.entries:
        record = by_id[entry.id]
        assert entry.link == f"{settings.FEEDPUB_BASE_URL}/feeds/books/records/{record.key}" \
                             "?format=html"
        assert entry.title == record.title  # as it is now: k1 was renamed
        assert entry.summary == record.summary
        assert datetime.fromisoformat(entry.updated) == record.updated
    assert parsed.feed.title == "Books"


def test_the_complete_feed_validates_and_carries_fh_complete(client, sealed_feed,
                                                             atom_validators):
    root = atom_validators(body_of(client.get("/feeds/books/complete/")))
    assert root.find(FH_COMPLETE) is not None
    assert root.find(FH_ARCHIVE) is None
    assert links_of(root) == {"self": f"{settings.FEEDPUB_BASE_URL}/feeds/books/complete/"}
    assert root.find("a:updated", NS).text == \
        sealed_feed.last_updated.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert not root.findall("a:entry/a:content", NS)  # no deletion entries


def test_an_empty_feed_has_an_empty_valid_complete_feed(client, feed, atom_validators):
    root = atom_validators(body_of(client.get("/feeds/books/complete/")))
    assert root.findall("a:entry", NS) == []


def test_the_streamed_pieces_join_into_the_bytes_of_one_tree(client, sealed_feed,
                                                             monkeypatch):
    whole = body_of(client.get("/feeds/books/complete/"))
    monkeypatch.setattr(CompleteDocument, "chunk", 1)  # a query and a piece per record
    pieces = list(client.get("/feeds/books/complete/").streaming_content)
    assert len(pieces) > 4
    assert b"".join(pieces) == whole
    tree = etree.fromstring(whole)
    assert etree.tostring(tree.getroottree(), xml_declaration=True, encoding="utf-8") == whole


def test_the_complete_etag_is_stable_and_moves_with_records_and_the_title(client, sealed_feed):
    first = client.get("/feeds/books/complete/")["ETag"]
    assert client.get("/feeds/books/complete/")["ETag"] == first
    publishing.put_record(feed=sealed_feed, key="k3", data=record_data(3, title="New"))
    second = client.get("/feeds/books/complete/")["ETag"]
    assert second != first
    publishing.update_feed(feed=sealed_feed, title="Books and more")
    third = client.get("/feeds/books/complete/")
    assert third["ETag"] not in (first, second)
    assert feedparser.parse(body_of(third)).feed.title == "Books and more"


def test_the_complete_feed_answers_304_and_head_without_reading_records(
        client, sealed_feed, django_assert_max_num_queries):
    etag = client.get("/feeds/books/complete/")["ETag"]
    with django_assert_max_num_queries(2):  # the feed row, once for each
        not_modified = client.get("/feeds/books/complete/", HTTP_IF_NONE_MATCH=etag)
        head = client.head("/feeds/books/complete/")
    assert not_modified.status_code == 304
    assert head.status_code == 200
    assert head["ETag"] == etag
    assert "Content-Length" not in head
    assert body_of(head) == b""


def test_the_complete_feed_is_dated_by_the_feeds_last_change(client, sealed_feed, settled):
    publishing.update_feed(feed=sealed_feed, subtitle="Changed")
    feed = Feed.objects.get(pk=sealed_feed.pk)
    expected = int(max(feed.subscription_modified, base.RENDERER_MODIFIED).timestamp()) \
        + 1 + settings.FEEDPUB_LAST_MODIFIED_SETTLE
    response = client.get("/feeds/books/complete/")
    assert response["Last-Modified"] == http_date(expected)
    assert client.get("/feeds/books/complete/", HTTP_IF_MODIFIED_SINCE=http_date(expected)) \
        .status_code == 304


@pytest.mark.parametrize("chunk", [1, 2, 1000])
def test_writes_during_a_stream_never_change_what_its_etag_names(sealed_feed, monkeypatch,
                                                                 chunk):
    monkeypatch.setattr(CompleteDocument, "chunk", chunk)
    before = CompleteDocument.for_slug("books")
    expected = before.body()
    document = CompleteDocument.for_slug("books")  # the feed row is read: the ETag is set
    assert document.etag() == before.etag()
    pieces = document.stream()
    first = next(pieces)
    # Written between the feed row and the records: an update, a new record, a deletion
    # and a record that comes back.
    publishing.put_record(feed=sealed_feed, key="k1", data=record_data(1, title="Later"))
    publishing.put_record(feed=sealed_feed, key="k0", data=record_data(0))
    publishing.delete_record(feed=sealed_feed, key="k4")
    publishing.put_record(feed=sealed_feed, key="k2", data=record_data(2))
    assert first + b"".join(pieces) == expected
    after = CompleteDocument.for_slug("books")
    assert after.etag() != before.etag()
    assert b"Later" in after.body()


def test_an_unknown_feed_has_no_complete_feed(client, db):
    response = client.get("/feeds/nope/complete/")
    assert response.status_code == 404


# The paged feed ------------------------------------------------------------------------


@pytest.fixture
def paged_feed(feed):
    """14 entries, page size 3: pages 1-4 sealed, entries 13-14 at /paged/. Record k<n>'s
    first entry is entry n; k2 and k5 change again, k7 is deleted."""
    for n in range(1, 11):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="k2", data=record_data(2, title="Two again"))
    publishing.delete_record(feed=feed, key="k7")
    publishing.put_record(feed=feed, key="k5", data=record_data(5, title="Five again"))
    publishing.put_record(feed=feed, key="k11", data=record_data(11))
    seal_feed(feed)
    return Feed.objects.get(pk=feed.pk)


def log_newest_first(feed: Feed) -> list[tuple[str, datetime]]:
    entries = Entry.objects.filter(feed=feed).select_related("record__feed").order_by("-seq")
    return [(entry.record.atom_id, entry.updated) for entry in entries]


def test_paged_documents_carry_paged_links(client, paged_feed, atom_validators):
    assert paged_feed.sealed_pages == 4
    base = f"{settings.FEEDPUB_BASE_URL}/feeds/books/paged/"
    expected = {
        "": {"self": base, "first": base, "last": base + "1/", "next": base + "4/"},
        "4/": {"self": base + "4/", "first": base, "last": base + "1/", "next": base + "3/",
               "previous": base},
        "2/": {"self": base + "2/", "first": base, "last": base + "1/", "next": base + "1/",
               "previous": base + "3/"},
        "1/": {"self": base + "1/", "first": base, "last": base + "1/", "previous": base + "2/"},
    }
    for suffix, links in expected.items():
        response = client.get(path_of(base + suffix))
        root = atom_validators(response.content)
        assert links_of(root) == links, suffix
        assert root.find(FH_ARCHIVE) is None
        assert {link.rel: link.href for link in parse_links(response["Link"], base)
                if link.attribute("type") != "text/html"} == links


def test_a_reader_following_next_reaches_every_entry_once_in_order(client, paged_feed):
    """gPodder's podcastparser (paged_feed_next) and feedparser (rel="next") each walk
    from /paged/ to the end."""
    url, guids = f"{settings.FEEDPUB_BASE_URL}/feeds/books/paged/", []
    while url:
        parsed = podcastparser.parse(url, io.BytesIO(client.get(path_of(url)).content))
        guids += [episode["guid"] for episode in parsed["episodes"]]
        url = parsed.get("paged_feed_next")
    url, seen = f"{settings.FEEDPUB_BASE_URL}/feeds/books/paged/", []
    while url:
        parsed = feedparser.parse(client.get(path_of(url)).content)
        assert not parsed.bozo
        seen += [(entry.id, datetime.fromisoformat(entry.updated)) for entry in parsed.entries]
        url = next((link.href for link in parsed.feed.links if link.rel == "next"), None)
    log = log_newest_first(paged_feed)
    assert len(log) == 14
    assert seen == log
    assert guids == [atom_id for atom_id, _ in log]


def test_a_feed_whose_entries_fill_its_pages_has_an_empty_first_page_that_links_next(
        client, feed, atom_validators):
    for n in range(1, 7):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)
    root = atom_validators(client.get("/feeds/books/paged/").content)
    assert root.findall("a:entry", NS) == []
    assert links_of(root)["next"].endswith("/feeds/books/paged/2/")


def test_a_feed_without_sealed_pages_is_one_paged_document(client, feed, atom_validators):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    root = atom_validators(client.get("/feeds/books/paged/").content)
    base = f"{settings.FEEDPUB_BASE_URL}/feeds/books/paged/"
    assert links_of(root) == {"self": base, "first": base, "last": base}
    assert len(root.findall("a:entry", NS)) == 1
    assert client.get("/feeds/books/paged/1/").status_code == 404


def test_final_paged_pages_are_immutable_and_do_not_change(client, paged_feed):
    first = {n: client.get(f"/feeds/books/paged/{n}/") for n in (1, 3, 4)}
    assert first[3]["Cache-Control"] == base.IMMUTABLE
    assert first[4]["Cache-Control"] == f"public, max-age={settings.FEEDPUB_MAX_AGE}"
    base.final_pages.clear()  # as another process would read them
    # Entry 15 fills page 5, which is sealed: only page 4's `previous` changes.
    publishing.put_record(feed=paged_feed, key="k12", data=record_data(12))
    seal_feed(paged_feed)
    assert Feed.objects.get(pk=paged_feed.pk).sealed_pages == 5
    for n in (1, 3):
        again = client.get(f"/feeds/books/paged/{n}/")
        assert again.content == first[n].content
        assert again["ETag"] == first[n]["ETag"]
    newest = client.get("/feeds/books/paged/4/")
    assert newest["ETag"] != first[4]["ETag"]
    assert newest["Cache-Control"] == base.IMMUTABLE
    assert newest.content.replace(b"/paged/5/", b"/paged/") == first[4].content


def test_a_paged_page_keeps_the_head_it_was_sealed_with(client, paged_feed):
    publishing.update_feed(feed=paged_feed, title="Renamed")
    assert feedparser.parse(client.get("/feeds/books/paged/2/").content).feed.title == "Books"
    assert feedparser.parse(client.get("/feeds/books/paged/").content).feed.title == "Renamed"


@pytest.mark.parametrize("url", ["/feeds/books/paged/", "/feeds/books/paged/4/",
                                 "/feeds/books/paged/2/"])
def test_paged_documents_answer_304_and_head(client, paged_feed, url):
    response = client.get(url)
    assert client.get(url, HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304
    head = client.head(url)
    assert head.status_code == 200
    assert head["ETag"] == response["ETag"]
    assert head["Link"] == response["Link"]
    assert body_of(head) == b""


def test_a_write_changes_the_first_paged_page_only(client, paged_feed):
    before = {url: client.get(url)["ETag"] for url in ("/feeds/books/paged/",
                                                        "/feeds/books/paged/4/")}
    publishing.put_record(feed=paged_feed, key="k12", data=record_data(12))
    assert client.get("/feeds/books/paged/")["ETag"] != before["/feeds/books/paged/"]
    assert client.get("/feeds/books/paged/4/")["ETag"] == before["/feeds/books/paged/4/"]
    assert client.get("/feeds/books/paged/")["ETag"] != client.get("/feeds/books/")["ETag"]


@pytest.mark.parametrize("url", ["/feeds/books/paged/5/", "/feeds/books/paged/0/",
                                 "/feeds/books/paged/99999999999/", "/feeds/nope/paged/",
                                 "/feeds/nope/paged/1/"])
def test_an_unknown_paged_page_is_a_404_that_says_so(client, paged_feed, url):
    response = client.get(url)
    assert response.status_code == 404


def test_the_paged_page_message_says_where_the_newest_entries_are(paged_feed, rf):
    from django.http import Http404

    from archives.serving import views

    with pytest.raises(Http404, match="has no paged feed page 5"):
        views.paged_page(rf.get("/feeds/books/paged/5/"), "books", 5)


def test_last_modified_of_a_paged_page_is_when_its_bytes_last_changed(client, paged_feed,
                                                                      monkeypatch):
    monkeypatch.setattr(base, "now", lambda: datetime.now(tz=UTC) + timedelta(minutes=1))
    page = paged_feed.pages.get(number=3)
    expected = int(max(page.modified, base.RENDERER_MODIFIED).timestamp()) + 1 \
        + settings.FEEDPUB_LAST_MODIFIED_SETTLE
    assert client.get("/feeds/books/paged/3/")["Last-Modified"] == http_date(expected)


# The complete feed's entries are the log's entries ------------------------------------

TRICKY = {
    "amp": record_data(1, title='Fish & "Chips" <raw> \'quoted\' ]]>', summary="a < b && c > d"),
    "unicode": record_data(2, title="Bøøks ✓ 日本語 \u2028 \u0085", summary="Ünïcödé"),
    "breaks": record_data(3, title="Line\r\nbreak\tand tab", summary="Two\nlines\r\nCR\r"),
    "empty-summary": record_data(4, summary=""),
    "no-links": record_data(5, links=[]),
    "links": record_data(6, links=[
        {"href": "https://example.org/a?x=1&y=<2>", "rel": "related"},
        {"href": "https://example.org/b", "rel": "enclosure", "type": "application/pdf"},
        {"href": "https://example.org/c", "rel": "https://example.org/rel/\"odd\"",
         "title": 'A "title" & <more>\n\tin\r\nlines'},
        {"href": "https://example.org/d", "rel": "describedby",
         "type": "application/ld+json; profile=\"x\"", "title": "Ω"},
    ]),
}


def test_each_complete_entry_is_the_bytes_the_log_renders_for_its_newest_entry(client, feed):
    """The complete feed writes its entries as text, for speed; they must stay the entries
    `_add_entries` renders (archive pages, the subscription document) for the same rows."""
    for key, data in TRICKY.items():
        publishing.put_record(feed=feed, key=key, data=record_data(0))
        publishing.put_record(feed=feed, key=key, data=data)  # the newest entry counts
    publishing.put_record(feed=feed, key="gone", data=record_data(7))
    publishing.delete_record(feed=feed, key="gone")
    feed = Feed.objects.get(pk=feed.pk)

    body = body_of(client.get("/feeds/books/complete/"))

    newest = {row.key: row for row in atom.entry_rows(feed, 1)}  # oldest first: last wins
    assert newest.pop("gone").kind == Entry.Kind.DELETE
    root = atom._feed_head(feed, feed.content_updated, atom.complete_links("books"))
    etree.SubElement(root, FH_COMPLETE)
    atom._add_entries(root, feed, [newest[key] for key in sorted(newest)])
    assert body == atom._serialize(root)
    entries = etree.fromstring(body).findall("a:entry", NS)
    assert [entry.find("a:title", NS).text for entry in entries] == \
        [TRICKY[key]["title"] for key in sorted(TRICKY)]
    titles = {link.get("title") for link in etree.fromstring(body).iterfind(".//a:link", NS)}
    assert TRICKY["links"]["links"][2]["title"] in titles  # escapes in attributes, kept


def test_the_complete_feed_renders_no_deletion_entries(feed):
    row = atom.EntryRow(1, Entry.Kind.DELETE, datetime.now(tz=UTC), "t", "", [], "k", None,
                        datetime.now(tz=UTC))
    with pytest.raises(ValueError, match="deletion entry"):
        atom._active_entries_text(feed, [row])


def test_the_gzipped_complete_feed_is_the_plain_stream_compressed(client, sealed_feed):
    plain = client.get("/feeds/books/complete/")
    compressed = client.get("/feeds/books/complete/", HTTP_ACCEPT_ENCODING="gzip")
    assert compressed.streaming
    assert compressed["Content-Encoding"] == "gzip"
    assert "Content-Encoding" not in plain
    assert compressed["ETag"] == plain["ETag"][:-1] + '-gzip"'
    assert "Accept-Encoding" in compressed["Vary"]
    assert gzip.decompress(body_of(compressed)) == body_of(plain)
    assert client.get("/feeds/books/complete/", HTTP_ACCEPT_ENCODING="gzip",
                      HTTP_IF_NONE_MATCH=compressed["ETag"]).status_code == 304
