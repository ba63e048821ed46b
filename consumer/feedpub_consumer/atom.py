"""Reading Atom documents from strangers (no network, no external entities, no giant
trees) into compact entries and links, and the rows a reconstruction keeps of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from lxml import etree

if TYPE_CHECKING:
    pass  # the caller's progress bar, if any


ATOM_NS = "http://www.w3.org/2005/Atom"
FH_NS = "http://purl.org/syndication/history/1.0"
A = f"{{{ATOM_NS}}}"
FH = f"{{{FH_NS}}}"
EPOCH = datetime.min.replace(tzinfo=UTC)


# Atom documents ------------------------------------------------------------------------

class DocumentError(Exception):
    """A body that is not a well-formed Atom feed document."""


@dataclass(frozen=True)
class AtomEntry:
    id: str
    updated: datetime | None
    title: str
    summary: str
    links: tuple[dict[str, str], ...]
    has_content: bool
    content_empty: bool  # no text, no child elements and no src
    content_src: str | None
    language: str = ""  # its own xml:lang (none: its feed's)

    @property
    def alternates(self) -> list[str]:
        # RFC 4287 4.2.7.2: a link without rel is an alternate link.
        return [link["href"] for link in self.links if link.get("rel", "alternate") == "alternate"]

    @property
    def is_deletion(self) -> bool:
        """Atom-PMH deletion entry: no alternate link and an empty content element."""
        return not self.alternates and self.has_content and self.content_empty


@dataclass
class AtomDocument:
    url: str
    root: etree._Element
    id: str | None
    updated: datetime | None
    links: dict[str, list[str]]
    is_archive: bool
    is_complete: bool
    entries: list[AtomEntry]
    # (oldest, newest) atom:updated of the entries (None: none is dated), kept by `slim`.
    entry_span: tuple[datetime, datetime] | None = None

    def __post_init__(self):
        if self.entry_span is None:
            times = [entry.updated for entry in self.entries if entry.updated]
            self.entry_span = (min(times), max(times)) if times else None

    def slim(self) -> AtomDocument:
        """The document without its tree and entries: its links and dates, what a walk
        keeps of a page it has checked (a million entries in memory are gigabytes)."""
        return replace(self, root=None, entries=[])

    def link(self, rel: str) -> str | None:
        hrefs = self.links.get(rel)
        return hrefs[0] if hrefs else None

    @property
    def prev_archive(self) -> str | None:
        return self.link("prev-archive")

    @property
    def next_archive(self) -> str | None:
        return self.link("next-archive")


# Documents come from strangers: no network, no giant trees, no external entities. Internal
# entities (declared in the document) are expanded, as XML requires; libxml2 refuses an
# expansion that grows too much (the "billion laughs").
_PARSER = etree.XMLParser(resolve_entities="internal", no_network=True, huge_tree=False)


def parse_document(body: bytes, url: str, *, base: str | None = None) -> AtomDocument:
    """Parse an Atom feed document; link hrefs are made absolute (xml:base, then `base`).

    `url` names the document (the link that led to it); `base` is the URL it was retrieved
    from after redirects, against which RFC 3986 (5.1.3) resolves relative references.
    """
    try:
        root = etree.fromstring(body, _PARSER, base_url=base or url)  # noqa: S320 - hardened
    except etree.XMLSyntaxError as error:
        raise DocumentError(f"not well-formed XML: {error}") from None
    if root.tag != f"{A}feed":
        raise DocumentError(f"the root element is {root.tag!r}, not an Atom feed")
    links: dict[str, list[str]] = {}
    for rel, href in _links(root):
        links.setdefault(rel, []).append(href)
    entries = [_entry(element) for element in root.iterfind(f"{A}entry")]
    return AtomDocument(
        url=url, root=root, id=_child_text(root, "id"),
        updated=parse_timestamp(_child_text(root, "updated")), links=links,
        is_archive=root.find(f"{FH}archive") is not None,
        is_complete=root.find(f"{FH}complete") is not None, entries=entries,
    )


def _links(element: etree._Element) -> Iterable[tuple[str, str]]:
    for link in element.iterfind(f"{A}link"):
        href = link.get("href")
        if href is not None:
            yield link.get("rel", "alternate"), _absolute(link, href)


# Most hrefs are absolute http(s) URLs that urljoin would hand back unchanged; skipping it
# halves the time a page takes to read.
_PLAIN_ABSOLUTE = re.compile(r"https?://[^/?#\s[\];][^?#\s[\];]*(?:\?[^#\s]+)?(?:#\S+)?\Z")


def _absolute(link: etree._Element, href: str) -> str:
    """`href` resolved against the link's base: xml:base, else the document's URL."""
    href = href.strip()
    if _PLAIN_ABSOLUTE.match(href):
        return href
    try:
        return urljoin(link.base or "", href)
    except ValueError as error:  # e.g. "http://[oops": an unbalanced IPv6 bracket
        raise DocumentError(f"the link {href!r} is not a URL ({error})") from None


XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_ENTRY_TEXTS = {f"{A}id", f"{A}updated", f"{A}title", f"{A}summary"}


def _entry(element: etree._Element) -> AtomEntry:
    # One pass over the children: a find() per field cost more than parsing the page.
    texts: dict[str, str] = {}
    links = []
    content = None
    for child in element:
        if child.tag == f"{A}link" and child.get("href") is not None:
            links.append(_link(child))
        elif child.tag == f"{A}content" and content is None:
            content = child
        elif child.tag in _ENTRY_TEXTS and child.tag not in texts:
            texts[child.tag] = child.text or "" if len(child) == 0 else "".join(child.itertext())
    return AtomEntry(
        id=texts.get(f"{A}id", "").strip(),
        updated=parse_timestamp(texts.get(f"{A}updated")),
        title=texts.get(f"{A}title", ""),
        summary=texts.get(f"{A}summary", ""),
        links=tuple(links),
        has_content=content is not None,
        content_empty=content is not None and not (content.text or "").strip()
        and len(content) == 0 and content.get("src") is None,
        content_src=content.get("src") if content is not None else None,
        language=element.get(XML_LANG, ""),
    )


def _link(link: etree._Element) -> dict[str, str]:
    attributes = {name: value for name in ("rel", "type", "hreflang", "title")
                  if (value := link.get(name))}
    attributes["href"] = _absolute(link, link.get("href"))
    return attributes


def feed_links(root: etree._Element) -> list[dict[str, str]]:
    """The feed element's own links, as an entry's are read (rel, type, hreflang, title)."""
    return [_link(link) for link in root.iterfind(f"{A}link") if link.get("href") is not None]


def repeated_alternates(links: Iterable[dict[str, str]]) -> list[str]:
    """RFC 4287 4.1.1 (a feed) and 4.1.2 (an entry): at most one alternate link of each
    type and hreflang. What is repeated, said as a person reads it ("2 alternate links of
    type text/html and no hreflang")."""
    counts: dict[tuple[str, str], int] = {}
    for link in links:
        if link.get("rel", "alternate") == "alternate":
            kind = (link.get("type", ""), link.get("hreflang", ""))
            counts[kind] = counts.get(kind, 0) + 1
    return [f"{count} alternate links of {f'type {kind}' if kind else 'no type'} and "
            f"{f'hreflang {lang}' if lang else 'no hreflang'}"
            for (kind, lang), count in counts.items() if count > 1]


def _child_text(element: etree._Element, name: str) -> str | None:
    child = element.find(f"{A}{name}")
    return None if child is None else "".join(child.itertext())


_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$"
)


