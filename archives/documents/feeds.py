"""The documents of a whole feed: the subscription document and its archive pages (Atom), their
RSS 2.0 twins (RFC 5005 Appendix B), and RFC 5005's complete and paged feeds.

Each class knows its inputs, links, validators and bytes (archives/documents/base.py says
how validators tell the truth to every cache); views serve them, sealing freezes the
archive pages and their twins.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from functools import cached_property

from archives.conf import settings
from archives.db import fastsql
from archives.db.heads import heads
from archives.db.rows import ENTRY_ROW
from archives.models import ArchivePage, Entry, Feed

from . import atom, base, rss, urls
from .base import (
    Document,
    FrozenDocument,
    Rendered,
    bytes_etag,
    final_pages,
    inputs_etag,
    subscription_bodies,
)
from .pagecache import PageCache


class FeedDocument(Document):
    """A document of a whole feed, found by its slug: what it shows follows from the feed
    row (and the log it counts), read in one small query."""

    def __init__(self, feed: Feed, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.feed = feed

    def memo(self) -> dict | None:
        """Per kind of document, as long as the feed's head is kept in memory
        (archives/db/heads.py): a poll that finds nothing new then hashes nothing either."""
        memo = heads.memo(self.feed)
        return None if memo is None else memo.setdefault(type(self), {})

    @classmethod
    def for_topic(cls, feed: Feed, *, read_at: datetime) -> FeedDocument:
        return cls(feed, read_at=read_at)

    @classmethod
    def for_slug(cls, slug: str):
        """Raises Feed.DoesNotExist. A poll that finds nothing new renders nothing (the
        ETag follows from the feed row alone) and, with the feed's head in memory
        (archives/db/heads.py), queries nothing."""
        read_at = base.now()
        return cls(heads.feed_by_slug(slug), read_at=read_at)


class SubscriptionDocument(FeedDocument):
    """/feeds/<slug>/: the unsealed entries, newest first."""

    # What tells this document's renderings apart from its twins' (RssSubscriptionDocument):
    # in its ETag and its cache key.
    kind = "subscription"
    head_without_length = True
    render = staticmethod(atom.render_subscription)
    feed_links = staticmethod(atom.subscription_links)
    # The feed's columns its bytes show: with content_updated, its ETag's inputs. (The
    # entries sealed_seq+1..last_seq never change once written, so their range stands
    # for them.)
    shown: tuple[str, ...] = (
        "uuid", "slug", "title", "subtitle", "author", "language", "page_size", "sealed_pages",
        "last_seq", "schema_version")

    @cached_property
    def _etag(self) -> str:
        memo = self.memo()
        if memo is not None and "etag" in memo:
            return memo["etag"]
        feed = self.feed
        # content_updated is the updated of an empty document.
        etag = inputs_etag(self.kind, *(getattr(feed, name) for name in self.shown),
                           feed.content_updated)
        if memo is not None:
            memo["etag"] = etag
        return etag

    def etag(self) -> str:
        return self._etag

    def modified(self) -> datetime:
        return max(self.feed.subscription_modified, base.RENDERER_MODIFIED)

    def links(self) -> list[atom.Link]:
        return self.feed_links(self.feed)

    def body(self) -> bytes:
        feed = self.feed
        key = (self.kind, feed.slug)
        cached = subscription_bodies.get(key)
        if cached is not None and cached.etag == self.etag():
            return cached.body
        rows = atom.entry_rows(feed, feed.sealed_seq + 1, feed.last_seq, newest_first=True)
        body = self.render(feed, rows)
        subscription_bodies.put(key, Rendered(self.etag(), body), size=len(body))
        return body


class ArchiveDocument(FrozenDocument):
    """/feeds/<slug>/archives/<n>/: a sealed page, served from the bytes frozen when it
    was sealed; the one change it may receive is its next-archive link.

    Its ETag is the one nginx computes for its exported file (`file_etag`): the second of
    its Last-Modified and its length, and for the gzip representation the length of the
    gzip bytes. That is a strong validator here, though it names no hash of the bytes:
    the bytes of one page change once at most, by gaining next-archive, which adds an
    element (the length grows) and moves `modified` forward (never back), so its two
    versions never share a (second, length) pair; gzip bytes are a function of the plain
    bytes (one compression level, no timestamp: `gzipped`), and an Atom page always
    compresses (its fixed head alone halves), so the gzip length is never the plain one.
    The stored content hash (ArchivePage.etag) still keys the per-process gzip cache,
    where pages of different feeds meet.
    """

    # The feed's columns a page is rendered from, besides its entries: the sealer reads
    # them fresh before rendering.
    feed_fields = ("slug", "uuid", "title", "subtitle", "author", "language", "page_size")

    def __init__(self, slug: str, number: int, *, body: bytes, etag: str, has_next: bool,
                 modified: datetime, read_at: datetime):
        super().__init__(read_at=read_at)
        self.slug, self.number = slug, number
        self._body, self._content_etag, self._modified = body, etag, modified
        self.final = has_next

    @classmethod
    def for_page(cls, slug: str, number: int) -> ArchiveDocument:
        """Raises ArchivePage.DoesNotExist. A final page is kept in memory from then on."""
        cached = final_pages.get((slug, number))
        if cached is not None:
            return cached
        read_at = base.now()
        body, etag, has_next, modified = (
            ArchivePage.objects.filter(feed__slug=slug, number=number)
            .values_list("body", "etag", "has_next", "modified").get()
        )
        page = cls(slug, number, body=bytes(body), etag=etag, has_next=has_next,
                   modified=modified, read_at=read_at)
        if page.final and page.last_modified() is not None:
            page.headers()  # built once, before it is shared
            final_pages.put((slug, number), page, size=len(page._body))
        return page

    @staticmethod
    def freeze(feed: Feed, number: int, rows: list[atom.EntryRow], *, has_next: bool):
        """The bytes and ETag of page `number` of `feed`, holding `rows` (oldest first)."""
        body = atom.render_archive(feed, number, rows, has_next=has_next)
        return body, bytes_etag(body)

    @staticmethod
    def link_next(slug: str, number: int, body: bytes):
        """Page `number`'s bytes and ETag once it has its next-archive link."""
        body = atom.add_next_archive(body, urls.archive_url(slug, number + 1))
        return body, bytes_etag(body)

    def links(self) -> list[atom.Link]:
        return atom.archive_links(self.slug, self.number, has_next=self.final)


