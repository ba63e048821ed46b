"""The RSS 2.0 twins (RFC 5005 Appendix B): what an RSS reader sees (feedparser), the same
entries as the Atom documents, frozen like the Atom pages, and checked by checkfeed."""

from __future__ import annotations

import io
import random
import time
from datetime import timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import feedparser
import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils.http import http_date
from lxml import etree

from archives.consumer.checking import check_feed
from archives.documents import atom, rss, urls
from archives.documents.base import final_pages
from archives.log import publishing, sealing
from archives.log.sealing import freeze_rss_pages, seal_all, seal_feed
from archives.models import ArchivePage, Feed

from .broken_feeds import Document, FeedServer
from .factories import record_data
from .feeds_live import make_live_feed, random_history
from .test_checkfeed import codes

ATOM = "http://www.w3.org/2005/Atom"
FH = "http://purl.org/syndication/history/1.0"
RSS_TYPE = "application/rss+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"


def path(url: str) -> str:
    return urlsplit(url).path


def get(client, url: str, **headers):
    return client.get(path(url), headers=headers)


def atom_links(channel: etree._Element) -> dict[str, list[str]]:
    links: dict[str, list[str]] = {}
    for link in channel.iterfind(f"{{{ATOM}}}link"):
        links.setdefault(link.get("rel"), []).append(link.get("href"))
    return links


def valid_rss(body: bytes, *, archive: bool) -> etree._Element:
    """Structural RSS 2.0 + RFC 5005 Appendix B: the channel, with its atom:links."""
    root = etree.fromstring(body)
    assert root.tag == "rss"
    assert root.get("version") == "2.0"
    channels = root.findall("channel")
    assert len(channels) == 1
    channel = channels[0]
    for name in ("title", "link", "description", "language", "lastBuildDate", "pubDate"):
        assert (channel.findtext(name) or "").strip(), f"channel without {name}"
    links = atom_links(channel)
    assert len(links["self"]) == 1
    assert len(links["current"]) == 1
    assert all(len(hrefs) == 1 for hrefs in links.values())
    assert (channel.find(f"{{{FH}}}archive") is not None) == archive
    guids = [item.findtext("guid") for item in channel.iterfind("item")]
    assert len(guids) == len(set(guids)), "a guid twice in one channel"
    for item in channel.iterfind("item"):
        assert item.findtext("title") or item.findtext("description")
        guid = item.find("guid")
        assert guid is not None
        assert guid.get("isPermaLink") == "false"
        assert guid.text
        assert item.findtext("pubDate").endswith(" GMT")
    return channel


def walk_rss(client, start: str) -> list[tuple[str, bytes]]:
    """(url, body) of the subscription twin and every archive twin back by prev-archive."""
    documents, url, seen = [], start, set()
    while url:
        assert url not in seen
        seen.add(url)
        response = get(client, url)
        assert response.status_code == 200
        documents.append((url, response.content))
        url = atom_links(etree.fromstring(response.content).find("channel")).get(
            "prev-archive", [None])[0]
    return documents


# What is served ---------------------------------------------------------------------

def test_every_rss_twin_is_structurally_valid_and_linked_like_its_atom_twin(client, sealed_feed):
    documents = walk_rss(client, "/feeds/books/rss/")
    assert [path(url) for url, _ in documents] == [
        "/feeds/books/rss/", "/feeds/books/archives/2/rss/", "/feeds/books/archives/1/rss/"]
    subscription = valid_rss(documents[0][1], archive=False)
    assert atom_links(subscription) == {
        "self": ["http://127.0.0.1:8000/feeds/books/rss/"],
        "current": ["http://127.0.0.1:8000/feeds/books/rss/"],
        "prev-archive": ["http://127.0.0.1:8000/feeds/books/archives/2/rss/"],
        "hub": ["http://127.0.0.1:8000/websub/"]}  # WebSub
    newest = valid_rss(documents[1][1], archive=True)
    assert atom_links(newest) == {
        "self": ["http://127.0.0.1:8000/feeds/books/archives/2/rss/"],
        "current": ["http://127.0.0.1:8000/feeds/books/rss/"],
        "prev-archive": ["http://127.0.0.1:8000/feeds/books/archives/1/rss/"]}
    oldest = valid_rss(documents[2][1], archive=True)
    assert atom_links(oldest) == {
        "self": ["http://127.0.0.1:8000/feeds/books/archives/1/rss/"],
        "current": ["http://127.0.0.1:8000/feeds/books/rss/"],
        "next-archive": ["http://127.0.0.1:8000/feeds/books/archives/2/rss/"]}
    assert oldest.findtext("link") == "http://127.0.0.1:8000/feeds/books/?format=html"
    assert oldest.findtext("description") == "Metadata records for tests"
    assert oldest.findtext("language") == "en"