def parse_timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 date-time as an aware UTC datetime (fraction cut to microseconds)."""
    match = _RFC3339.match((text or "").strip().upper())
    if not match:
        return None
    day, clock, fraction, zone = match.groups()
    fraction = (fraction or "0")[:6].ljust(6, "0")
    zone = "+00:00" if zone == "Z" else zone
    try:
        return datetime.fromisoformat(f"{day}T{clock}.{fraction}{zone}").astimezone(UTC)
    except ValueError:
        return None


def timestamp_text(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Reconstruction ------------------------------------------------------------------------

# What the reconstruction keeps of an entry: (atom id, updated, document's updated, deleted,
# the record as JSON). Compact, and no tree: the pages are gone once their rows exist.
Row = tuple[str, str, str, bool, str]


def document_rows(document: AtomDocument) -> list[Row]:
    """A document's entries as rows, in the order they are applied: oldest first."""
    doc_updated = timestamp_text(document.updated) or ""
    entries = sorted(document.entries, key=lambda e: e.updated or EPOCH)
    return [_row(entry, doc_updated, document.url) for entry in entries if entry.id]


def _row(entry: AtomEntry, doc_updated: str, source: str) -> Row:
    updated = timestamp_text(entry.updated) or ""
    deleted = entry.is_deletion
    record = {"id": entry.id, "updated": updated, "doc_updated": doc_updated,
              "deleted": deleted, "title": entry.title, "source": source}
    if not deleted:
        alternates = entry.alternates
        record.update(summary=entry.summary, alternate=alternates[0] if alternates else None,
                      links=list(entry.links), language=entry.language)
    return entry.id, updated, doc_updated, deleted, json.dumps(record)
