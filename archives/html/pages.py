"""Pages for people: the HTML renderings of a feed, an archive page and a record, and the
feed search. Browsers get them at the documents' own URLs
(archives/serving/negotiation.py) or with `?format=html`.

Each page is a Document (archives/documents/base.py) like the Atom it stands beside: it
owns its inputs, its ETag (a hash of them, distinct from the Atom variant's) and its bytes.
Pages are revalidated by ETag only and carry no Last-Modified: what they show (which page holds an
entry, the feed's current title) changes without a stored date of its own.

Everything shown comes from producers and is escaped by the templates; a producer's link
is a link only when it is http(s).
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from django.core.paginator import Page, Paginator
from django.template.loader import render_to_string

from archives.conf import settings
from archives.db import schemas
from archives.db import search as search_records
from archives.documents import atom, urls
from archives.documents.base import Document, inputs_etag
from archives.documents.feeds import SubscriptionDocument
from archives.documents.pagecache import PageCache
from archives.documents.records import RecordDocument
from archives.models import ArchivePage, Entry, Feed, Record, Snapshot
from archives.validation import xml_problem

from . import activity, metadata
from .metadata import html_link

HTML_TYPE = "text/html; charset=utf-8"
TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "archives"
# What the pages depend on besides data: these templates and modules (in every ETag).
PAGES_RENDERER = hashlib.sha256(b"".join(
    path.read_bytes() for path in sorted([*TEMPLATES.glob("*.html"), Path(__file__),
                                          Path(activity.__file__),
                                          Path(metadata.__file__)]))).hexdigest()

RECENT_ENTRIES = 20  # the feed's page shows at least this many of the newest entries...
MAX_RECENT_ENTRIES = 100  # ...and the unsealed ones, up to this many
ARCHIVE_PAGES_PER_PAGE = 50
HISTORY_PER_PAGE = 100
SEARCH_RESULTS_PER_PAGE = 50
SEARCH_LIMIT = 1000  # matches listed at most; a longer list asks for a narrower query
MAX_QUERY_LENGTH = 200  # a record key's max length


class EntryView(NamedTuple):
    """An entry as a page lists it, with where people read its record and its page."""

    seq: int
    kind: str
    updated: datetime
    title: str
    key: str
    record_page: str
    held_in: str
    held_in_page: str

    @classmethod
    def of(cls, feed: Feed, seq: int, kind: str, updated: datetime, title: str, key: str):
        held_in, url = urls.document_holding(feed, seq)
        return cls(seq, kind, updated, title, key,
                   urls.html_url(urls.record_url(feed.slug, key)), held_in, urls.html_url(url))


def _entries(feed: Feed, entries) -> list[EntryView]:
    return [EntryView.of(feed, *row) for row in
            entries.values_list("seq", "kind", "updated", "title", "record__key")]


# Rendered pages by ETag: the ETag covers everything a page shows, so a page rendered once
# is served again until what it shows changes (rendering one takes tens of milliseconds).
rendered = PageCache(lambda: settings.FEEDPUB_PAGE_CACHE_BYTES // 8)


class _HTMLPage(Document):
    content_type = HTML_TYPE
    honours_if_modified_since = False
    template = ""

    def last_modified(self) -> None:
        return None  # ETag only: see the module docstring

    def inputs(self) -> tuple:
        raise NotImplementedError

    def etag(self) -> str:
        return inputs_etag(type(self).__name__, PAGES_RENDERER, *self.inputs())

    def context(self) -> dict:
        raise NotImplementedError

    def body(self) -> bytes:
        etag = self.etag()
        body = rendered.get(etag)
        if body is None:
            body = render_to_string(self.template, self.context()).encode()
            rendered.put(etag, body, size=len(body))
        return body


def feed_context(feed: Feed) -> dict:
    """What every page of a feed shows in its head."""
    return {"feed": feed, "feed_page": urls.html_url(urls.subscription_url(feed.slug)),
            "subscription": urls.subscription_url(feed.slug),
            "search": urls.url("archives:search", feed.slug)}


def schema_link(feed: Feed, version: int | None) -> atom.Link | None:
    """The link to version `version` of the feed's record schema (None: no schema)."""
    links = atom.schema_links(feed.slug, version)
    return links[0] if links else None


def _page_number(requested: str | None, count: int, per_page: int) -> int:
    """The page Paginator.get_page shows for `requested` (a number, garbage or nothing), so
    that an ETag names what is shown, not how it was asked for."""
    return Paginator(range(count), per_page).get_page(requested).number


class _SealedPages:
    """A feed's archive pages, newest first, as a sequence Paginator can slice: the count
    is the feed's own counter and a slice is one query by (feed, number)."""

    def __init__(self, feed: Feed):
        self.feed = feed

    def __len__(self) -> int:
        return self.feed.sealed_pages

    def __getitem__(self, window: slice):
        newest = self.feed.sealed_pages
        return list(
            ArchivePage.objects.filter(feed=self.feed, number__lte=newest - window.start,
                                       number__gt=newest - window.stop)
            .order_by("-number")
            .values("number", "first_seq", "last_seq", "first_updated", "last_updated"))


