"""Every Atom document feedpub serves, rendered with lxml into one `bytes`.

Documents carry only stored data (never now()) and absolute URLs built from
FEEDPUB_BASE_URL (documents/urls.py), so a sealed page renders the same whoever seals it,
from any host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from itertools import islice
from operator import attrgetter
from typing import NamedTuple
from urllib.parse import quote

from django.utils.encoding import iri_to_uri
from lxml import etree

from archives.db import fastsql
from archives.db.rows import EntryRow
from archives.formats import record_atom_id, rfc3339
from archives.models import Entry, Feed, Record
from archives.validation import RECORD_ENTRY_TYPE, RECORD_PAGE_TYPE

from .urls import (
    archive_url,
    html_url,
    hub_url,
    paged_url,
    record_url,
    record_url_prefix,
    schema_url,
    subscription_url,
    url,
)

ATOM_NS = "http://www.w3.org/2005/Atom"
FH_NS = "http://purl.org/syndication/history/1.0"
ATOM_TYPE = "application/atom+xml; charset=utf-8"
ATOM_ENTRY_TYPE = "application/atom+xml; type=entry; charset=utf-8"
SCHEMA_TYPE = "application/schema+json"  # a feed's record schema (documents/schemas.py)
A = f"{{{ATOM_NS}}}"
NSMAP = {None: ATOM_NS, "fh": FH_NS}
GENERATOR = "feedpub"


def entry_rows(feed: Feed, first_seq: int, last_seq: int | None = None, *,
               newest_first: bool = False) -> list[EntryRow]:
    """The entries first_seq..last_seq of a feed, as EntryRows, by the (feed, seq) index
    (in one query past the ORM: see fastsql.entry_rows)."""
    return fastsql.entry_rows(feed, first_seq, last_seq, newest_first=newest_first)


def deletion_summary(key: str) -> str:
    """What a deletion entry says to people (Atom-PMH needs only its empty content)."""
    return f"The record {key} was deleted."


class Link(NamedTuple):
    """A link of a document, with the attributes its element carries: what its body and
    its Link header (RFC 8288: `link_header`) both say, from this one value."""

    rel: str
    href: str
    type: str | None = None
    title: str | None = None
    hreflang: str | None = None


def feed_link(rel: str, href: str) -> Link:
    """A link to an Atom feed document."""
    return Link(rel, href, RECORD_ENTRY_TYPE)


def feed_page_link(slug: str) -> Link:
    """For people (and readers' "open" buttons): the feed's own page, which every feed
    document links as its text/html alternate."""
    return Link("alternate", html_url(subscription_url(slug)), HTML_TYPE)


def archive_links(slug: str, number: int, *, has_next: bool) -> list[Link]:
    """The links of an archive document: what its XML and its Link header both carry.
    (next-archive has no type: sealed pages have carried it so since the first.)"""
    links = [feed_link("self", archive_url(slug, number)),
             feed_link("current", subscription_url(slug))]
    if number > 1:
        links.append(feed_link("prev-archive", archive_url(slug, number - 1)))
    if has_next:
        links.append(next_archive_link(archive_url(slug, number + 1)))
    links.append(feed_page_link(slug))
    return links


def next_archive_link(href: str) -> Link:
    return Link("next-archive", href)


def subscription_links(feed: Feed) -> list[Link]:
    links = [feed_link("self", subscription_url(feed.slug)),
             feed_link("current", subscription_url(feed.slug))]
    if feed.sealed_pages:
        links.append(feed_link("prev-archive", archive_url(feed.slug, feed.sealed_pages)))
    links += [hub_link(), feed_page_link(feed.slug),
              *schema_links(feed.slug, feed.schema_version)]
    return links


def schema_links(slug: str, version: int | None) -> list[Link]:
    """The link to version `version` of a feed's record schema (rel="describedby", IANA's
    registry), which every document rendered from the feed as it is now carries for the
    version in force (never a sealed page: its bytes are frozen); none while it has none.
    The version's own URL, not /schema: what it names never changes under a cache."""
    if version is None:
        return []
    return [Link("describedby", schema_url(slug, version), SCHEMA_TYPE)]


