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
from collections.abc import Iterator
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from . import atom, documents, linkedpages
from .documents import bytes_etag
from .models import Entry, Feed, Snapshot, SnapshotPage

logger = logging.getLogger(__name__)

# Entries read per query: bounds memory whatever the feed's size.
WINDOW = 5000


def take_snapshot(feed: Feed, *, keep: int | None = None) -> Snapshot:
    """Freeze `feed`'s live records as of its newest committed entry; with `keep`, then
    delete all but that many newest complete snapshots (see `prune`)."""
    feed.refresh_from_db()
    snapshot = Snapshot.objects.create(feed=feed, last_seq=feed.last_seq,
                                       created=documents.change_stamp())
    page, number = [], 0
    for row in live_rows(feed, feed.last_seq):
        page.append(row)
        if len(page) == feed.page_size:
            number += 1
            _store_page(snapshot, number, page)
            snapshot.records += len(page)
            page = []
    if page:
        number += 1
        _store_page(snapshot, number, page)
        snapshot.records += len(page)
    snapshot.pages, snapshot.complete = number, True
    snapshot.save(update_fields=["records", "pages", "complete"])
    logger.info("snapshot %s of %s: %s records as of entry %s, %s pages", snapshot.uuid,
                feed.slug, snapshot.records, snapshot.last_seq, snapshot.pages)
    if keep is not None:
        prune(feed, keep=keep)
    return snapshot


def live_rows(feed: Feed, cut: int) -> Iterator[atom.EntryRow]:
    """Each record's newest entry at or below `cut`, unless it is a deletion, by seq."""
    newer = Entry.objects.filter(record=OuterRef("record"), seq__gt=OuterRef("seq"),
                                 seq__lte=cut)
    for start in range(1, cut + 1, WINDOW):
        end = min(cut, start + WINDOW - 1)
        rows = (Entry.objects.filter(feed=feed, seq__gte=start, seq__lte=end)
                .exclude(kind=Entry.Kind.DELETE).filter(~Exists(newer))
                .order_by("seq").values_list(*atom.ENTRY_ROW_COLUMNS))
        yield from (atom.EntryRow._make(row) for row in rows)


def _store_page(snapshot: Snapshot, number: int, rows: list[atom.EntryRow]) -> None:
    body, _ = linkedpages.render_page(snapshot.feed, rows)
    SnapshotPage.objects.create(snapshot=snapshot, number=number, body=body,
                                etag=bytes_etag(body), last_modified=rows[-1].updated)


def prune(feed: Feed, *, keep: int) -> int:
    """Delete all but the `keep` newest complete snapshots of `feed`, and incomplete ones
    left for a day (a snapshot killed half-way; a younger one may still be running)."""
    kept = list(Snapshot.objects.filter(feed=feed, complete=True)
                .order_by("-created").values_list("pk", flat=True)[:max(keep, 1)])
    abandoned = Q(complete=False, created__lt=documents.change_stamp() - timedelta(days=1))
    doomed = Snapshot.objects.filter(feed=feed).filter(Q(complete=True) | abandoned) \
        .exclude(pk__in=kept)
    with transaction.atomic():
        SnapshotPage.objects.filter(snapshot__in=doomed).delete()
        count, _ = doomed.delete()
    return count