# Whether each feed (by uuid) has a complete snapshot, and when that was last asked. A
# feed keeps one once it has one (snapshots are pruned down to the newest few), so "yes" is
# kept; "not yet" is asked again after FEEDPUB_MAX_AGE seconds, as long as a cache may show
# the page anyway: a query a request cost as much as the rest of a 304 of the page.
snapshot_known = PageCache(1024 * 1024)


def has_snapshot(feed: Feed) -> bool:
    """Whether /feeds/<slug>/snapshots/latest leads anywhere yet (else it is a 404)."""
    known = snapshot_known.get(feed.uuid)
    if known is not None and (known[0] or time.monotonic() < known[1]):
        return known[0]
    # Served by the snapshot_feed_latest index.
    found = Snapshot.objects.filter(feed=feed, complete=True).exists()
    snapshot_known.put(feed.uuid, (found, time.monotonic() + settings.FEEDPUB_MAX_AGE),
                       size=100)
    return found


class FeedPage(_HTMLPage):
    """The subscription document's page for people: the feed, its newest changes, its
    archive pages and every format it is served in."""

    template = "archives/feed.html"

    def __init__(self, subscription: SubscriptionDocument, *, page: str | None):
        super().__init__(read_at=subscription.read_at)
        self.subscription, self.feed, self.page = subscription, subscription.feed, page

    def inputs(self) -> tuple:
        # The subscription's inputs (the feed's description and counters) say which
        # entries and pages exist; sealed pages and entries never change.
        return (self.subscription.etag(), self.page_number, self.has_snapshot)

    @cached_property
    def has_snapshot(self) -> bool:
        return has_snapshot(self.feed)

    @cached_property
    def page_number(self) -> int:
        return _page_number(self.page, self.feed.sealed_pages, ARCHIVE_PAGES_PER_PAGE)

    def links(self) -> list[atom.Link]:
        return self.subscription.links()

    def context(self) -> dict:
        feed = self.feed
        unsealed = feed.last_seq - feed.sealed_seq
        shown = min(max(unsealed, RECENT_ENTRIES), MAX_RECENT_ENTRIES)
        recent = Entry.objects.filter(feed=feed, seq__gt=feed.last_seq - shown).order_by("-seq")
        # Paginator only counts and slices what it pages (django-stubs ask for a sequence).
        paginator: Paginator[dict[str, Any]] = Paginator(
            _SealedPages(feed), ARCHIVE_PAGES_PER_PAGE)  # type: ignore[arg-type]
        pages = paginator.get_page(self.page_number)
        return {
            **feed_context(feed),
            "recent": _entries(feed, recent),
            "unsealed": unsealed,
            "unshown": max(unsealed - shown, 0),
            "pages": _with_urls(feed, pages),
            "formats": self.formats(),
            "activity": urls.url("archives:activity", feed.slug),
            "schema": schema_link(feed, feed.schema_version),
        }

    def formats(self) -> list[tuple[str, str | None, str]]:  # (None: not there yet)
        slug = self.feed.slug
        record = urls.record_url(slug, "KEY")
        return [
            ("Atom subscription", urls.subscription_url(slug),
             "subscribe to this in a feed reader; follow prev-archive to the oldest page"),
            ("Atom archive pages", urls.archive_url(slug, 1).replace("/1/", "/N/"),
             "sealed pages, 1 = oldest; immutable once the next page is sealed"),
            ("Archive pages by date", urls.absolute(f"/feeds/{slug}/archives/YYYY/MM/DD/"),
             "redirects to the first page with an entry at or after that day (UTC)"),
            ("Linked pages", urls.url("archives:linked-latest", slug),
             "datareplication linked-pages feed (multipart/mixed)"),
            ("Snapshots", urls.url("archives:snapshot-latest", slug),
             "the live records at one moment, where a linked-pages replica starts")
            if self.has_snapshot else
            ("Snapshots", None, "none yet: the live records at one moment, where a "
             "linked-pages replica starts (manage.py snapshot takes one, and so does "
             "seal_archives --snapshot-every)"),
            ("Record", record, "each record as an Atom entry; ?format=json for JSON"),
            *([("Record schema", urls.url("archives:schema", slug),
                f"JSON Schema of the records' metadata (version {self.feed.schema_version} "
                "in force); /schema/N for version N, immutable")]
              if self.feed.schema_version is not None else []),
            ("Complete feed", urls.url("archives:complete", slug),
             "RFC 5005 complete feed: one entry per live record"),
            ("Paged feed", urls.url("archives:paged", slug), "RFC 5005 paged feed, newest first"),
            ("RSS 2.0", urls.url("archives:rss", slug), "the subscription document as RSS 2.0"),
            ("REST API", urls.absolute("/api/"), "JSON; writes need a token"),
        ]


def _with_urls(feed: Feed, pages: Page) -> Page:
    for page in pages.object_list:
        page["url"] = urls.html_url(urls.archive_url(feed.slug, page["number"]))
    return pages