def hub_link() -> Link:
    """Links to something other than a feed document carry no media type."""
    return Link("hub", hub_url())


def link_header(links: Iterable[Link]) -> str:
    """The RFC 8288 Link header value of `links`, each with its attributes: its target as
    a URI (an IRI's characters percent-encoded, RFC 3987 3.1), parameters as quoted
    strings, a title that is not ASCII as title* (RFC 8187)."""
    return ", ".join(map(_link_value, links))


# What a URI may hold as it is (RFC 3986's characters): most hrefs, which need no encoding.
_URI = re.compile(r"[-A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%]*")


def _link_value(link: Link) -> str:
    href = link.href if _URI.fullmatch(link.href) else iri_to_uri(link.href)
    value = f'<{href}>; rel={_quoted(link.rel)}'
    if link.type:
        value += f"; type={_quoted(link.type)}"
    if link.title:
        value += (f"; title={_quoted(link.title)}" if _is_header_text(link.title)
                  else f"; title*=UTF-8''{quote(link.title, safe='')}")
    if link.hreflang:
        value += f"; hreflang={_quoted(link.hreflang)}"
    return value


def _quoted(text: str) -> str:
    """An RFC 9110 quoted-string."""
    if "\\" in text or '"' in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _is_header_text(text: str) -> bool:
    """Printable ASCII (and tab): what a quoted-string carries unambiguously."""
    return text.isascii() and all(char == "\t" or " " <= char <= "~" for char in text)


# Documents ----------------------------------------------------------------------------

def render_subscription(feed: Feed, rows: list[EntryRow]) -> bytes:
    """The subscription document: the unsealed entries, newest first (rows in that order)."""
    # Empty, it takes the feed's last change, never now() (docs/how-it-works/invariants.md).
    updated = rows[0].updated if rows else feed.content_updated
    root = _feed_head(feed, updated, subscription_links(feed))
    _add_entries(root, feed, rows)
    return _serialize(root)


def render_archive(feed: Feed, number: int, rows: list[EntryRow], *, has_next=False) -> bytes:
    """Archive page `number`, rows oldest first. With `has_next` (page number + 1 is sealed
    in the same transaction) its next-archive link is there from the start, byte for byte
    where add_next_archive would have put it.

    Sealing's renderer: the head is lxml's, the entries `_entries_text`'s, which are the
    bytes `_add_entries` writes for them (tests/test_sealing.py holds the page to the
    tree rendered whole by lxml), at ~a third of the cost.
    """
    root = _feed_head(feed, rows[-1].updated, archive_links(feed.slug, number, has_next=False))
    etree.SubElement(root, f"{{{FH_NS}}}archive")
    if has_next:
        _insert_next_archive(root, archive_url(feed.slug, number + 1))
    return with_entries(_serialize(root), b"</feed>", _entries_text(feed, rows[::-1]))


def with_entries(head: bytes, end: bytes, entries: str) -> bytes:
    """`head`, a serialized document whose last child has just closed before `end`, with
    `entries` (text) added as its last children: the bytes lxml writes for the whole tree."""
    if not head.endswith(end):
        raise ValueError(f"a document head ending {head[-20:]!r}, not {end!r}")
    return b"".join((head[:-len(end)], entries.encode(), end))


def add_next_archive(body: bytes, href: str) -> bytes:
    """The one change a sealed page may receive: its next-archive link, and nothing else."""
    root = etree.fromstring(body)
    if root.find(f"{A}link[@rel='next-archive']") is not None:
        return body
    _insert_next_archive(root, href)
    return _serialize(root)


def _insert_next_archive(root: etree._Element, href: str) -> None:
    root.find(f"{{{FH_NS}}}archive").addprevious(
        etree.Element(LINK, link_attributes(next_archive_link(href))))


