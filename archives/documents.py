"""Every document feedpub serves: one small class per kind, owning all it depends on.

A document class knows its inputs (what its bytes are rendered from), its links, its
validators and its bytes, as Django's syndication `Feed` and sitemaps' `Sitemap` keep
all a document needs on one class. Views serve it (`views.serve`), sealing freezes it,
caches key on its ETag: nobody lists its inputs again.

Validators tell the truth to every cache (DESIGN.md "HTTP"), ours or not:
- The ETag changes exactly when the bytes do: a hash of every input the bytes are
  rendered from (and of the renderer's own source), or of the frozen bytes themselves.
- Last-Modified moves forward whenever the bytes change. It follows `modified`, when the
  bytes last changed (a write, a seal, a retitle, a page gaining next-archive), not the
  newest entry's `updated`. HTTP dates have whole seconds, and caches send either our
  Last-Modified or the Date of their copy as If-Modified-Since (RFC 9110 13.1.3), so the
  date we send is the first whole second at which the change is certainly visible: the
  second after `modified`, plus FEEDPUB_LAST_MODIFIED_SETTLE seconds that bound how long
  a change takes from its stamp (just before its commit) to being visible, a response
  from its read to its Date, and the clock difference between hosts. Until then a
  document is sent without Last-Modified. A response that showed older bytes therefore
  always carries an earlier Last-Modified and Date than the change, and If-Modified-Since
  can be honoured (RFC 9110 8.8.2.2 calls dates without this care weak).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import NamedTuple
from uuid import UUID

from django.conf import settings
from django.utils.http import http_date

from . import atom, fastsql, formats, linkedpages, rss, validation
from .formats import rfc3339
from .heads import heads
from .models import ArchivePage, Entry, Feed, Record, Snapshot, SnapshotPage
from .pagecache import PageCache

IMMUTABLE = "public, max-age=31536000, immutable"
JSON_TYPE = "application/json"

# What rendering depends on besides data: the renderer itself. A release that renders
# differently changes every ETag (so no cache keeps old bytes as current) and moves the
# Last-Modified of documents rendered per request to no earlier than its files.
_RENDERERS = [Path(module.__file__)
              for module in (atom, linkedpages, formats, validation, rss)] + [Path(__file__)]
RENDERER = hashlib.sha256(b"".join(path.read_bytes() for path in _RENDERERS)).hexdigest()
RENDERER_MODIFIED = datetime.fromtimestamp(max(path.stat().st_mtime for path in _RENDERERS),
                                           tz=UTC)


def now() -> datetime:
    """The clock a document's Last-Modified is judged by (tests move it)."""
    return datetime.now(tz=UTC)


def change_stamp() -> datetime:
    """The time to record as a document's `modified`, taken just before the change
    commits. The wall clock itself, like `now`: tests that write entries at chosen
    instants replace django's timezone.now, which must not move these."""
    return datetime.now(tz=UTC)