class ArchivePageHTML(_HTMLPage):
    """An archive page's page for people: its entries in the Atom page's order."""

    template = "archives/archive.html"

    def __init__(self, feed: Feed, page: ArchivePage, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.feed, self.page = feed, page

    @classmethod
    def for_page(cls, slug: str, number: int, *, read_at: datetime) -> ArchivePageHTML:
        """Raises ArchivePage.DoesNotExist."""
        page = (ArchivePage.objects.select_related("feed").defer("body", "multipart")
                .get(feed__slug=slug, number=number))
        return cls(page.feed, page, read_at=read_at)

    def inputs(self) -> tuple:
        feed = self.feed
        # The Atom page's ETag covers its entries and its next-archive link; the feed's
        # description is shown as it is now.
        return (self.page.etag, feed.slug, feed.title, feed.subtitle, feed.author,
                feed.language, feed.page_size, feed.sealed_pages)

    def links(self) -> list[atom.Link]:
        return atom.archive_links(self.feed.slug, self.page.number, has_next=self.page.has_next)

    def context(self) -> dict:
        feed, page = self.feed, self.page
        entries = Entry.objects.filter(feed=feed, seq__gte=page.first_seq,
                                       seq__lte=page.last_seq).order_by("-seq")
        number = page.number
        return {
            **feed_context(feed),
            "page": page,
            "entries": _entries(feed, entries),
            "atom": urls.archive_url(feed.slug, number),
            "previous": urls.html_url(urls.archive_url(feed.slug, number - 1))
            if number > 1 else None,
            "next": urls.html_url(urls.archive_url(feed.slug, number + 1))
            if page.has_next else None,
        }


class RecordPage(_HTMLPage):
    """A record's page for people: the record and its whole history. A deleted record's
    page is still there (served with 410, as its Atom URL is)."""

    template = "archives/record.html"

    def __init__(self, record_document: RecordDocument, *, page: str | None):
        super().__init__(read_at=record_document.read_at)
        self.record_document, self.record, self.page = record_document, record_document.record, page

    def inputs(self) -> tuple:
        feed = self.record.feed
        # Every write to the record moves its `updated` (and adds to its history); seals
        # move its entries from the subscription to archive pages. A version of the feed's
        # schema never changes: its number stands for it.
        return (*self.record_document.inputs(), feed.title, feed.subtitle, feed.page_size,
                feed.sealed_pages, self.record.deleted_at, self.page_number,
                self.record.schema_version)

    @cached_property
    def page_number(self) -> int:
        return _page_number(self.page, self.record.entries.count(), HISTORY_PER_PAGE)

    def links(self) -> list[atom.Link]:
        return self.record_document.links()

    def context(self) -> dict:
        record, feed = self.record, self.record.feed
        url = urls.record_url(feed.slug, record.key)
        history = Paginator(record.entries.order_by("-seq").values_list(
            "seq", "kind", "updated", "title", "record__key"), HISTORY_PER_PAGE
        ).get_page(self.page_number)
        history.object_list = [EntryView.of(feed, *row) for row in history.object_list]
        version = record.schema_version
        schema = None if version is None else schemas.version_checker(feed, version).schema
        return {
            **feed_context(feed),
            "record": record,
            "metadata": metadata.render(record.metadata, schema, language=feed.language),
            "schema": schema_link(feed, version),
            "links": [{**link, "url": html_link(link.get("href", ""))} for link in record.links],
            "history": history,
            "atom": url + "?format=atom",
            "json": url + "?format=json",
        }


def matching_records(feed: Feed, query: str):
    """The feed's records whose key, title or summary contains `query`, whatever its case
    and accents (archives/db/search.py), by key."""
    return search_records.matching(Record.objects.filter(feed=feed), query).order_by("key")


def search(feed: Feed, query: str, page: str | None) -> dict:
    """The context of the search page: records whose key, title or summary contains
    `query`."""
    context = {**feed_context(feed), "query": query, "max_length": MAX_QUERY_LENGTH}
    query = query.strip()
    if not query:
        return {**context,
                "message": "Type part of a record's key, title or summary to search for."}
    if len(query) > MAX_QUERY_LENGTH:
        return {**context, "message": f"That is {len(query)} characters long; a search "
                f"is at most {MAX_QUERY_LENGTH} (the longest a key can be).", "invalid": True}
    if problem := xml_problem(query):  # no record holds it (PostgreSQL refuses NUL)
        return {**context, "message": f"No record can match that: {problem}",
                "invalid": True}
    matches = list(matching_records(feed, query).values_list("key", "title", "deleted_at")
                   [:SEARCH_LIMIT + 1])
    results = Paginator(matches[:SEARCH_LIMIT], SEARCH_RESULTS_PER_PAGE).get_page(page)
    results.object_list = [
        {"key": key, "title": title, "deleted": deleted_at is not None,
         "url": urls.html_url(urls.record_url(feed.slug, key))}
        for key, title, deleted_at in results.object_list]
    return {**context, "results": results, "more": len(matches) > SEARCH_LIMIT,
            "searched": ("key, title or summary" if search_records.folds(query)
                         else "key or title")}