def record_links(record: Record) -> list[Link]:
    """The links of a record's own document: itself, its page for people, its feed, the
    schema it was checked under and the producer's links."""
    slug = record.feed.slug
    url = record_url(slug, record.key)
    return [Link("self", url, RECORD_ENTRY_TYPE), Link("alternate", html_url(url), HTML_TYPE),
            feed_link("up", subscription_url(slug)),
            # The version of the feed's schema its metadata (the content) was checked under.
            *schema_links(slug, None if record.is_deleted else record.schema_version),
            *(Link(link["rel"], link["href"], link.get("type") or None,
                   link.get("title") or None) for link in record.links)]


def render_record(record: Record) -> bytes:
    """A live record's own URL: an Atom Entry Document, with its metadata as JSON text."""
    feed = record.feed
    root = etree.Element(f"{A}entry", {XML_LANG: record.language or feed.language},
                         nsmap={None: ATOM_NS})
    _text(root, "id", record_atom_id(feed.uuid, record.key))
    _text(root, "title", record.title, type="text")
    _text(root, "updated", rfc3339(record.updated))
    _text(root, "published", rfc3339(record.created))
    _text(etree.SubElement(root, f"{A}author"), "name", feed.author)
    if record.summary:
        _text(root, "summary", record.summary, type="text")
    _link_elements(root, record_links(record))
    metadata = json.dumps(record.metadata, ensure_ascii=False, indent=2, sort_keys=True)
    _text(root, "content", metadata, type="text")
    return _serialize(root)


def _feed_head(feed: Feed, updated: datetime, links: list[Link]) -> etree._Element:
    root = etree.Element(f"{A}feed", {XML_LANG: feed.language}, nsmap=NSMAP)
    _text(root, "id", feed.atom_id)
    _text(root, "title", feed.title, type="text")
    if feed.subtitle:
        _text(root, "subtitle", feed.subtitle, type="text")
    _text(root, "updated", rfc3339(updated))
    _text(etree.SubElement(root, f"{A}author"), "name", feed.author)
    _text(root, "generator", GENERATOR)
    _link_elements(root, links)
    return root


def _link_elements(parent: etree._Element, links: Iterable[Link]) -> None:
    """atom:link elements of `links` (attributes: rel, type, href, title, hreflang)."""
    for link in links:
        etree.SubElement(parent, LINK, link_attributes(link))


def link_attributes(link: Link) -> dict[str, str]:
    """A link's XML attributes, in the order its element has them."""
    attributes = {"rel": link.rel}
    if link.type:
        attributes["type"] = link.type
    attributes["href"] = link.href
    if link.title:
        attributes["title"] = link.title
    if link.hreflang:
        attributes["hreflang"] = link.hreflang
    return attributes


XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
HTML_TYPE = RECORD_PAGE_TYPE  # (so validation keeps producers from adding another)
ENTRY, ID, TITLE, UPDATED, SUMMARY, CONTENT, LINK = (
    f"{A}{name}" for name in ("entry", "id", "title", "updated", "summary", "content", "link"))
TEXT_TYPE = {"type": "text"}


def _add_entries(root: etree._Element, feed: Feed, rows: list[EntryRow]) -> None:
    # The hot loop of sealing (a million entries is a million passes): element names
    # and attributes are built once, and nothing is looked up twice.
    base_record_url = record_url_prefix(feed.slug)
    sub_element = etree.SubElement
    for row in rows:
        # A record's own language, when it has one, is its entry's (the feed's, the rest).
        entry = sub_element(root, ENTRY, {XML_LANG: row.language} if row.language else None)
        sub_element(entry, ID).text = record_atom_id(feed.uuid, row.key)
        sub_element(entry, TITLE, TEXT_TYPE).text = row.title
        sub_element(entry, UPDATED).text = rfc3339(row.updated)
        if row.kind == Entry.Kind.DELETE:
            # Atom-PMH deletion entry: no alternate link, an empty content element; the
            # summary is for people.
            sub_element(entry, SUMMARY, TEXT_TYPE).text = deletion_summary(row.key)
            sub_element(entry, CONTENT)
            continue
        if row.summary:
            sub_element(entry, SUMMARY, TEXT_TYPE).text = row.summary
        record = base_record_url + row.key
        sub_element(entry, LINK, rel="alternate", type=RECORD_ENTRY_TYPE, href=record)
        sub_element(entry, LINK, rel="alternate", type=HTML_TYPE, href=html_url(record))
        _producer_links(entry, row.links)