def newest_per_id(entries):
    """Atom entries (newest first) as RFC 5005 deduplicates them: each id's newest."""
    seen = set()
    return [entry for entry in entries if not (entry.id in seen or seen.add(entry.id))]


def test_a_record_changed_twice_in_one_document_is_one_item_its_newest(client, feed):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    publishing.put_record(feed=feed, key="k2", data=record_data(2))
    publishing.put_record(feed=feed, key="k1", data=record_data(1, title="Renamed"))
    seal_feed(feed)
    for key in ("k3", "k3", "k4"):
        publishing.put_record(feed=feed, key=key, data=record_data(3, title=f"{key} again"))
    publishing.delete_record(feed=feed, key="k3")

    archive = feedparser.parse(client.get("/feeds/books/archives/1/rss/").content)
    subscription = feedparser.parse(client.get("/feeds/books/rss/").content)

    assert [e.title for e in archive.entries] == ["Renamed", "Record 2"]
    assert [(e.title, e.summary) for e in subscription.entries][:2] == [
        ("k3 again", "The record k3 was deleted."), ("k4 again", "Summary of record 3")]
    assert len(subscription.entries) == 2


@pytest.mark.parametrize(("rss_url", "atom_url"), [
    ("/feeds/books/rss/", "/feeds/books/"),
    ("/feeds/books/archives/1/rss/", "/feeds/books/archives/1/"),
    ("/feeds/books/archives/2/rss/", "/feeds/books/archives/2/"),
])
def test_feedparser_reads_the_same_entries_from_both_twins(client, sealed_feed, rss_url,
                                                           atom_url):
    as_rss = feedparser.parse(client.get(rss_url).content)
    as_atom = feedparser.parse(client.get(atom_url).content)
    assert not as_rss.bozo, as_rss.get("bozo_exception")
    assert as_rss.version == "rss20"
    assert as_rss.feed.language == "en"
    newest = newest_per_id(as_atom.entries)
    assert [(e.id, e.title) for e in as_rss.entries] == [(e.id, e.title) for e in newest]
    assert as_rss.entries
    for rss_entry, atom_entry in zip(as_rss.entries, newest, strict=True):
        html = [link.href for link in atom_entry.get("links", []) if link.get("type") == "text/html"
                and link.rel == "alternate"]
        if html:  # an active entry: the record's page for people
            assert rss_entry.link == html[0]
            assert urlsplit(rss_entry.link).scheme in ("http", "https")
            assert rss_entry.summary == atom_entry.summary
        else:  # a deletion entry: no page, a summary that says so
            assert "link" not in rss_entry
            assert rss_entry.summary == atom_entry.summary
        assert not rss_entry.guidislink
        assert rss_entry.published_parsed == atom_entry.updated_parsed


def test_an_empty_subscription_twin_is_valid_and_dated_by_the_feed(client, feed):
    response = client.get("/feeds/books/rss/")
    assert response["Content-Type"] == RSS_TYPE
    channel = valid_rss(response.content, archive=False)
    assert channel.find("item") is None
    assert "prev-archive" not in atom_links(channel)
    assert not feedparser.parse(response.content).bozo


def test_a_feed_without_subtitle_describes_itself_by_its_title(client, feed):
    Feed.objects.filter(pk=feed.pk).update(subtitle="", language="de")
    channel = valid_rss(client.get("/feeds/books/rss/").content, archive=False)
    assert channel.findtext("description") == "Books"
    assert channel.findtext("language") == "de"


