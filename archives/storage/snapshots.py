"""Snapshots: the live records of a feed as of one entry, frozen into pages of PUT
entities, so that a linked-pages consumer can start from the present instead of page 1.

The cut is the feed's committed `last_seq` when the snapshot starts: every entry up to it
is committed and none can appear below it later (the write path's invariant), so "for
each record, its newest entry at or below the cut, unless a deletion" is the exact state
as of that entry, however long the snapshot takes and whatever writers and sealers do
meanwhile. Pages are stored a batch at a time, each batch in a transaction that also
advances the snapshot's counts (and claims it: a batch whose snapshot moved on or vanished
meanwhile stores nothing), and the snapshot is marked complete with its last batch, so
writers are never held up and nothing half-made is served. A snapshot can therefore be
taken in slices (`advance_snapshot(until=...)`): each resumes after the last entity
stored, which is how a watching sealer takes them without making sealing wait
(`Snapshotting`).

A feed has at most one unfinished snapshot (a constraint of the database), and starting a
snapshot resumes it: a sealer killed again and again half-way through one finishes it
over its restarts instead of leaving one behind each time. A superseded snapshot is
deleted (`prune`) only once the one that superseded it has been complete for
FEEDPUB_SNAPSHOT_GRACE_SECONDS, so that a consumer half-way through it can read the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import islice

from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Count, Exists, OuterRef, Q, Subquery

from archives.conf import settings
from archives.db import address, fastsql
from archives.db.rows import ENTRY_ROW
from archives.documents import atom, base, linkedpages, urls
from archives.documents.base import bytes_etag
from archives.models import ArchivePage, Entry, Feed, Snapshot, SnapshotPage

logger = logging.getLogger(__name__)

# Entries read per query, and bytes of pages stored per COPY: bound memory whatever the
# feed's size.
WINDOW = 5000
BYTES_PER_COPY = 4 * 1024 * 1024
DATABASE_LOST = (OperationalError, InterfaceError)
# How long a watching sealer spends on snapshots between two sealing passes: the longest a
# full page waits for its seal while a snapshot is under way (bench/snapshot_sealing.py).
SLICE_SECONDS = 0.5


class SnapshotLost(Exception):
    """The snapshot was deleted, completed or advanced by someone else meanwhile."""


class NothingToSnapshot(ValueError):
    """The feed has no entries: a consumer starts from its first page, which does not exist
    yet, and a snapshot would point at it."""


def take_snapshot(feed: Feed, *, keep: int | None = None,
                  on_records: Callable[[int], None] | None = None) -> Snapshot:
    """Freeze `feed`'s live records as of its newest committed entry, all at once (an
    unfinished snapshot of that entry is finished: see `start_snapshot`); with `keep`,
    then delete all but that many newest complete snapshots (see `prune`). `on_records` is
    told how many records each page made holds (for a progress bar). Raises
    NothingToSnapshot."""
    while True:
        snapshot = start_snapshot(feed, resume_older=False)
        try:
            advance_snapshot(snapshot, on_records=on_records)
            break
        except SnapshotLost:  # a watching sealer stored the next pages of it first
            done = Snapshot.objects.filter(pk=snapshot.pk, complete=True).first()
            if done is not None:
                snapshot = done
                break  # (else: resumed after the pages it stored)
    if keep is not None:
        prune(snapshot.feed, keep=keep)
    return snapshot


def start_snapshot(feed: Feed, *, resume_older: bool = True) -> Snapshot:
    """`feed`'s unfinished snapshot, to be resumed (one that a killed process left, or
    one that another is taking: claims keep them from storing a page twice), else a new,
    empty one cut at its newest committed entry. With `resume_older` false, an unfinished
    one cut before that entry is deleted and a new one started instead. Raises
    NothingToSnapshot."""
    feed.refresh_from_db()
    if feed.last_seq == 0:
        raise NothingToSnapshot(f"feed {feed.slug!r} has no entries yet: nothing to snapshot")
    address.require(feed)
    while True:
        unfinished = Snapshot.objects.filter(feed=feed, complete=False).first()
        if unfinished is not None and _resumable(unfinished, feed) and (
                resume_older or unfinished.last_seq == feed.last_seq):
            unfinished.feed = feed
            return unfinished
        if unfinished is not None:
            abandon(unfinished)
        try:
            with transaction.atomic():
                return Snapshot.objects.create(feed=feed, last_seq=feed.last_seq,
                                               last_updated=feed.last_updated,
                                               created=base.change_stamp())
        except IntegrityError:
            continue  # another process started one meanwhile: resume that one


def advance_snapshot(snapshot: Snapshot, *, until: float | None = None,
                     on_records: Callable[[int], None] | None = None) -> bool:
    """Store the next pages of `snapshot`, resuming after the last one stored, until the
    `time.monotonic()` instant `until` has passed (at least one page; None: to the end),
    and mark it complete with its last; whether it is complete. Raises SnapshotLost."""
    feed = Feed.objects.get(pk=snapshot.feed_id)  # as sealed now: more pages to cut from
    address.require(feed)  # (moved meanwhile by rerender_documents: refused)
    snapshot.feed = feed
    pending: list[tuple[SnapshotPage, int]] = []
    last = _last_stored(snapshot)
    after = 0 if last is None else linkedpages.seq_of(last)
    for parts in _chunks(live_entities(feed, snapshot.last_seq, after=after), feed.page_size):
        number = snapshot.pages + len(pending) + 1
        pending.append((_page(snapshot, number, parts), len(parts)))
        if on_records is not None:
            on_records(len(parts))
        out_of_time = until is not None and time.monotonic() >= until
        if out_of_time or sum(len(page.body) for page, _ in pending) >= BYTES_PER_COPY:
            _store(snapshot, pending)
            pending = []
            if out_of_time:
                return False
    _store(snapshot, pending, complete=True)  # (the commands say so: not logged twice)
    return True


def abandon(snapshot: Snapshot) -> None:
    """Delete an incomplete snapshot and the pages stored of it (a sealer that stops)."""
    with transaction.atomic():
        doomed = Snapshot.objects.filter(pk=snapshot.pk, complete=False)
        SnapshotPage.objects.filter(snapshot__in=doomed).delete()
        doomed.delete()


def changed_feeds(*, slug: str | None = None):
    """The feeds (or `slug`) with entries after their newest complete snapshot."""
    newest = (Snapshot.objects.filter(feed=OuterRef("pk"), complete=True)
              .order_by("-created").values("last_seq")[:1])
    feeds = Feed.objects.annotate(snapshot_seq=Subquery(newest)).filter(last_seq__gt=0)
    if slug is not None:
        feeds = feeds.filter(slug=slug)
    return [feed for feed in feeds
            if feed.snapshot_seq is None or feed.snapshot_seq < feed.last_seq]


def snapshot_changed_feeds(*, slug: str | None = None, keep: int) -> list[Snapshot]:
    """A snapshot of each feed (or of `slug`) with entries after its newest snapshot, each
    taken whole. Several sealers may each take one; `keep` prunes the extra."""
    return [take_snapshot(feed, keep=keep) for feed in changed_feeds(slug=slug)]


class Snapshotting:
    """A watching sealer's snapshots (seal_archives --snapshot-every): every `every`
    seconds, one of each feed that changed since its newest, taken a slice at a time
    between two sealing passes (`step`), so that sealing waits a slice at most, however
    large the feed (one of 950,000 live records takes about half a minute: bench/snapshot.py)."""

    def __init__(self, *, slug: str | None, keep: int, every: float):
        self.slug, self.keep, self.every = slug, keep, every
        self.queue: list[Snapshot] = []
        self.due: float | None = time.monotonic()

    @property
    def busy(self) -> bool:
        """A snapshot is under way: the sealer should come back to it without a pause."""
        return bool(self.queue)

    def step(self, seconds: float = SLICE_SECONDS) -> list[Snapshot]:
        """Start the snapshots due (resuming unfinished ones), then take them for about
        `seconds`; those completed. A round also deletes the snapshots superseded past
        their grace. A snapshot that fails is logged and dropped (the next round tries
        again), never the sealer's failure; a lost database is (the sealer's loop handles
        it)."""
        until = time.monotonic() + seconds
        if not self.queue and (self.due is None or time.monotonic() >= self.due):
            prune_all(slug=self.slug, keep=self.keep)  # whether or not their feeds changed
            self.queue = [start_snapshot(feed) for feed in changed_feeds(slug=self.slug)]
            self.due = None  # the next round: `every` seconds after this one ends
        completed = []
        while self.queue and time.monotonic() < until:
            snapshot = self.queue[0]
            try:
                if not advance_snapshot(snapshot, until=until):
                    break
                prune(snapshot.feed, keep=self.keep)
                completed.append(snapshot)
            except DATABASE_LOST:
                raise
            except SnapshotLost as lost:  # another sealer took it on: not a failure
                logger.info("%s; the next round looks again", lost)
            except Exception:
                logger.exception("snapshot %s of %s failed; the next round tries again",
                                 snapshot.uuid, snapshot.feed.slug)
            self.queue.pop(0)
        if not self.queue and self.due is None:
            self.due = time.monotonic() + self.every
        return completed

    def abandon(self) -> None:
        """Delete the snapshots under way (the sealer is stopping; a sealer killed instead
        leaves them to the next start, which resumes them)."""
        for snapshot in self.queue:
            abandon(snapshot)
        self.queue = []


def live_entities(feed: Feed, cut: int, *, after: int = 0) -> Iterator[bytes]:
    """Each record's newest entry at or below `cut`, unless a deletion, by seq, as body
    parts; only those after entry `after`. Those of sealed pages are cut out of the pages'
    frozen bodies (the same bytes, and ten times faster than rendering them); the others
    are rendered."""
    # Whole sealed pages at or below the cut (a feed read after the cut may be sealed
    # past it: the page that holds the cut is rendered, not cut short).
    size = feed.page_size
    sealed_seq = min(feed.sealed_seq, cut // size * size)
    window = max(1, WINDOW // size) * size  # whole pages
    for start in range(after // size * size + 1, sealed_seq + 1, window):
        end = min(sealed_seq, start + window - 1)
        live = set(_live(feed, cut, max(start, after + 1), end)
                   .values_list("seq", flat=True))
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
    base = urls.record_url_prefix(feed.slug)
    for start in range(max(sealed_seq, after) + 1, cut + 1, WINDOW):
        end = min(cut, start + WINDOW - 1)
        rows = _live(feed, cut, start, end).order_by("seq").values_list(*ENTRY_ROW.orm_names)
        for row in ENTRY_ROW.from_values(rows):
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
    return SnapshotPage(snapshot=snapshot, number=number, body=body, etag=bytes_etag(body),
                        last_modified=linkedpages.last_modified_of(parts[-1]))


def _last_stored(snapshot: Snapshot) -> bytes | None:
    """The last entity stored of `snapshot` (None: none yet)."""
    if snapshot.pages == 0:
        return None
    body = SnapshotPage.objects.values_list("body", flat=True).get(
        snapshot=snapshot, number=snapshot.pages)
    return linkedpages.split(bytes(body))[-1]


def _resumable(snapshot: Snapshot, feed: Feed) -> bool:
    """Whether the pages stored of an unfinished snapshot name records at the URLs the
    feed's have now: not after a move to another base URL or slug, which
    `rerender_documents` renders again in complete snapshots only."""
    last = _last_stored(snapshot)
    return last is None or linkedpages.location_of(last).startswith(
        urls.record_url_prefix(feed.slug))


def _store(snapshot: Snapshot, pending: list[tuple[SnapshotPage, int]], *,
           complete: bool = False) -> None:
    """Store pages and advance the snapshot's counts in one transaction, claiming it from
    the counts this process last saw."""
    pages, records = len(pending), sum(count for _, count in pending)
    with transaction.atomic():
        claimed = Snapshot.objects.filter(
            pk=snapshot.pk, pages=snapshot.pages, complete=False).update(
            pages=snapshot.pages + pages, records=snapshot.records + records,
            complete=complete, completed_at=base.change_stamp() if complete else None)
        if not claimed:
            raise SnapshotLost(f"snapshot {snapshot.uuid} was deleted or taken on elsewhere")
        fastsql.insert(SnapshotPage, [page for page, _ in pending],
                       ("snapshot_id", "number", "body", "etag", "last_modified"))
    snapshot.pages += pages
    snapshot.records += records
    snapshot.complete = complete


def _chunks(items: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    while chunk := list(islice(items, size)):
        yield chunk


def prune(feed: Feed, *, keep: int) -> int:
    """Delete the complete snapshots of `feed` older than its `keep` newest, each once a
    newer one has been complete for FEEDPUB_SNAPSHOT_GRACE_SECONDS: until then a consumer
    that began reading it while it was the newest reads the rest. (Unfinished ones are
    resumed, never pruned: there is one a feed at most.)"""
    kept = list(Snapshot.objects.filter(feed=feed, complete=True)
                .order_by("-created").values_list("created", flat=True)[:max(keep, 1)])
    if not kept:
        return 0
    superseded_before = base.change_stamp() - timedelta(
        seconds=settings.FEEDPUB_SNAPSHOT_GRACE_SECONDS)
    past_grace = Snapshot.objects.filter(feed=OuterRef("feed"), complete=True,
                                         created__gt=OuterRef("created"),
                                         completed_at__lt=superseded_before)
    # Older than the oldest kept one: a snapshot another sealer completes meanwhile is
    # newer, and stays.
    doomed = Snapshot.objects.filter(feed=feed, complete=True, created__lt=kept[-1]).filter(
        Exists(past_grace))
    with transaction.atomic():
        SnapshotPage.objects.filter(snapshot__in=doomed).delete()
        count, _ = doomed.delete()
    return count


def prune_all(*, slug: str | None = None, keep: int) -> int:
    """`prune` each feed (or `slug`) with more than `keep` complete snapshots."""
    feeds = Feed.objects.annotate(
        complete_snapshots=Count("snapshots", filter=Q(snapshots__complete=True))
    ).filter(complete_snapshots__gt=max(keep, 1))
    if slug is not None:
        feeds = feeds.filter(slug=slug)
    return sum(prune(feed, keep=keep) for feed in feeds)