def _producer_links(parent: etree._Element, links: list[dict]) -> None:
    for link in links:
        attributes = {"rel": link["rel"], "href": link["href"]}
        if link.get("type"):
            attributes["type"] = link["type"]
        if link.get("title"):
            attributes["title"] = link["title"]
        etree.SubElement(parent, LINK, attributes)


def _text(parent: etree._Element, name: str, text: str, **attributes: str) -> None:
    etree.SubElement(parent, f"{A}{name}", attributes).text = text


def _serialize(root: etree._Element) -> bytes:
    return etree.tostring(root, xml_declaration=True, encoding="utf-8")


# RFC 5005's other two kinds of feed: complete (section 2) and paged (section 3) ---------

FH_COMPLETE = f"{{{FH_NS}}}complete"
# What makes a sealed page an archive document; its paged twin carries paged links instead.
_ARCHIVE_RELS = ("self", "current", "prev-archive", "next-archive")
_PAGED_RELS = ("self", "first", "last", "next", "previous")


def complete_links(slug: str, schema_version: int | None = None) -> list[Link]:
    return [feed_link("self", url("archives:complete", slug)), feed_page_link(slug),
            *schema_links(slug, schema_version)]


def render_complete(feed: Feed, rows: Iterable[EntryRow], *, chunk: int = 1000):
    """The complete feed, in pieces of bytes: its head, then `chunk` entries at a time, so
    that a million records never make one tree. `rows` are the live records (as active
    entries); the feed-level updated is the feed's last change, which no record's passes.

    The pieces join into the bytes lxml writes for the whole tree: the head is lxml's, the
    entries are `_active_entries_text`'s, which are `_add_entries`' bytes.
    """
    root = _feed_head(feed, feed.content_updated,
                      complete_links(feed.slug, feed.schema_version))
    etree.SubElement(root, FH_COMPLETE)
    head = _serialize(root)
    end = b"</feed>"
    yield head[:-len(end)]
    rows = iter(rows)
    while batch := list(islice(rows, chunk)):
        yield _active_entries_text(feed, batch).encode()
    yield end


# A complete feed is a million entries a download: building them as lxml elements and
# serializing those cost ~33 us an entry, the most of the stream's time. These strings are
# the bytes `_add_entries` writes for an active entry: the same elements and attributes in
# the same order, escaped as libxml2 escapes (text: & < > and CR; attribute values: those,
# ", LF and TAB). tests/test_complete_paged.py holds them to `_add_entries`' bytes for the
# same rows; change both together.
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_ATTRIBUTE_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;",
                                    '"': "&quot;", "\n": "&#10;", "\t": "&#9;"})


def escape_text(text: str) -> str:
    # Most strings need nothing: four searches in C cost less than one translate().
    if "&" in text or "<" in text or ">" in text or "\r" in text:
        return text.translate(_TEXT_ESCAPES)
    return text


def escape_attribute(value: str) -> str:
    if "&" in value or "<" in value or ">" in value or '"' in value or "\r" in value \
            or "\n" in value or "\t" in value:
        return value.translate(_ATTRIBUTE_ESCAPES)
    return value


def _active_entries_text(feed: Feed, rows: list[EntryRow]) -> str:
    """The XML of `rows` as active entries, as `_add_entries` would write them."""
    return _entries_text(feed, rows, deletions=False)


# The fields an entry shows, read by name in one C call a row (sealing's hot loop).
_ENTRY_FIELDS = attrgetter("kind", "updated", "title", "summary", "links", "key", "language")