def test_http_headers_of_the_twins(client, sealed_feed, settled):
    final = client.get("/feeds/books/archives/1/rss/")
    assert final["Content-Type"] == RSS_TYPE
    assert final["Cache-Control"] == IMMUTABLE
    assert 'rel="next-archive"' in final["Link"]
    assert "Last-Modified" in final
    newest = client.get("/feeds/books/archives/2/rss/")
    assert newest["Cache-Control"] != IMMUTABLE
    subscription = client.get("/feeds/books/rss/")
    assert subscription["ETag"] != client.get("/feeds/books/")["ETag"]
    head = client.head("/feeds/books/archives/1/rss/")
    assert head.status_code == 200
    assert head.content == b""
    assert head["ETag"] == final["ETag"]
    assert head["Content-Length"] == str(len(final.content))


@pytest.mark.parametrize("url", ["/feeds/books/rss/", "/feeds/books/archives/1/rss/",
                                 "/feeds/books/archives/2/rss/"])
def test_a_current_etag_answers_304(client, sealed_feed, url):
    etag = client.get(url)["ETag"]
    again = client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


def test_the_subscription_twin_changes_with_a_write(client, sealed_feed):
    before = client.get("/feeds/books/rss/")
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    after = client.get("/feeds/books/rss/", headers={"If-None-Match": before["ETag"]})
    assert after.status_code == 200
    assert after["ETag"] != before["ETag"]
    assert feedparser.parse(after.content).entries[0].title == "Record 9"


def test_unknown_feeds_and_pages_are_404_and_writes_405(client, sealed_feed):
    assert client.get("/feeds/nope/rss/").status_code == 404
    assert client.get("/feeds/books/archives/3/rss/").status_code == 404
    assert client.get("/feeds/books/archives/0/rss/").status_code == 404
    assert client.post("/feeds/books/rss/").status_code == 405


def test_the_index_page_offers_both_feeds_for_autodiscovery(client, sealed_feed):
    page = etree.fromstring(client.get("/").content, etree.HTMLParser())
    types = {link.get("type"): link.get("href")
             for link in page.iterfind(".//head/link[@rel='alternate']")}
    assert types == {"application/atom+xml": "/feeds/books/",
                     "application/rss+xml": "/feeds/books/rss/"}


# Frozen like the Atom pages ----------------------------------------------------------

def without_next_archive(body: bytes) -> bytes:
    root = etree.fromstring(body)
    for link in root.findall(f"channel/{{{ATOM}}}link[@rel='next-archive']"):
        link.getparent().remove(link)
    return etree.tostring(root)


def test_an_archive_twin_is_stored_when_sealed_and_only_gains_next_archive(client, feed):
    for n in range(1, 4):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)
    stored = bytes(ArchivePage.objects.get(feed=feed, number=1).rss)
    first = client.get("/feeds/books/archives/1/rss/").content
    assert first == stored == client.get("/feeds/books/archives/1/rss/").content
    # Later writes, a retitle and a second seal: only its next-archive link is new.
    publishing.update_feed(feed=feed, title="Renamed books")
    for n in range(4, 8):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.delete_record(feed=feed, key="k1")
    seal_feed(feed)
    later = client.get("/feeds/books/archives/1/rss/").content
    assert later != first
    assert without_next_archive(later) == without_next_archive(first)
    assert atom_links(etree.fromstring(later).find("channel"))["next-archive"] == [
        "http://127.0.0.1:8000/feeds/books/archives/2/rss/"]
    assert later == bytes(ArchivePage.objects.get(feed=feed, number=1).rss)


def test_next_archive_added_later_gives_the_bytes_of_a_page_sealed_with_it(sealed_feed):
    """Page 1 was sealed in one run with page 2 (its link there from the start): adding the
    link to it sealed alone gives the same bytes."""
    rows = atom.entry_rows(sealed_feed, 1, 3)
    alone = rss.render_archive(sealed_feed, 1, rows)
    assert "next-archive" not in atom_links(etree.fromstring(alone).find("channel"))
    linked = rss.add_next_archive(alone, urls.rss_archive_url("books", 2))
    assert linked == bytes(ArchivePage.objects.get(feed=sealed_feed, number=1).rss)
    assert rss.add_next_archive(linked, urls.rss_archive_url("books", 2)) == linked


