"""The RSS 2.0 twins of the archived feed (RFC 5005 Appendix B), rendered with lxml.

Each twin holds the entries of its Atom document, in the same order (the subscription twin
the unsealed entries, newest first; archive twin n those of archive page n), but only the
newest of a record's entries within one document. An item's `guid` is its Atom entry's
atom:id, never a permalink, and RSS allows no guid twice in a channel (the W3C validator's
"guid values must not be duplicated"); in RSS two items with one guid are duplicates
(RFC 5005 Appendix B), of which a reader keeps the newer, so the older says nothing a
reader would keep. RFC 5005's links go in `atom:link` elements of the channel and point at
the RSS twins, and archive twins carry `fh:archive`. Like the
Atom documents they carry stored data only (never now()): a sealed twin renders the same
whoever seals it.
"""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter

from lxml import etree

from archives.formats import http_date, record_atom_id
from archives.models import Entry, Feed

from .atom import (
    ATOM_NS,
    FH_NS,
    GENERATOR,
    EntryRow,
    Link,
    deletion_summary,
    escape_text,
    feed_page_link,
    hub_link,
    link_attributes,
    schema_links,
    with_entries,
)
from .urls import html_url, record_url_prefix, rss_archive_url, rss_subscription_url

RSS_TYPE = "application/rss+xml; charset=utf-8"
RSS_MEDIA_TYPE = "application/rss+xml"
NSMAP = {"atom": ATOM_NS, "fh": FH_NS}
ATOM_LINK = f"{{{ATOM_NS}}}link"
FH_ARCHIVE = f"{{{FH_NS}}}archive"


def rss_link(rel: str, href: str) -> Link:
    """A link to an RSS twin."""
    return Link(rel, href, RSS_MEDIA_TYPE)


def archive_links(slug: str, number: int, *, has_next: bool) -> list[Link]:
    """The links of archive twin `number`: its atom:link elements, its channel's link (the
    feed's page for people: `feed_page_link`) and its Link header."""
    links = [rss_link("self", rss_archive_url(slug, number)),
             rss_link("current", rss_subscription_url(slug))]
    if number > 1:
        links.append(rss_link("prev-archive", rss_archive_url(slug, number - 1)))
    if has_next:
        links.append(rss_link("next-archive", rss_archive_url(slug, number + 1)))
    links.append(feed_page_link(slug))
    return links


def subscription_links(feed: Feed) -> list[Link]:
    links = [rss_link("self", rss_subscription_url(feed.slug)),
             rss_link("current", rss_subscription_url(feed.slug))]
    if feed.sealed_pages:
        links.append(rss_link("prev-archive", rss_archive_url(feed.slug, feed.sealed_pages)))
    # WebSub (archives/push/), the channel's link, and the Atom document's describedby (an
    # atom:link of the channel, as the others: the same schema whatever the format).
    links += [hub_link(), feed_page_link(feed.slug),
              *schema_links(feed.slug, feed.schema_version)]
    return links


def rfc822(moment: datetime) -> str:
    """An RSS date (RFC 822, as RFC 1123 writes it): `Tue, 03 Jun 2003 09:39:21 GMT`,
    which is what HTTP dates are."""
    return http_date(moment)


def render_subscription(feed: Feed, rows: list[EntryRow]) -> bytes:
    """The subscription twin: the unsealed entries, newest first (rows in that order)."""
    updated = rows[0].updated if rows else feed.content_updated
    rss, channel = _channel(feed, updated, subscription_links(feed))
    _add_items(channel, feed, rows)
    return _serialize(rss)


def render_archive(feed: Feed, number: int, rows: list[EntryRow], *, has_next=False) -> bytes:
    """Archive twin `number`, rows oldest first; items in the Atom page's order. With
    `has_next` its next-archive link is there from the start, byte for byte where
    add_next_archive would have put it. Sealing's renderer: the channel is lxml's, the
    items `_items_text`'s, which are the bytes `_add_items` writes for them."""
    rss, channel = _channel(feed, rows[-1].updated,
                            archive_links(feed.slug, number, has_next=False))
    etree.SubElement(channel, FH_ARCHIVE)
    if has_next:
        _insert_next_archive(channel, rss_archive_url(feed.slug, number + 1))
    return with_entries(_serialize(rss), b"</channel></rss>", _items_text(feed, rows[::-1]))