def _entries_text(feed: Feed, rows: list[EntryRow], *, deletions: bool = True) -> str:
    """The XML of `rows`, as `_add_entries` would write them (with `deletions` False, a
    deletion entry is an error: the complete feed has none)."""
    base_record_url = escape_attribute(record_url_prefix(feed.slug))
    feed_uuid, text, attribute, deletion = feed.uuid, escape_text, escape_attribute, \
        Entry.Kind.DELETE
    record_links = (f'<link rel="alternate" type="{attribute(RECORD_ENTRY_TYPE)}" href="{{0}}"/>'
                    f'<link rel="alternate" type="{attribute(HTML_TYPE)}" href="{{1}}"/>').format
    parts: list[str] = []
    append = parts.append
    for kind, updated, title, summary, links, key, language in map(_ENTRY_FIELDS, rows):
        start = f'<entry xml:lang="{attribute(language)}">' if language else "<entry>"
        head = (f'{start}<id>{record_atom_id(feed_uuid, key)}</id>'
                f'<title type="text">{text(title)}</title>'
                f"<updated>{rfc3339(updated)}</updated>")
        if kind == deletion:
            if not deletions:
                raise ValueError(f"{key}: a deletion entry in a complete feed")
            append(f'{head}<summary type="text">{text(deletion_summary(key))}</summary>'
                   "<content/></entry>")
            continue
        record = base_record_url + attribute(key)
        summary_element = f'<summary type="text">{text(summary)}</summary>' if summary else ""
        producer_links = "".join(map(_producer_link_text, links)) if links else ""
        # (html_url only appends a query, which needs no escaping)
        append(f"{head}{summary_element}"
               f"{record_links(record, html_url(record))}{producer_links}</entry>")
    return "".join(parts)


def _producer_link_text(link: dict) -> str:
    attribute = escape_attribute
    media_type = f' type="{attribute(link["type"])}"' if link.get("type") else ""
    title = f' title="{attribute(link["title"])}"' if link.get("title") else ""
    return (f'<link rel="{attribute(link["rel"])}" href="{attribute(link["href"])}"'
            f"{media_type}{title}/>")


def paged_links(slug: str, number: int | None, *, sealed_pages: int,
                schema_version: int | None = None) -> list[Link]:
    """The links of a paged feed document, newest first: /paged/ holds the unsealed
    entries (and links the record schema in force), /paged/<n>/ archive page n's; `next`
    goes to older entries."""
    if number is None:
        links = [feed_link("self", paged_url(slug)), feed_link("first", paged_url(slug)),
                 feed_link("last", paged_url(slug, 1) if sealed_pages else paged_url(slug))]
        if sealed_pages:
            links.append(feed_link("next", paged_url(slug, sealed_pages)))
        return [*links, feed_page_link(slug), *schema_links(slug, schema_version)]
    links = [feed_link("self", paged_url(slug, number)), feed_link("first", paged_url(slug)),
             feed_link("last", paged_url(slug, 1))]
    if number > 1:
        links.append(feed_link("next", paged_url(slug, number - 1)))
    links.append(feed_link("previous", paged_url(slug, number + 1) if number < sealed_pages
                           else paged_url(slug)))
    return [*links, feed_page_link(slug)]


def render_paged(feed: Feed, rows: list[EntryRow]) -> bytes:
    """/paged/: the subscription document's entries (newest first) under paged links."""
    updated = rows[0].updated if rows else feed.content_updated
    root = _feed_head(feed, updated, paged_links(feed.slug, None, sealed_pages=feed.sealed_pages,
                                                 schema_version=feed.schema_version))
    _add_entries(root, feed, rows)
    return _serialize(root)


def paged_from_archive(body: bytes, links: list[Link]) -> bytes:
    """Archive page bytes as stored (head and entries frozen at sealing) turned into a
    paged feed document: no fh:archive, and the paged ones of `links` where its archive
    links were (the others, its page for people, it has already)."""
    root = etree.fromstring(body)
    old = [link for link in root.iterfind(f"{A}link") if link.get("rel") in _ARCHIVE_RELS]
    anchor = old[0]
    for link in links:
        if link.rel in _PAGED_RELS:
            anchor.addprevious(etree.Element(LINK, link_attributes(link)))
    for element in [*old, root.find(f"{{{FH_NS}}}archive")]:
        root.remove(element)
    return _serialize(root)