# The sealed page a date route leads to, by (slug, instant): final once found, since a
# page sealed later has a larger number (and later entries), and a feed with a sealed page
# can be neither renamed nor deleted. Date routes into the sealed range then cost no query.
sealed_pages_by_date = PageCache(lambda: settings.FEEDPUB_PAGE_CACHE_BYTES // 64)
_DATE_ROUTE_BYTES = 200  # about what one cached route holds (its key and bookkeeping)


def archive_holding(slug: str, instant: datetime) -> int | None:
    """The number of the first sealed page with an entry at or after `instant`, or None
    when none is sealed yet (what exists of it is in the subscription document). Raises
    Feed.DoesNotExist."""
    cached = sealed_pages_by_date.get((slug, instant))
    if cached is not None:
        return cached
    feed = heads.feed_by_slug(slug)
    number = (feed.pages.filter(last_updated__gte=instant)
              .order_by("number").values_list("number", flat=True).first())
    if number is not None:
        sealed_pages_by_date.put((slug, instant), number, size=_DATE_ROUTE_BYTES)
    return number


# RSS 2.0 twins (RFC 5005 Appendix B) ------------------------------------------------------

class RssSubscriptionDocument(SubscriptionDocument):
    """/feeds/<slug>/rss/: the subscription document's RSS 2.0 twin
    (archives/documents/rss.py), from the same inputs: rendered per request, cached while its
    ETag is current."""

    content_type = rss.RSS_TYPE
    kind = "rss-subscription"
    render = staticmethod(rss.render_subscription)
    feed_links = staticmethod(rss.subscription_links)
    # RSS 2.0 has no author of a channel (managingEditor is an email address).
    shown = tuple(name for name in SubscriptionDocument.shown if name != "author")


class RssArchiveDocument(FrozenDocument):
    """/feeds/<slug>/archives/<n>/rss/: archive page n's RSS 2.0 twin, served from the bytes
    frozen with the page (ArchivePage.rss) and given its next-archive link with it. A page
    sealed before those were stored (migration 0007) is rendered from its entries, as the
    sealer's backfill will store it, and carries no Last-Modified (and is not final) until
    then: its bytes are not frozen yet. Frozen bytes carry the exported file's ETag, as
    the Atom page does (ArchiveDocument says why it is strong); unfrozen ones a hash."""

    content_type = rss.RSS_TYPE

    def __init__(self, slug: str, number: int, *, body: bytes, has_next: bool,
                 modified: datetime, frozen: bool, read_at: datetime):
        super().__init__(read_at=read_at)
        self.slug, self.number, self.has_next = slug, number, has_next
        self._body, self._modified, self.frozen = body, modified, frozen
        self.final = has_next and frozen
        self.exported_as_file = frozen  # a twin rendered per request is nobody's file yet
        self._content_etag = bytes_etag(body)

    @classmethod
    def for_page(cls, slug: str, number: int) -> RssArchiveDocument:
        """Raises ArchivePage.DoesNotExist. A final twin is kept in memory from then on."""
        cached = final_pages.get(("rss", slug, number))
        if cached is not None:
            return cached
        read_at = base.now()
        stored = ArchivePage.objects.select_related("feed").defer("body", "multipart").get(
            feed__slug=slug, number=number)
        frozen = stored.rss is not None
        body = cls.render_unfrozen(stored) if stored.rss is None else bytes(stored.rss)
        page = cls(slug, number, body=body, has_next=stored.has_next, modified=stored.modified,
                   frozen=frozen, read_at=read_at)
        if page.final and page.last_modified() is not None:
            page.headers()  # built once, before it is shared
            final_pages.put(("rss", slug, number), page, size=len(body))
        return page

    @staticmethod
    def render_unfrozen(page: ArchivePage) -> bytes:
        """The twin of a page sealed before twins were stored, from its stored entries."""
        rows = atom.entry_rows(page.feed, page.first_seq, page.last_seq)
        return RssArchiveDocument.freeze(page.feed, page.number, rows, has_next=page.has_next)

    @staticmethod
    def freeze(feed: Feed, number: int, rows: list[atom.EntryRow], *, has_next: bool) -> bytes:
        """The RSS bytes of page `number` of `feed`, holding `rows` (oldest first)."""
        return rss.render_archive(feed, number, rows, has_next=has_next)

    @staticmethod
    def link_next(slug: str, number: int, body: bytes) -> bytes:
        """The twin's bytes once it has its next-archive link."""
        return rss.add_next_archive(body, urls.rss_archive_url(slug, number + 1))

    def last_modified(self) -> int | None:
        return super().last_modified() if self.frozen else None

    def links(self) -> list[atom.Link]:
        return rss.archive_links(self.slug, self.number, has_next=self.has_next)


# RFC 5005's complete and paged feeds (archives/documents/atom.py renders them) -------------------

class CompleteDocument(FeedDocument):
    """/feeds/<slug>/complete/: one active entry per live record (RFC 5005 section 2,
    Atom-PMH's complete feed: deleted records are simply absent). Streamed: its size
    follows the feed's, so it is never held whole, in memory or in a cache.

    The body is exactly the live records as of the feed row read first, the entry
    (`last_seq`, `last_updated`) its ETag names, however long the stream takes and whatever
    is written meanwhile. Records are read `chunk` at a time by key, each chunk its own
    query; a record whose row is still as of that entry (`updated` no later) is shown as
    it is, and one changed since (created, updated or deleted after it) as its newest entry
    at or before it says, read from the append-only log. Keys never change and records are
    never removed, so every record is met exactly once.
    """

    streams = True
    chunk = 2000

    @cached_property
    def _etag(self) -> str:
        feed = self.feed
        # Records change only through entries: last_seq stands for all of them.
        return inputs_etag("complete", feed.uuid, feed.slug, feed.title, feed.subtitle,
                           feed.author, feed.language, feed.last_seq, feed.content_updated,
                           feed.schema_version)

    def etag(self) -> str:
        return self._etag

    def modified(self) -> datetime:
        # Moves on every write and description change (and on seals, which is harmless).
        return max(self.feed.subscription_modified, base.RENDERER_MODIFIED)

    def links(self) -> list[atom.Link]:
        return atom.complete_links(self.feed.slug, self.feed.schema_version)

    def stream(self) -> Iterator[bytes]:
        return atom.render_complete(self.feed, self._live_rows(), chunk=self.chunk)

    def body(self) -> bytes:
        return b"".join(self.stream())

    def _live_rows(self) -> Iterator[atom.EntryRow]:
        feed = self.feed
        cut, cut_updated = feed.last_seq, feed.last_updated
        if not cut or cut_updated is None:  # (a feed with an entry has both)
            return
        after = None
        while True:
            # Deleted records are read only if deleted after the cut (maybe live at it).
            batch = fastsql.live_records(feed, cut_updated, after_key=after, limit=self.chunk)
            for record in batch:
                if record.updated <= cut_updated:
                    # (metadata and created are not shown in an entry)
                    yield atom.EntryRow(seq=0, kind=LIVE, updated=record.updated,
                                        title=record.title, summary=record.summary,
                                        links=record.links, key=record.key, metadata=None,
                                        created=record.updated, language=record.language)
                elif (row := _as_of(record.id, cut)) is not None:
                    yield row
            if len(batch) < self.chunk:
                return
            after = batch[-1].key


LIVE = Entry.Kind.UPDATE  # any kind but a deletion renders as an active entry


def _as_of(record_id: int, seq: int) -> atom.EntryRow | None:
    """A record as its newest entry at or before `seq` left it; None if it did not exist
    then or was deleted."""
    values = (Entry.objects.filter(record_id=record_id, seq__lte=seq)  # by (record, seq)
              .order_by("-seq").values_list(*ENTRY_ROW.orm_names)[:1])
    row = next(iter(ENTRY_ROW.from_values(values)), None)
    if row is None or row.kind == Entry.Kind.DELETE:
        return None
    return row


class PagedFeedDocument(SubscriptionDocument):
    """/feeds/<slug>/paged/: the first page of the paged feed (RFC 5005 section 3): the
    subscription document's entries, newest first, under paged links; `next` leads to
    the sealed pages' paged twins."""

    kind = "paged"
    render = staticmethod(atom.render_paged)

    @staticmethod
    def feed_links(feed: Feed) -> list[atom.Link]:
        return atom.paged_links(feed.slug, None, sealed_pages=feed.sealed_pages,
                                schema_version=feed.schema_version)


class PagedPageDocument(Document):
    """/feeds/<slug>/paged/<n>/: archive page n's entries, newest first, as a paged feed
    document: its stored bytes (head and entries frozen at sealing) with paged links for
    its archive links. Only its `previous` link may change (to /paged/<n+1>/ once page
    n+1 is sealed); from then on it is final, as the archive page is."""

    def __init__(self, slug: str, number: int, *, stored: bytes, stored_etag: str,
                 has_next: bool, modified: datetime, read_at: datetime):
        super().__init__(read_at=read_at)
        self.slug, self.number = slug, number
        self._stored, self._stored_etag, self._modified = stored, stored_etag, modified
        self.final = has_next  # page n+1 is sealed

    @classmethod
    def for_page(cls, slug: str, number: int) -> PagedPageDocument:
        """Raises ArchivePage.DoesNotExist. A final page is kept in memory from then on."""
        cached = final_pages.get(("paged", slug, number))
        if cached is not None:
            return cached
        archive = ArchiveDocument.for_page(slug, number)
        page = cls(slug, number, stored=archive.body(), stored_etag=archive.etag(),
                   has_next=archive.final, modified=archive.modified(),
                   read_at=archive.read_at)
        if page.final and page.last_modified() is not None:
            page.headers()  # built once, before it is shared
            final_pages.put(("paged", slug, number), page, size=len(page.body()))
        return page

    def etag(self) -> str:
        # The stored bytes, the links (from `final`) and the renderer make the bytes.
        return inputs_etag("paged page", self.slug, self.number, self._stored_etag,
                           self.final)

    def modified(self) -> datetime:
        # The archive page's bytes changed when page n+1 was sealed: so did these.
        return max(self._modified, base.RENDERER_MODIFIED)

    def links(self) -> list[atom.Link]:
        return atom.paged_links(self.slug, self.number,
                                sealed_pages=self.number + 1 if self.final else self.number)

    @cached_property
    def _body(self) -> bytes:
        return atom.paged_from_archive(self._stored, self.links())

    def body(self) -> bytes:
        return self._body