class Document:
    """What every document answers with. Subclasses say what they are made of."""

    content_type = atom.ATOM_TYPE
    final = False  # its bytes never change again
    streams = False  # its body comes in pieces, from stream(): see views.serve
    # Answer If-Modified-Since (else only If-None-Match): see the module docstring.
    honours_if_modified_since = True

    def __init__(self, *, read_at: datetime):
        # When its inputs were read (at the latest): no change committed before it is missing.
        self.read_at = read_at

    def etag(self) -> str:
        raise NotImplementedError

    def modified(self) -> datetime:
        """When the bytes last changed."""
        raise NotImplementedError

    def links(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def body(self) -> bytes:
        raise NotImplementedError

    def cache_control(self) -> str:
        return IMMUTABLE if self.final else f"public, max-age={settings.FEEDPUB_MAX_AGE}"

    def last_modified(self) -> int | None:
        """Last-Modified as seconds since the epoch: the first whole second at which the
        last change is certainly visible, or None before it (see the module docstring)."""
        visible = visible_second(self.modified())
        return visible if self.read_at.timestamp() >= visible else None

    def gzip_etag(self) -> str:
        return gzip_etag(self.etag())

    def gzipped(self) -> bytes:
        """The body gzip-encoded (the representation gzip_etag names)."""
        return gzipped(self.etag(), self.body())

    def headers(self) -> dict[str, str]:
        """ETag, Cache-Control, Link and (once settled) Last-Modified. A final document's
        never change: they are built once, for the copy kept in a process's cache; so
        are a feed document's once settled, for as long as its head is kept."""
        if self.final and "_headers" in self.__dict__:
            return self.__dict__["_headers"]
        memo = self.memo()
        if memo is not None and "headers" in memo:
            return memo["headers"]
        headers = {"ETag": self.etag(), "Cache-Control": self.cache_control(),
                   "Link": atom.link_header(self.links())}
        last_modified = self.last_modified()
        if last_modified is not None:
            headers["Last-Modified"] = http_date(last_modified)
            if memo is not None:
                memo["headers"] = headers
        if self.final:
            self.__dict__["_headers"] = headers
        return headers

    def memo(self) -> dict | None:
        """Where values that follow from the document's inputs alone may be kept."""
        return None


def visible_second(modified: datetime) -> int:
    """The first whole second at which a change stamped `modified` is certainly visible:
    a document's Last-Modified once it is reached, and an exported page's file time."""
    return int(modified.timestamp()) + 1 + settings.FEEDPUB_LAST_MODIFIED_SETTLE


def file_etag(second: int, length: int) -> str:
    """The ETag nginx gives a file of `length` bytes modified at `second` (its
    ngx_http_set_etag: hex mtime, hex size). Sealed pages carry it, from Django as from
    their exported files (archives/export.py), so that either answers the other's
    validators: see ArchiveDocument for why it is a strong validator there."""
    return f'"{second:x}-{length:x}"'


def inputs_etag(*inputs) -> str:
    """An ETag for bytes rendered from `inputs` by this release's renderer."""
    state = repr((RENDERER, settings.FEEDPUB_BASE_URL, *inputs)).encode()
    return '"' + hashlib.sha256(state).hexdigest()[:32] + '"'


def bytes_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


# Documents compressed for clients that accept gzip, by the ETag of their plain bytes: each
# is compressed once per process (a sealed page costs no more gzipped than plain), rather
# than stored compressed beside the page, which would slow sealing down for the few
# processes that have not compressed it yet.
gzipped_bodies = PageCache(max(settings.FEEDPUB_PAGE_CACHE_BYTES // 8, 1))


def gzip_etag(etag: str) -> str:
    """The ETag of a document's gzip-encoded bytes: a different representation, so a
    different strong validator (RFC 9110 8.8.3.3)."""
    return etag[:-1] + '-gzip"'


def gzipped(etag: str, body: bytes) -> bytes:
    """`body` (whose ETag is `etag`) gzip-encoded; the same bytes in every process."""
    compressed = gzipped_bodies.get(etag)
    if compressed is None:
        compressed = gzip.compress(body, compresslevel=6, mtime=0)
        gzipped_bodies.put(etag, compressed, size=len(compressed))
    return compressed


class _Rendered(NamedTuple):
    """A rendering kept in `subscription_bodies`, trusted while `etag` is current."""

    etag: str
    body: bytes
    last_updated: datetime | None = None  # a linked page's last entity's


# The newest rendering of each feed's subscription document (keyed by slug) and of its
# unsealed linked pages, trusted only while their ETag is current, so repeated polls
# between two writes render nothing.
subscription_bodies = PageCache(max(settings.FEEDPUB_PAGE_CACHE_BYTES // 8, 1))


class FeedDocument(Document):
    """A document of a whole feed, found by its slug: what it shows follows from the feed
    row (and the log it counts), read in one small query."""

    def __init__(self, feed: Feed, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.feed = feed

    def memo(self) -> dict | None:
        """Per kind of document, as long as the feed's head is kept in memory
        (archives/heads.py): a poll that finds nothing new then hashes nothing either."""
        memo = heads.memo(self.feed)
        return None if memo is None else memo.setdefault(type(self), {})

    @classmethod
    def for_slug(cls, slug: str):
        """Raises Feed.DoesNotExist. A poll that finds nothing new renders nothing (the
        ETag follows from the feed row alone) and, with the feed's head in memory
        (archives/heads.py), queries nothing."""
        read_at = now()
        return cls(heads.feed_by_slug(slug), read_at=read_at)


class SubscriptionDocument(FeedDocument):
    """/feeds/<slug>/: the unsealed entries, newest first."""

    # What tells this document's renderings apart from its twins' (RssSubscriptionDocument):
    # in its ETag and its cache key.
    kind = "subscription"
    render = staticmethod(atom.render_subscription)
    feed_links = staticmethod(atom.subscription_links)
    # The feed's columns its bytes show: with content_updated, its ETag's inputs. (The
    # entries sealed_seq+1..last_seq never change once written, so their range stands
    # for them.)
    shown = ("uuid", "slug", "title", "subtitle", "author", "language", "page_size",
             "sealed_pages", "last_seq")

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
        return max(self.feed.subscription_modified, RENDERER_MODIFIED)

    def links(self) -> list[tuple[str, str]]:
        return self.feed_links(self.feed)

    def body(self) -> bytes:
        feed = self.feed
        key = (self.kind, feed.slug)
        cached = subscription_bodies.get(key)
        if cached is not None and cached.etag == self.etag():
            return cached.body
        rows = atom.entry_rows(feed, feed.sealed_seq + 1, feed.last_seq, newest_first=True)
        body = self.render(feed, rows)
        subscription_bodies.put(key, _Rendered(self.etag(), body), size=len(body))
        return body


# Archive pages whose bytes are final, kept in each process (see archives/pagecache.py).
final_pages = PageCache(settings.FEEDPUB_PAGE_CACHE_BYTES)


class FrozenDocument(Document):
    """A sealed page's frozen bytes (`_body`, `_content_etag`, `_modified`), served by
    Django and, once exported (archives/export.py), by nginx from a file: while
    `exported_as_file`, its ETags are the file's (`file_etag`, see ArchiveDocument for why
    they are strong validators), else the hash of its bytes."""

    exported_as_file = True

    @cached_property
    def _etag(self) -> str:
        if not self.exported_as_file:
            return self._content_etag
        return file_etag(visible_second(self._modified), len(self._body))

    def etag(self) -> str:
        return self._etag

    @cached_property
    def _gzip_etag(self) -> str:
        if not self.exported_as_file:
            return gzip_etag(self._content_etag)
        return file_etag(visible_second(self._modified), len(self.gzipped()))

    def gzip_etag(self) -> str:
        return self._gzip_etag

    def gzipped(self) -> bytes:
        return gzipped(self._content_etag, self._body)

    def modified(self) -> datetime:
        return self._modified

    def body(self) -> bytes:
        return self._body


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
        read_at = now()
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
        body = atom.add_next_archive(body, atom.archive_url(slug, number + 1))
        return body, bytes_etag(body)

    def links(self) -> list[tuple[str, str]]:
        return atom.archive_links(self.slug, self.number, has_next=self.final)


# The sealed page a date route leads to, by (slug, instant): final once found, since a
# page sealed later has a larger number (and later entries), and a feed with a sealed page
# can be neither renamed nor deleted. Date routes into the sealed range then cost no query.
sealed_pages_by_date = PageCache(max(settings.FEEDPUB_PAGE_CACHE_BYTES // 64, 1))
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


def record_json(record: Record) -> dict:
    """The record as the API and its own URL show it in JSON."""
    return formats.record_json(
        feed_uuid=record.feed.uuid, key=record.key, title=record.title,
        summary=record.summary, metadata=record.metadata, links=record.links,
        created=record.created, updated=record.updated, deleted=record.is_deleted,
        url=settings.FEEDPUB_BASE_URL + record.get_absolute_url())


class RecordDocument(Document):
    """/feeds/<slug>/records/<key>: a live record as an Atom Entry Document."""

    content_type = atom.ATOM_ENTRY_TYPE

    def __init__(self, record: Record, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.record = record

    @classmethod
    def for_key(cls, slug: str, key: str) -> RecordDocument:
        """Raises Record.DoesNotExist."""
        read_at = now()
        record = Record.objects.select_related("feed").get(feed__slug=slug, key=key)
        return cls(record, read_at=read_at)

    def inputs(self) -> tuple:
        record, feed = self.record, self.record.feed
        # Every write to a record moves its `updated`, so it stands for the record's columns.
        return (feed.uuid, feed.slug, feed.author, feed.language, record.key, record.created,
                record.updated)

    def etag(self) -> str:
        return inputs_etag(type(self).__name__, *self.inputs())

    def modified(self) -> datetime:
        return max(self.record.updated, self.record.feed.description_modified,
                   RENDERER_MODIFIED)

    def links(self) -> list[tuple[str, str]]:
        slug = self.record.feed.slug
        return [("self", atom.record_url(slug, self.record.key)),
                ("up", atom.subscription_url(slug))]

    def body(self) -> bytes:
        return atom.render_record(self.record)

    def as_json(self) -> RecordJSONDocument:
        """The same record in JSON (the API's shape)."""
        return RecordJSONDocument(self.record, read_at=self.read_at)


class RecordJSONDocument(RecordDocument):
    content_type = JSON_TYPE

    def inputs(self) -> tuple:
        record, feed = self.record, self.record.feed
        return (feed.uuid, feed.slug, record.key, record.created, record.updated)

    def body(self) -> bytes:
        return json.dumps(record_json(self.record), ensure_ascii=False, indent=2).encode()


class LinkedPageDocument(Document):
    """/feeds/<slug>/pages/<n>: entries (n-1)*page_size+1 .. n*page_size as a linked-pages
    page (archives/linkedpages.py), oldest first; the newest page holds what there is of
    its range. A sealed page is served from the body frozen with it, any other is rendered
    from the same entries to the same bytes. Only its `Link` headers gain `next`, once an
    entry after its range exists; from then on it is final.

    The format asks for the page's Last-Modified to be its last entity's, so it does not
    move when the page gains `next` or (the newest page) gains an entity within the same
    second: revalidation is by ETag only (which covers both).
    """

    honours_if_modified_since = False

    def __init__(self, feed: Feed, number: int, *, read_at: datetime,
                 stored: tuple[bytes, datetime] | None = None):
        super().__init__(read_at=read_at)
        self.feed, self.number, self._stored = feed, number, stored
        size = feed.page_size
        self.first_seq, self.last_seq = (number - 1) * size + 1, min(number * size, feed.last_seq)
        # From the feed row read first: a stale row can only leave `next` out, never
        # promise a page that does not exist.
        self.has_next = self.final = feed.last_seq > number * size

    @classmethod
    def for_page(cls, slug: str, number: int) -> LinkedPageDocument:
        """Raises ArchivePage.DoesNotExist when there is no such page (a page is never
        empty: the newest page is the one holding the newest entry)."""
        cached = final_pages.get(("linked", slug, number))
        if cached is not None:
            return cached
        read_at = now()
        try:
            feed = heads.feed_by_slug(slug)
        except Feed.DoesNotExist:
            raise ArchivePage.DoesNotExist(f"No feed {slug!r}") from None
        if not 0 < number <= newest_page(feed):
            raise ArchivePage.DoesNotExist(f"Feed {slug!r} has no page {number}")
        stored = None
        if number <= feed.sealed_pages:
            body, last_updated = ArchivePage.objects.filter(feed=feed, number=number) \
                .values_list("multipart", "last_updated").get()
            # Sealed before linked pages were stored with it (migration 0004): rendered.
            stored = None if body is None else (bytes(body), last_updated)
        page = cls(feed, number, read_at=read_at, stored=stored)
        if page.final:
            page.headers()  # built once, before it is shared
            final_pages.put(("linked", slug, number), page, size=len(page.body()))
        return page

    @cached_property
    def _etag(self) -> str:
        if self._stored is not None:
            return bytes_etag(self._stored[0])[:-1] + ("-next" if self.has_next else "") + '"'
        feed = self.feed
        return inputs_etag("linked page", feed.uuid, feed.slug, self.first_seq, self.last_seq,
                           self.has_next)

    def etag(self) -> str:
        return self._etag

    def modified(self) -> datetime:
        if self._stored is None and self.last_seq == self.feed.last_seq:
            return self.feed.last_updated  # the newest page: a poll renders nothing
        return self._rendered.last_updated

    def last_modified(self) -> int:
        return int(self.modified().timestamp())

    def links(self) -> list[tuple[str, str]]:
        return linkedpages.page_links(self.feed.slug, self.number, has_next=self.has_next)

    @cached_property
    def _rendered(self) -> _Page:
        if self._stored is not None:
            return _Page(*self._stored)
        key = ("linked", self.feed.slug, self.number)
        cached = subscription_bodies.get(key)
        if cached is not None and cached.etag == self.etag():
            return _Page(cached.body, cached.last_updated)
        rows = atom.entry_rows(self.feed, self.first_seq, self.last_seq)
        page = _Page(linkedpages.render_page(self.feed, rows), rows[-1].updated)
        subscription_bodies.put(key, _Rendered(self.etag(), *page), size=len(page.body))
        return page

    def body(self) -> bytes:
        return self._rendered.body

    @property
    def content_type(self) -> str:
        return linkedpages.content_type_of(self.body())


class _Page(NamedTuple):
    body: bytes
    last_updated: datetime


def newest_page(feed: Feed) -> int:
    """The number of the newest linked page: the one holding the newest entry (0: none)."""
    return -(-feed.last_seq // feed.page_size)


def newest_linked_page(slug: str) -> int:
    """Raises ArchivePage.DoesNotExist for an unknown feed or one with no entries yet."""
    try:
        number = newest_page(heads.feed_by_slug(slug))
    except Feed.DoesNotExist:
        raise ArchivePage.DoesNotExist(f"No feed {slug!r}") from None
    if not number:
        raise ArchivePage.DoesNotExist(f"Feed {slug!r} has no entries yet")
    return number


class SnapshotIndexDocument(Document):
    """/feeds/<slug>/snapshots/<id>/: a snapshot's index (datareplication's index.schema.json:
    id, createdAt, pages), plus where a consumer resumes the feed after it. Immutable."""

    content_type = JSON_TYPE
    final = True

    def __init__(self, snapshot: Snapshot, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.snapshot = snapshot

    @classmethod
    def for_id(cls, slug: str, snapshot_id: UUID) -> SnapshotIndexDocument:
        """Raises Snapshot.DoesNotExist."""
        read_at = now()
        snapshot = Snapshot.objects.select_related("feed").get(
            feed__slug=slug, uuid=snapshot_id, complete=True)
        return cls(snapshot, read_at=read_at)

    def content(self) -> dict:
        snapshot, slug = self.snapshot, self.snapshot.feed.slug
        size, cut = snapshot.feed.page_size, snapshot.last_seq
        resume_page = (cut - 1) // size + 1 if cut else 1
        return {
            "id": str(snapshot.uuid),
            # As of its cut: a date later than that (when it was made) would let a
            # consumer that goes by dates skip entries written in between.
            "createdAt": rfc3339(snapshot.last_updated or snapshot.created),
            "pages": [atom.url("archives:snapshot-page", slug, str(snapshot.uuid), n)
                      for n in range(1, snapshot.pages + 1)],
            "records": snapshot.records,
            # The feed goes on after the snapshot's last entry: from this page, skip each
            # entity up to and including this Content-ID (none: from the page's start).
            "feed": {
                "lastEntry": cut,
                "resumePage": atom.url("archives:linked-page", slug, resume_page),
                "resumeAfterContentId": linkedpages.content_id(snapshot.feed, cut)
                if cut else None,
            },
        }

    @cached_property
    def _body(self) -> bytes:
        return json.dumps(self.content(), indent=2).encode()

    def etag(self) -> str:
        return bytes_etag(self._body)

    def modified(self) -> datetime:
        return self.snapshot.created

    def links(self) -> list[tuple[str, str]]:
        slug = self.snapshot.feed.slug
        return [("self", atom.url("archives:snapshot", slug, str(self.snapshot.uuid)))]

    def body(self) -> bytes:
        return self._body


class SnapshotPageDocument(Document):
    """/feeds/<slug>/snapshots/<id>/pages/<n>: PUT entities of live records. Immutable."""

    final = True

    def __init__(self, page: SnapshotPage, slug: str, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.page, self.slug = page, slug
        self.content_type = linkedpages.content_type_of(bytes(page.body))

    @classmethod
    def for_page(cls, slug: str, snapshot_id: UUID, number: int) -> SnapshotPageDocument:
        """Raises SnapshotPage.DoesNotExist."""
        read_at = now()
        page = SnapshotPage.objects.select_related("snapshot").get(
            snapshot__feed__slug=slug, snapshot__uuid=snapshot_id, snapshot__complete=True,
            number=number)
        return cls(page, slug, read_at=read_at)

    def etag(self) -> str:
        return self.page.etag

    def modified(self) -> datetime:
        return self.page.last_modified

    def last_modified(self) -> int:
        return int(self.page.last_modified.timestamp())

    def links(self) -> list[tuple[str, str]]:
        snapshot_id = str(self.page.snapshot.uuid)
        return [("self", atom.url("archives:snapshot-page", self.slug, snapshot_id,
                                  self.page.number)),
                ("index", atom.url("archives:snapshot", self.slug, snapshot_id))]

    def body(self) -> bytes:
        return bytes(self.page.body)


# RSS 2.0 twins (RFC 5005 Appendix B) ------------------------------------------------------

class RssSubscriptionDocument(SubscriptionDocument):
    """/feeds/<slug>/rss/: the subscription document's RSS 2.0 twin (archives/rss.py), from
    the same inputs: rendered per request, cached while its ETag is current."""

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
        self._content_etag = bytes_etag(body)

    @classmethod
    def for_page(cls, slug: str, number: int) -> RssArchiveDocument:
        """Raises ArchivePage.DoesNotExist. A final twin is kept in memory from then on."""
        cached = final_pages.get(("rss", slug, number))
        if cached is not None:
            return cached
        read_at = now()
        stored = ArchivePage.objects.select_related("feed").defer("body", "multipart").get(
            feed__slug=slug, number=number)
        frozen = stored.rss is not None
        body = bytes(stored.rss) if frozen else cls.render_unfrozen(stored)
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
        return rss.add_next_archive(body, rss.rss_archive_url(slug, number + 1))

    @property
    def exported_as_file(self) -> bool:
        return self.frozen  # a twin rendered per request is nobody's file yet

    def last_modified(self) -> int | None:
        return super().last_modified() if self.frozen else None

    def links(self) -> list[tuple[str, str]]:
        return rss.archive_links(self.slug, self.number, has_next=self.has_next)


# RFC 5005's complete and paged feeds (archives/atom.py renders them) -------------------

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
                           feed.author, feed.language, feed.last_seq, feed.content_updated)

    def etag(self) -> str:
        return self._etag

    def modified(self) -> datetime:
        # Moves on every write and description change (and on seals, which is harmless).
        return max(self.feed.subscription_modified, RENDERER_MODIFIED)

    def links(self) -> list[tuple[str, str]]:
        return atom.complete_links(self.feed.slug)

    def stream(self) -> Iterator[bytes]:
        return atom.render_complete(self.feed, self._live_rows(), chunk=self.chunk)

    def body(self) -> bytes:
        return b"".join(self.stream())

    def _live_rows(self) -> Iterator[atom.EntryRow]:
        feed = self.feed
        if not feed.last_seq:
            return
        cut, cut_updated = feed.last_seq, feed.last_updated
        after = None
        while True:
            # Deleted records are read only if deleted after the cut (maybe live at it).
            batch = fastsql.live_records(feed, cut_updated, after_key=after, limit=self.chunk)
            for pk, key, title, summary, links, updated in batch:
                if updated <= cut_updated:
                    # (metadata and created are not shown in an entry)
                    yield atom.EntryRow(0, LIVE, updated, title, summary, links, key, None,
                                        updated)
                elif (row := _as_of(pk, cut)) is not None:
                    yield row
            if len(batch) < self.chunk:
                return
            after = batch[-1][1]


LIVE = Entry.Kind.UPDATE  # any kind but a deletion renders as an active entry


def _as_of(record_id: int, seq: int) -> atom.EntryRow | None:
    """A record as its newest entry at or before `seq` left it; None if it did not exist
    then or was deleted."""
    row = (Entry.objects.filter(record_id=record_id, seq__lte=seq)  # by (record, seq)
           .order_by("-seq").values_list(*atom.ENTRY_ROW_COLUMNS).first())
    if row is None or row[1] == Entry.Kind.DELETE:
        return None
    return atom.EntryRow._make(row)


class PagedFeedDocument(SubscriptionDocument):
    """/feeds/<slug>/paged/: the first page of the paged feed (RFC 5005 section 3): the
    subscription document's entries, newest first, under paged links; `next` leads to
    the sealed pages' paged twins."""

    kind = "paged"
    render = staticmethod(atom.render_paged)

    @staticmethod
    def feed_links(feed: Feed) -> list[tuple[str, str]]:
        return atom.paged_links(feed.slug, None, sealed_pages=feed.sealed_pages)


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
        return max(self._modified, RENDERER_MODIFIED)

    def links(self) -> list[tuple[str, str]]:
        return atom.paged_links(self.slug, self.number,
                                sealed_pages=self.number + 1 if self.final else self.number)

    @cached_property
    def _body(self) -> bytes:
        return atom.paged_from_archive(self._stored, self.links())

    def body(self) -> bytes:
        return self._body
