"""checkfeed for RSS 2.0 archived feeds (RFC 5005 Appendix B), usable against any server.

The walk, the checks between pages (one-way links, loops, order, fh:archive on every page
reached by prev-archive), the HTTP checks and the state file are checker.Checker's: this
module only reads each document as RSS (an item is an entry, its guid the entry's id, its
pubDate its time, the channel's lastBuildDate the document's) and checks its structure:

- `rss.xml`: the body is well-formed XML whose root is `rss` with a `channel`.
- `rss.version`: `rss@version` is 2.0.
- `rss.channel`: exactly one channel, with a title, a link and a description.
- `rss.item`: every item has a title or a description; its link, if any, is an http(s) URL.
- `rss.guid`: every item has a guid with isPermaLink="false" (RFC 5005 dedups RSS items by
  guid: it names the entry, not a page).
- `rss.date`: pubDate and lastBuildDate, where present, are RFC 822 dates; no item is
  newer than its document's lastBuildDate.
- `rss.self`, `rss.current`: every document has a self link naming it and a current link
  naming the subscription document the walk started from.
- `pmh.alternate`: a sample of the live items' links resolve (duplicates by guid, RFC 5005
  Appendix B: the newest pubDate wins, a tie goes to the newer document).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from lxml import etree

from .atom import _PARSER, FH, AtomDocument, AtomEntry, DocumentError, _absolute, _links
from .check import RSS, Checker, CheckResult, Page
from .http import Response

RSS_MEDIA_TYPE = "application/rss+xml"


def parse_rss_document(body: bytes, url: str, *, base: str | None = None) -> AtomDocument:
    """An RSS 2.0 document read as the checker reads an Atom one: channel atom:links (made
    absolute), fh:archive / fh:complete, and each item as an entry."""
    try:
        root = etree.fromstring(body, _PARSER, base_url=base or url)  # noqa: S320 - hardened
    except etree.XMLSyntaxError as error:
        raise DocumentError(f"not well-formed XML: {error}") from None
    if root.tag != "rss":
        raise DocumentError(f"the root element is {root.tag!r}, not rss")
    channel = root.find("channel")
    if channel is None:
        raise DocumentError("the rss element has no channel")
    links: dict[str, list[str]] = {}
    for rel, href in _links(channel):
        links.setdefault(rel, []).append(href)
    return AtomDocument(
        url=url, root=root, id=None, updated=rfc822(channel.findtext("lastBuildDate")),
        links=links, is_archive=channel.find(f"{FH}archive") is not None,
        is_complete=channel.find(f"{FH}complete") is not None,
        entries=[_item(item) for item in channel.iterfind("item")],
    )


def _item(item: etree._Element) -> AtomEntry:
    link = item.find("link")
    href = (link.text or "").strip() if link is not None else ""
    return AtomEntry(
        id=(item.findtext("guid") or "").strip(), updated=rfc822(item.findtext("pubDate")),
        title=item.findtext("title") or "", summary=item.findtext("description") or "",
        links=({"rel": "alternate", "href": _absolute(link, href)},) if href else (),
        has_content=False, content_empty=False, content_src=None,
    )


def rfc822(text: str | None) -> datetime | None:
    """An RSS date as an aware UTC datetime; None when missing or not a date."""
    try:
        moment = parsedate_to_datetime((text or "").strip())
    except (TypeError, ValueError, IndexError):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class RssChecker(Checker):
    format = RSS
    media_type = RSS_MEDIA_TYPE

    def run(self, url: str, first: Response | None = None) -> CheckResult:
        self.start = url  # every document's current link names it
        return super().run(url, first)

    def parse(self, body: bytes, url: str, *, base: str) -> AtomDocument:
        return parse_rss_document(body, url, base=base)

    def _check_document(self, page: Page, document: AtomDocument) -> None:
        url = page.url
        root = document.root
        channel = root.find("channel")
        if root.get("version") != "2.0":
            self._problem(url, "rss.version", f"rss version is {root.get('version')!r}, not 2.0")
        if len(root.findall("channel")) != 1:
            self._problem(url, "rss.channel", "the rss element must hold exactly one channel")
        for name in ("title", "link", "description"):
            if not (channel.findtext(name) or "").strip():
                self._problem(url, "rss.channel", f"the channel has no {name}")
        for name in ("lastBuildDate", "pubDate"):
            if channel.find(name) is not None and rfc822(channel.findtext(name)) is None:
                self._problem(url, "rss.date", f"the channel's {name} is not an RFC 822 date")
        for number, item in enumerate(channel.iterfind("item"), 1):
            self._check_item(url, item, number, document.updated)
        self._check_navigation(page, document)

    def _check_item(self, url: str, item: etree._Element, number: int,
                    built: datetime | None) -> None:
        guid = item.find("guid")
        label = f"item {number}" + (f" ({guid.text.strip()})" if guid is not None and guid.text
                                    else "")
        if guid is None or not (guid.text or "").strip():
            self._problem(url, "rss.guid", f"{label} has no guid")
        elif guid.get("isPermaLink") != "false":
            self._problem(url, "rss.guid", f'{label}: its guid is not isPermaLink="false"')
        if item.find("title") is None and item.find("description") is None:
            self._problem(url, "rss.item", f"{label} has neither a title nor a description")
        link = (item.findtext("link") or "").strip()
        if link and urlsplit(link).scheme not in ("http", "https"):
            self._problem(url, "rss.item", f"{label}: its link {link!r} is not an http(s) URL")
        if item.find("pubDate") is not None:
            published = rfc822(item.findtext("pubDate"))
            if published is None:
                self._problem(url, "rss.date", f"{label}: its pubDate is not an RFC 822 date")
            elif built is not None and published > built:
                self._problem(url, "rss.date", f"{label} is newer than the lastBuildDate")

    def _check_navigation(self, page: Page, document: AtomDocument) -> None:
        url = page.url
        selves = document.links.get("self", [])
        if selves != [url] and selves != [page.response.url]:
            self._problem(url, "rss.self", f"self links {selves or 'missing'}; one naming "
                                           f"{url} expected")
        current = document.link("current")
        if document.is_archive and not current:
            self._problem(url, "rfc5005.current", "an archive document without a current link")
        elif current and current != self.start:
            self._problem(url, "rss.current",
                          f"current is {current}, not the subscription document {self.start}")
        archive_links = [rel for rel in ("prev-archive", "next-archive") if document.link(rel)]
        if document.is_complete and archive_links:
            self._problem(url, "rfc5005.complete",
                          f"fh:complete beside {' and '.join(archive_links)} links")

    keeps_entries = True  # read again by the sample below

    def _check_alternates(self) -> None:
        """A sample of live items: their link must resolve. Items are duplicates by guid
        (RFC 5005 Appendix B): the newest pubDate wins, a tie the newer document's."""
        if self.sample <= 0:
            return
        winners: dict[str, tuple[AtomEntry, str]] = {}
        for url in self.chain:  # newest document first
            document = self._document(url)
            for entry in document.entries if document is not None else ():
                won = winners.get(entry.id)
                if entry.id and (won is None or (entry.updated and won[0].updated
                                                 and entry.updated > won[0].updated)):
                    winners[entry.id] = (entry, url)
        live = [{"id": guid, "alternate": entry.alternates[0], "source": url}
                for guid, (entry, url) in winners.items() if entry.alternates]
        chosen = random.Random(self.seed).sample(live, min(self.sample, len(live)))  # noqa: S311
        for record in chosen:
            self._check_alternate(record)
