"""Snapshots: the live records of a feed as of one entry, frozen into pages of PUT
entities, so that a linked-pages consumer can start from the present instead of page 1.

The cut is the feed's committed `last_seq` when the snapshot starts: every entry up to it
is committed and none can appear below it later (the write path's invariant), so "for
each record, its newest entry at or below the cut, unless a deletion" is the exact state
as of that entry, however long the snapshot takes and whatever writers do meanwhile.
Pages are stored one by one and the snapshot is marked complete last, so writers are
never held up and nothing half-made is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import islice

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery

from archives.db import fastsql
from archives.documents import atom, base, linkedpages
from archives.documents.base import bytes_etag
from archives.models import ArchivePage, Entry, Feed, Snapshot, SnapshotPage

logger = logging.getLogger(__name__)

# Entries read per query, and bytes of pages stored per COPY: bound memory whatever the
# feed's size.
WINDOW = 5000
BYTES_PER_COPY = 4 * 1024 * 1024


def take_snapshot(feed: Feed, *, keep: int | None = None,
                  on_records: Callable[[int], None] | None = None) -> Snapshot:
    """Freeze `feed`'s live records as of its newest committed entry; with `keep`, then
    delete all but that many newest complete snapshots (see `prune`). `on_records` is
    told how many records each page made holds (for a progress bar)."""
    feed.refresh_from_db()
    snapshot = Snapshot.objects.create(feed=feed, last_seq=feed.last_seq,
                                       last_updated=feed.last_updated,
                                       created=base.change_stamp())
    pending: list[SnapshotPage] = []
    for parts in _chunks(live_entities(feed, feed.last_seq), feed.page_size):
        pending.append(_page(snapshot, snapshot.pages + len(pending) + 1, parts))
        if on_records is not None:
            on_records(len(parts))
        if sum(len(page.body) for page in pending) >= BYTES_PER_COPY:
            snapshot.pages += _store(pending)
            pending = []
    snapshot.pages += _store(pending)
    snapshot.complete = True
    snapshot.save(update_fields=["records", "pages", "complete"])
    logger.info("snapshot %s of %s: %s records as of entry %s, %s pages", snapshot.uuid,
                feed.slug, snapshot.records, snapshot.last_seq, snapshot.pages)
    if keep is not None:
        prune(feed, keep=keep)
    return snapshot


def snapshot_changed_feeds(*, slug: str | None = None, keep: int) -> list[Snapshot]:
    """A snapshot of each feed (or of `slug`) with entries after its newest snapshot: what
    a sealer does every FEEDPUB_SNAPSHOT_EVERY seconds. Several sealers may each take one;
    `keep` prunes the extra."""
    newest = (Snapshot.objects.filter(feed=OuterRef("pk"), complete=True)
              .order_by("-created").values("last_seq")[:1])
    feeds = Feed.objects.annotate(snapshot_seq=Subquery(newest)).filter(last_seq__gt=0)
    if slug is not None:
        feeds = feeds.filter(slug=slug)
    return [take_snapshot(feed, keep=keep) for feed in feeds
            if feed.snapshot_seq is None or feed.snapshot_seq < feed.last_seq]


def live_entities(feed: Feed, cut: int) -> Iterator[bytes]:
    """Each record's newest entry at or below `cut`, unless a deletion, by seq, as body
    parts. Those of sealed pages are cut out of the pages' frozen bodies (the same bytes,
    and ten times faster than rendering them); the others are rendered."""
    size, sealed_seq = feed.page_size, min(feed.sealed_seq, cut)
    window = max(1, WINDOW // size) * size  # whole pages
    for start in range(1, sealed_seq + 1, window):
        end = min(sealed_seq, start + window - 1)
        live = set(_live(feed, cut, start, end).values_list("seq", flat=True))
        if not live:
            continue
        pages = (ArchivePage.objects  # by the (feed, number) index
                 .filter(feed=feed, number__range=((start - 1) // size + 1, end // size))
                 .order_by("number").values_list("first_seq", "last_seq", "multipart"))
        for first_seq, last_seq, multipart in pages:
            if multipart is None:  # sealed before linked pages were stored (migration 0004)
                rows = atom.entry_rows(feed, first_seq, last_seq)
                multipart = linkedpages.render_page(feed, rows)
            for seq, part in enumerate(linkedpages.split(bytes(multipart)), start=first_seq):
                if seq in live:
                    yield part
    base = atom.record_url_prefix(feed.slug)
    for start in range(sealed_seq + 1, cut + 1, WINDOW):
        end = min(cut, start + WINDOW - 1)
        rows = _live(feed, cut, start, end).order_by("seq").values_list(*atom.ENTRY_ROW_COLUMNS)
        for row in map(atom.EntryRow._make, rows):
            yield linkedpages.entity(feed, row, base)


def _live(feed: Feed, cut: int, start: int, end: int):
    """Entries start..end that are their record's newest at or below `cut`, and not
    deletions: one probe of the (record, seq) index each."""
    newer = Entry.objects.filter(record=OuterRef("record"), seq__gt=OuterRef("seq"),
                                 seq__lte=cut)
    return (Entry.objects.filter(feed=feed, seq__gte=start, seq__lte=end)
            .exclude(kind=Entry.Kind.DELETE).filter(~Exists(newer)).order_by())


def _page(snapshot: Snapshot, number: int, parts: list[bytes]) -> SnapshotPage:
    body = linkedpages.render(parts)
    snapshot.records += len(parts)
    return SnapshotPage(snapshot=snapshot, number=number, body=body, etag=bytes_etag(body),
                        last_modified=linkedpages.last_modified_of(parts[-1]))


def _store(pages: list[SnapshotPage]) -> int:
    fastsql.insert(SnapshotPage, pages, ("snapshot_id", "number", "body", "etag",
                                         "last_modified"))
    return len(pages)


def _chunks(items: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    while chunk := list(islice(items, size)):
        yield chunk


def prune(feed: Feed, *, keep: int) -> int:
    """Delete all but the `keep` newest complete snapshots of `feed`, and incomplete ones
    left for a day (a snapshot killed half-way; a younger one may still be running)."""
    kept = list(Snapshot.objects.filter(feed=feed, complete=True)
                .order_by("-created").values_list("created", flat=True)[:max(keep, 1)])
    if not kept:
        return 0
    # Older than the oldest kept one: a snapshot another sealer completes meanwhile is
    # newer, and stays.
    older = Q(complete=True, created__lt=kept[-1])
    abandoned = Q(complete=False, created__lt=base.change_stamp() - timedelta(days=1))
    doomed = Snapshot.objects.filter(feed=feed).filter(older | abandoned)
    with transaction.atomic():
        SnapshotPage.objects.filter(snapshot__in=doomed).delete()
        count, _ = doomed.delete()
    return count
