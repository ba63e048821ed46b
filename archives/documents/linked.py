"""The linked-pages format (docs/how-it-works/linked-pages.md): its pages, rendered per request
until sealed and then served from the body frozen with the archive page, and its
snapshots' index and pages, immutable once taken.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from typing import NamedTuple
from uuid import UUID

from archives.db.heads import heads
from archives.formats import rfc3339
from archives.models import ArchivePage, Feed, Snapshot, SnapshotPage

from . import atom, base, linkedpages, urls
from .base import (
    JSON_TYPE,
    Document,
    Rendered,
    bytes_etag,
    final_pages,
    inputs_etag,
    subscription_bodies,
)


class LinkedPageDocument(Document):
    """/feeds/<slug>/pages/<n>: entries (n-1)*page_size+1 .. n*page_size as a linked-pages
    page (archives/documents/linkedpages.py), oldest first; the newest page holds what there is of
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
        read_at = base.now()
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

    @classmethod
    def for_topic(cls, feed: Feed, *, read_at: datetime) -> LinkedPageDocument | None:
        """The entry point's content: the newest page (None: no entries yet)."""
        try:
            return cls.for_page(feed.slug, newest_page(feed))
        except ArchivePage.DoesNotExist:  # no entries yet (or renamed since read)
            return None

    def topic_headers(self) -> dict[str, str]:
        """The page a delivery holds: the entry point's content is the newest page."""
        return {"Content-Location": self.links()[0][1]}

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
        last_updated = self.feed.last_updated
        if self._stored is None and self.last_seq == self.feed.last_seq and last_updated:
            return last_updated  # the newest page: a poll renders nothing
        return self._rendered.last_updated

    def last_modified(self) -> int:
        return int(self.modified().timestamp())

    def links(self) -> list[atom.Link]:
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
        subscription_bodies.put(key, Rendered(self.etag(), *page), size=len(page.body))
        return page

    def body(self) -> bytes:
        return self._rendered.body

    @cached_property
    def content_type(self) -> str:  # type: ignore[override]
        # (Its boundary comes from its parts: known once rendered. mypy takes a
        # cached_property for read-only, though it may be set as an attribute can.)
        return linkedpages.content_type_of(self.body())


class _Page(NamedTuple):
    body: bytes
    last_updated: datetime


def newest_page(feed: Feed) -> int:
    """The number of the newest linked page: the one holding the newest entry (0: none)."""
    return -(-feed.last_seq // feed.page_size)


def newest_linked_page(slug: str) -> tuple[int, list[atom.Link]]:
    """The number of the feed's newest linked page, and the links of its entry point
    (/pages/latest): the WebSub topic, and the record schema in force as the subscription
    document links it; from one read of the feed's head. Raises ArchivePage.DoesNotExist for
    an unknown feed or one with no entries yet."""
    try:
        feed = heads.feed_by_slug(slug)
    except Feed.DoesNotExist:
        raise ArchivePage.DoesNotExist(f"No feed {slug!r}") from None
    number = newest_page(feed)
    if not number:
        raise ArchivePage.DoesNotExist(f"Feed {slug!r} has no entries yet")
    return number, [*linkedpages.entry_point_links(slug),
                    *atom.schema_links(slug, feed.schema_version)]


class SnapshotIndexDocument(Document):
    """/feeds/<slug>/snapshots/<id>/: a snapshot's index (datareplication's index.schema.json:
    id, createdAt, pages), plus where a consumer resumes the feed after it. Immutable."""

    content_type = JSON_TYPE
    final = True
    # Its bytes change under one date after a move to another base URL (its links; its
    # date is its cut's): revalidated by ETag only.
    honours_if_modified_since = False

    def __init__(self, snapshot: Snapshot, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.snapshot = snapshot

    @classmethod
    def for_id(cls, slug: str, snapshot_id: UUID) -> SnapshotIndexDocument:
        """Raises Snapshot.DoesNotExist."""
        read_at = base.now()
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
            "pages": [urls.url("archives:snapshot-page", slug, str(snapshot.uuid), n)
                      for n in range(1, snapshot.pages + 1)],
            "records": snapshot.records,
            # The feed goes on after the snapshot's last entry: from this page, skip each
            # entity up to and including this Content-ID (none: from the page's start).
            "feed": {
                "lastEntry": cut,
                "resumePage": urls.url("archives:linked-page", slug, resume_page),
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

    def links(self) -> list[atom.Link]:
        slug = self.snapshot.feed.slug
        return [atom.Link("self", urls.url("archives:snapshot", slug, str(self.snapshot.uuid)))]

    def body(self) -> bytes:
        return self._body


class SnapshotPageDocument(Document):
    """/feeds/<slug>/snapshots/<id>/pages/<n>: PUT entities of live records. Immutable,
    but for the URLs in it, which `manage.py rerender_documents` renders again after a move
    to another base URL (archives/log/rerendering.py)."""

    final = True
    # Its Last-Modified is its last entity's, as the format requires, and stays so when
    # its bytes are rendered again: revalidated by ETag only, as linked pages are.
    honours_if_modified_since = False

    def __init__(self, page: SnapshotPage, slug: str, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.page, self.slug = page, slug
        self.content_type = linkedpages.content_type_of(bytes(page.body))

    @classmethod
    def for_page(cls, slug: str, snapshot_id: UUID, number: int) -> SnapshotPageDocument:
        """Raises SnapshotPage.DoesNotExist."""
        read_at = base.now()
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

    def links(self) -> list[atom.Link]:
        snapshot_id = str(self.page.snapshot.uuid)
        return [atom.Link("self", urls.url("archives:snapshot-page", self.slug, snapshot_id,
                                           self.page.number)),
                atom.Link("index", urls.url("archives:snapshot", self.slug, snapshot_id))]

    def body(self) -> bytes:
        return bytes(self.page.body)