def test_a_page_sealed_before_twins_were_stored_is_served_then_backfilled(client, sealed_feed,
                                                                          settled):
    before = client.get("/feeds/books/archives/1/rss/").content
    ArchivePage.objects.filter(feed=sealed_feed).update(rss=None)
    rendered = client.get("/feeds/books/archives/2/rss/")
    # Not frozen yet: the same bytes, but no promise they never change.
    assert rendered["Cache-Control"] != IMMUTABLE
    assert "Last-Modified" not in rendered
    final_pages.clear()  # as in another process
    unfrozen = client.get("/feeds/books/archives/1/rss/")
    assert unfrozen.content == before
    assert unfrozen["Cache-Control"] != IMMUTABLE
    assert freeze_rss_pages() == 2
    assert freeze_rss_pages() == 0
    assert bytes(ArchivePage.objects.get(feed=sealed_feed, number=1).rss) == before
    assert bytes(ArchivePage.objects.get(feed=sealed_feed, number=2).rss) == rendered.content
    frozen = client.get("/feeds/books/archives/1/rss/")
    assert frozen.content == before
    assert frozen["Cache-Control"] == IMMUTABLE
    # Frozen, it carries its exported file's ETag (archives/storage/export.py): a client holding
    # the unfrozen copy is sent the same bytes once more, never a 304 for other bytes.
    assert frozen["ETag"] == f'"{int(frozen_second(frozen)):x}-{len(before):x}"'


def test_a_copy_rendered_before_the_backfill_is_not_current_after_it(client, sealed_feed,
                                                                    settled):
    # Sealed an hour ago, before twins were stored.
    ArchivePage.objects.filter(feed=sealed_feed).update(
        rss=None, modified=F("modified") - timedelta(hours=1))
    client.get("/feeds/books/archives/1/rss/")
    copy_date = http_date(time.time() + 1)  # the Date a cache keeps with that copy
    publishing.update_feed(feed=sealed_feed, title="Renamed feed")
    freeze_rss_pages()
    final_pages.clear()

    again = client.get("/feeds/books/archives/1/rss/", HTTP_IF_MODIFIED_SINCE=copy_date)

    assert again.status_code == 200
    assert b"Renamed feed" in again.content


def test_a_page_without_its_twin_gets_it_with_next_archive_once_its_successor_is_sealed(
        client, sealed_feed):
    ArchivePage.objects.filter(feed=sealed_feed, number=2).update(rss=None)
    for n in range(6, 8):
        publishing.put_record(feed=sealed_feed, key=f"k{n}", data=record_data(n))
    seal_all()  # seals page 3 (page 2 gains next-archive), then backfills page 2's twin
    twin = bytes(ArchivePage.objects.get(feed=sealed_feed, number=2).rss)
    assert atom_links(etree.fromstring(twin).find("channel"))["next-archive"] == [
        "http://127.0.0.1:8000/feeds/books/archives/3/rss/"]
    assert client.get("/feeds/books/archives/2/rss/").content == twin


def test_the_backfill_skips_a_page_that_gained_next_archive_meanwhile(sealed_feed,
                                                                     monkeypatch):
    ArchivePage.objects.filter(feed=sealed_feed, number=2).update(rss=None)
    real = sealing.RssArchiveDocument.freeze

    def freeze_then_seal_the_next_page(feed, number, rows, *, has_next):
        body = real(feed, number, rows, has_next=has_next)
        ArchivePage.objects.filter(feed=sealed_feed, number=2).update(has_next=True)
        return body

    monkeypatch.setattr(sealing.RssArchiveDocument, "freeze",
                        staticmethod(freeze_then_seal_the_next_page))
    assert freeze_rss_pages() == 0
    assert ArchivePage.objects.get(feed=sealed_feed, number=2).rss is None


# checkfeed ----------------------------------------------------------------------------

@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    return make_live_feed(live_server, settings)


def test_checkfeed_accepts_our_rss_twins(live_feed, tmp_path):
    feed, url = live_feed
    rng = random.Random(21)
    keys = [f"k{n}" for n in range(8)]
    random_history(feed, rng, 25, keys)
    rss_url = url + "rss/"
    state = str(tmp_path / "rss.json")
    result = check_feed(rss_url, sample=5, state_path=state)
    assert result.problems == []
    feed.refresh_from_db()
    assert result.documents == feed.sealed_pages + 1
    random_history(feed, rng, 10, keys)  # older twins gain next-archive: allowed
    assert check_feed(rss_url, sample=0, state_path=state).problems == []
    out, errors = io.StringIO(), io.StringIO()
    call_command("checkfeed", rss_url, stdout=out, stderr=errors)
    assert out.getvalue() == ""
    assert "0 problems" in errors.getvalue()