def add_next_archive(body: bytes, href: str) -> bytes:
    """The one change a sealed twin may receive: its next-archive link, and nothing else."""
    rss = etree.fromstring(body)
    channel = rss.find("channel")
    if channel.find(f"{ATOM_LINK}[@rel='next-archive']") is not None:
        return body
    _insert_next_archive(channel, href)
    return _serialize(rss)


def _insert_next_archive(channel: etree._Element, href: str) -> None:
    channel.find(FH_ARCHIVE).addprevious(
        etree.Element(ATOM_LINK, link_attributes(rss_link("next-archive", href))))


def _channel(feed: Feed, updated: datetime, links: list[Link]):
    """The channel of `links`: the feed's page for people is its `link`, the others are
    atom:link elements."""
    page = feed_page_link(feed.slug)
    rss = etree.Element("rss", version="2.0", nsmap=NSMAP)
    channel = etree.SubElement(rss, "channel")
    sub_element = etree.SubElement
    sub_element(channel, "title").text = feed.title
    if page in links:
        sub_element(channel, "link").text = page.href
    # RSS requires a description: the title stands in for a missing subtitle.
    sub_element(channel, "description").text = feed.subtitle or feed.title
    sub_element(channel, "language").text = feed.language
    # The newest entry's time (the Atom twin's atom:updated), never the time of rendering.
    date = rfc822(updated)
    sub_element(channel, "pubDate").text = date
    sub_element(channel, "lastBuildDate").text = date
    sub_element(channel, "generator").text = GENERATOR
    for link in links:
        if link != page:
            sub_element(channel, ATOM_LINK, link_attributes(link))
    return rss, channel


GUID_ATTRIBUTES = {"isPermaLink": "false"}


def _add_items(channel: etree._Element, feed: Feed, rows: list[EntryRow]) -> None:
    """Items of `rows` (newest first), each record's newest only (see the module docstring)."""
    # Sealing's hot loop, as atom._add_entries: nothing is looked up twice.
    base_record_url = record_url_prefix(feed.slug)
    sub_element = etree.SubElement
    shown = set()
    for row in rows:
        if row.key in shown:
            continue
        shown.add(row.key)
        item = sub_element(channel, "item")
        sub_element(item, "title").text = row.title
        if row.kind == Entry.Kind.DELETE:
            # No link: the record's page is gone (410); the description says why.
            sub_element(item, "description").text = deletion_summary(row.key)
        else:
            sub_element(item, "link").text = html_url(base_record_url + row.key)
            if row.summary:
                sub_element(item, "description").text = row.summary
        sub_element(item, "guid", GUID_ATTRIBUTES).text = record_atom_id(feed.uuid, row.key)
        sub_element(item, "pubDate").text = rfc822(row.updated)


def _serialize(root: etree._Element) -> bytes:
    return etree.tostring(root, xml_declaration=True, encoding="utf-8")


# The fields an item shows, read by name in one C call a row (sealing's hot loop).
_ITEM_FIELDS = attrgetter("kind", "updated", "title", "summary", "key")


# Sealing renders a million items a million entries: as lxml elements they cost as much as
# the Atom entries. These strings are the bytes `_add_items` writes, escaped as libxml2
# escapes (see atom.escape_text); tests/test_rss.py holds them to `_add_items`' bytes for
# the same rows. Change both together.
def _items_text(feed: Feed, rows: list[EntryRow]) -> str:
    """The XML of `_add_items`' items for `rows` (newest first), as text."""
    base_record_url = record_url_prefix(feed.slug)
    feed_uuid, text, deletion = feed.uuid, escape_text, Entry.Kind.DELETE
    shown = set()
    parts: list[str] = []
    append = parts.append
    for kind, updated, title, summary, key in map(_ITEM_FIELDS, rows):
        if key in shown:
            continue
        shown.add(key)
        if kind == deletion:
            middle = f"<description>{text(deletion_summary(key))}</description>"
        else:
            middle = f"<link>{text(html_url(base_record_url + key))}</link>"
            if summary:
                middle += f"<description>{text(summary)}</description>"
        append(f"<item><title>{text(title)}</title>{middle}"
               f'<guid isPermaLink="false">{record_atom_id(feed_uuid, key)}</guid>'
               f"<pubDate>{rfc822(updated)}</pubDate></item>")
    return "".join(parts)