@pytest.fixture
def served(settings, client, sealed_feed):
    """Our own twins, served by the hand-made server (to be broken there)."""
    with FeedServer() as server:
        settings.FEEDPUB_BASE_URL = server.base
        # (twins rendered anew with the server's address: the feed's recorded one too)
        Feed.objects.filter(pk=sealed_feed.pk).update(base_url=server.base)
        ArchivePage.objects.filter(feed=sealed_feed).update(rss=None)  # rendered anew
        freeze_rss_pages()
        for url in ("/feeds/books/rss/", "/feeds/books/archives/1/rss/",
                    "/feeds/books/archives/2/rss/"):
            server.documents[url] = Document(client.get(url).content, content_type=RSS_TYPE)
        yield server


def rewrite(server, url: str, change) -> None:
    root = etree.fromstring(server.documents[url].body)
    change(root.find("channel"))
    server.documents[url] = Document(etree.tostring(root, xml_declaration=True,
                                                    encoding="utf-8"), content_type=RSS_TYPE)


def test_checkfeed_accepts_the_hand_served_copy(served):
    assert check_feed(served.url("/feeds/books/rss/"), sample=0).problems == []


def test_checkfeed_catches_a_permalink_guid_and_a_missing_archive_marker(served):
    def permalink(channel):
        channel.find("item/guid").set("isPermaLink", "true")

    def unmarked(channel):
        channel.remove(channel.find(f"{{{FH}}}archive"))

    rewrite(served, "/feeds/books/archives/2/rss/", permalink)
    rewrite(served, "/feeds/books/archives/1/rss/", unmarked)
    found = codes(check_feed(served.url("/feeds/books/rss/"), sample=0))
    assert ("rss.guid", "/feeds/books/archives/2/rss/") in found
    assert ("rfc5005.archive", "/feeds/books/archives/1/rss/") in found


def test_checkfeed_catches_a_loop_and_wrong_self_and_current(served):
    def loop(channel):
        link = etree.SubElement(channel, f"{{{ATOM}}}link", rel="prev-archive",
                                href=served.url("/feeds/books/archives/2/rss/"))
        channel.find(f"{{{FH}}}archive").addprevious(link)
        channel.find(f"{{{ATOM}}}link[@rel='current']").set("href", served.url("/elsewhere"))

    def wrong_self(channel):
        channel.find(f"{{{ATOM}}}link[@rel='self']").set(
            "href", served.url("/feeds/books/archives/1/rss/"))

    rewrite(served, "/feeds/books/archives/1/rss/", loop)
    rewrite(served, "/feeds/books/archives/2/rss/", wrong_self)
    found = codes(check_feed(served.url("/feeds/books/rss/"), sample=0))
    assert ("rfc5005.loop", "/feeds/books/archives/1/rss/") in found
    assert ("rss.current", "/feeds/books/archives/1/rss/") in found
    assert ("rss.self", "/feeds/books/archives/2/rss/") in found


def test_checkfeed_catches_a_broken_channel_and_items(served):
    def broken(channel):
        channel.getparent().set("version", "0.91")
        channel.remove(channel.find("description"))
        item = channel.find("item")
        item.remove(item.find("guid"))
        item.find("link").text = "javascript:alert(1)"
        item.find("pubDate").text = "yesterday"

    rewrite(served, "/feeds/books/archives/2/rss/", broken)
    found = codes(check_feed(served.url("/feeds/books/rss/"), sample=0))
    page = "/feeds/books/archives/2/rss/"
    assert {("rss.version", page), ("rss.channel", page), ("rss.guid", page),
            ("rss.item", page), ("rss.date", page)} <= found


def test_checkfeed_says_an_atom_document_is_not_rss(served, client):
    served.documents["/feeds/books/rss/"] = Document(client.get("/feeds/books/").content,
                                                     content_type=RSS_TYPE)
    found = codes(check_feed(served.url("/feeds/books/rss/"), sample=0))
    assert ("rss.xml", "/feeds/books/rss/") in found


def frozen_second(response) -> float:
    return parsedate_to_datetime(response["Last-Modified"]).timestamp()
