"""Sealing: freezing each full run of `page_size` entries into an archive page.

Page n holds entries (n-1)*page_size+1 .. n*page_size. A sealer reads and renders a run
of full pages outside any transaction (entries at or below the feed's committed last_seq
never change), then stores them in one short transaction: insert the pages, add
next-archive to the page before them, and last of all claim them with a conditional
update of the feed's `sealed_pages`. The claim comes last so that the feed row, which
every writer locks, is held only from that update to the commit. Two sealers racing for
the same pages: the unique (feed, number) index makes the second wait and fail, or its
claim matches nothing; either way it rolls back. A sealer killed anywhere leaves either
the whole run and its link, or nothing.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, models, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Greatest

from archives.db import address, fastsql, locks
from archives.db.heads import announce
from archives.documents import atom, base, linkedpages
from archives.documents.feeds import ArchiveDocument, RssArchiveDocument
from archives.models import NEEDS_SEALING, ArchivePage, Feed
from archives.storage import export

logger = logging.getLogger(__name__)

# A run is at most this many pages (sealed in one transaction) and, for large pages, at
# most ENTRIES_PER_RUN entries (read in one query), so memory stays bounded at any size.
PAGES_PER_RUN = 20
ENTRIES_PER_RUN = 2000


@dataclass(frozen=True)
class SealedPage:
    feed: str
    number: int
    first_seq: int
    last_seq: int


class _LostRace(Exception):
    """Another sealer stored these pages first."""


def seal_all(*, dry_run: bool = False, on_sealed: Callable[[int], None] | None = None,
             stop: Callable[[], bool] = lambda: False) -> list[SealedPage]:
    """Seal every full page of every feed. A feed that fails (deleted meanwhile, say) is
    logged and skipped, so that one feed never stops the sealing of the others.

    Only feeds with a full page to seal are read, through the partial index that holds
    just those (models.NEEDS_SEALING): a pass that finds nothing to do is one query of an
    empty index, however many feeds there are (and one more of the pages not exported yet,
    another partial index, when pages are exported). Once `stop()` is true (a sealer asked
    to stop), it ends after the run it is sealing."""
    global _backfilled
    if not dry_run and not _backfilled:
        _backfilled = _backfill()
    sealed: list[SealedPage] = []
    for feed in Feed.objects.filter(Q(NEEDS_SEALING)).order_by("pk"):
        if stop():
            return sealed
        try:
            sealed += seal_feed(feed, dry_run=dry_run, on_sealed=on_sealed, stop=stop)
        except Feed.DoesNotExist:
            logger.info("feed %s was deleted while sealing", feed.slug)
        except address.WrongBaseURL:
            raise  # this process's configuration, not the feed's: it must not go on
        except Exception:
            logger.exception("sealing feed %s failed; the next pass tries again", feed.slug)
    if not dry_run:
        try:  # what this pass and earlier ones sealed, once settled (archives/storage/export.py)
            export.export_pending()
        except Exception:  # the files are a copy: they must never stop sealing
            logger.exception("exporting pages failed; the next pass tries again")
    return sealed


# Pages sealed before every format was stored with them get theirs on each pass until none
# is left; pages sealed since have all of them, so a process stops looking once it finds
# none (and a pass with nothing to do stays the one query of seal_all's docstring).
_backfilled = False


def _backfill() -> bool:
    """Store a run of missing linked-pages and RSS bodies; whether none was missing."""
    done = True
    for freeze, what in ((freeze_linked_pages, "linked pages"), (freeze_rss_pages, "RSS twins")):
        try:
            done = freeze() == 0 and done
        except Exception:  # a backfill must never stop sealing
            logger.exception("freezing %s failed; the next pass tries again", what)
            done = False
    return done


def seal_feed(
    feed: Feed, *, dry_run: bool = False, max_pages: int | None = None,
    on_sealed: Callable[[int], None] | None = None, stop: Callable[[], bool] = lambda: False,
) -> list[SealedPage]:
    """Seal the full pages of one feed (at most `max_pages`), oldest first; returns what
    it sealed. `on_sealed` is told how many pages each committed run sealed (a progress
    bar's caller: a run can take seconds). Once `stop()` is true, no other run begins."""
    sealed: list[SealedPage] = []
    previous = None  # (number, (body, rss)) of the last page this call stored
    while (max_pages is None or len(sealed) < max_pages) and not stop():
        feed.refresh_from_db(fields=["last_seq", "sealed_pages", "base_url",
                                     *ArchiveDocument.feed_fields])
        recorded = feed.base_url  # the claim holds it unchanged
        address.check(feed)
        first, last = feed.sealed_pages + 1, feed.full_pages
        if max_pages is not None:
            last = min(last, first + max_pages - len(sealed) - 1)
        if last < first:
            break
        if dry_run:
            sealed += [_sealed_page(feed, n) for n in range(first, last + 1)]
            break
        last = min(last, first + _pages_per_run(feed.page_size) - 1)
        try:
            bodies = _seal_run(feed, first, last, previous, recorded)
        except _LostRace:
            _check_progress(feed)
            previous = None  # go on from where the other sealer left the feed
            continue
        export.superseded(feed.slug, first - 1)  # committed: drop its open files
        sealed += [_sealed_page(feed, n) for n in range(first, last + 1)]
        previous = (last, bodies[-1])
        if on_sealed is not None:
            on_sealed(last - first + 1)
    return sealed


def seal_after_write(feed_id: int, *, max_pages: int) -> list[SealedPage]:
    """Seal up to `max_pages` of a feed right after a write committed, unless another
    writer is sealing it at this moment: that one goes on to the pages full by then, and
    the next write or seal_archives to any filled later (archives/db/locks.py). The
    sealer never takes that lock: whatever becomes of it, seal_archives still seals."""
    with locks.sealing_after_write(feed_id) as ours:
        if not ours:
            return []
        return seal_feed(Feed.objects.get(pk=feed_id), max_pages=max_pages)


def _pages_per_run(page_size: int) -> int:
    return max(1, min(PAGES_PER_RUN, ENTRIES_PER_RUN // page_size))


def _check_progress(feed: Feed) -> None:
    """After a lost race the feed must have moved on: a winner commits its claim before the
    loser's insert fails. If nothing changed, a page row exists that no claim covers (a
    partial restore, a hand repair): retrying would spin forever, so say so instead."""
    seen = (feed.sealed_pages, feed.slug, feed.page_size, feed.base_url)
    feed.refresh_from_db(fields=["sealed_pages", "slug", "page_size", "base_url"])
    if (feed.sealed_pages, feed.slug, feed.page_size, feed.base_url) == seen:
        raise RuntimeError(
            f"feed {feed.slug}: page {feed.sealed_pages + 1} or a later one is stored but "
            f"sealed_pages is {feed.sealed_pages}; the archive needs repair"
        )


def _sealed_page(feed: Feed, number: int) -> SealedPage:
    return SealedPage(feed.slug, number, (number - 1) * feed.page_size + 1,
                      number * feed.page_size)


def _seal_run(feed: Feed, first: int, last: int, previous,
              recorded: str) -> list[tuple[bytes, bytes | None]]:
    """Render and store pages first..last; their (Atom, RSS) bodies. `previous` is the
    (number, bodies) this sealer stored last, which saves reading page first-1 back when it
    is that page; `recorded`, the feed's base URL as read before rendering."""
    size = feed.page_size
    with _collector_paused():
        rows = atom.entry_rows(feed, (first - 1) * size + 1, last * size)
        if len(rows) != (last - first + 1) * size or rows[-1].seq != last * size:
            raise RuntimeError(f"feed {feed.slug}: entries of pages {first}..{last} are missing")
        pages = []
        for number in range(first, last + 1):
            start = (number - first) * size
            pages.append(_frozen_page(feed, number, rows[start:start + size],
                                      has_next=number < last))
        del rows
    try:
        with transaction.atomic():
            # Documents' Last-Modified: stamped just before the commit (see
            # archives/documents/base.py).
            now = base.change_stamp()
            _insert_pages(pages, now)
            if first > 1:
                known = previous[1] if previous and previous[0] == first - 1 else None
                _link_previous_page(feed, first - 1, known, now)
            # The pages were rendered with this slug, page size and base URL: claim them
            # only if none changed meanwhile (slug and page size are fixed once the feed
            # has an entry; a move by rerender_documents may come any time), recording the
            # base URL if it was none.
            claimed = Feed.objects.filter(
                pk=feed.pk, sealed_pages=first - 1, page_size=size, slug=feed.slug,
                base_url=recorded,
            ).update(sealed_pages=last, base_url=feed.base_url,
                     subscription_modified=_no_earlier("subscription_modified", now))
            if not claimed:
                raise _LostRace
            announce(feed.pk)  # delivered with the commit (archives/db/heads.py)
    except IntegrityError:  # another sealer committed these page numbers first
        raise _LostRace from None
    logger.info("sealed %s pages %s..%s (entries %s..%s)", feed.slug, first, last,
                (first - 1) * size + 1, last * size)
    return [(bytes(page.body), None if page.rss is None else bytes(page.rss))
            for page in pages]  # (bytes() of bytes is the same object: no copy)


def _frozen_page(feed: Feed, number: int, rows: list[atom.EntryRow], *,
                 has_next: bool) -> ArchivePage:
    """Page `number` of `rows` in every format sealing stores."""
    body, etag = ArchiveDocument.freeze(feed, number, rows, has_next=has_next)
    return ArchivePage(
        feed=feed, number=number, first_seq=rows[0].seq, last_seq=rows[-1].seq,
        first_updated=rows[0].updated, last_updated=rows[-1].updated, body=body, etag=etag,
        has_next=has_next, multipart=linkedpages.render_page(feed, rows),
        rss=RssArchiveDocument.freeze(feed, number, rows, has_next=has_next),
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a run is read and rendered.

    A run allocates tens of thousands of containers that all survive it (a tuple, two
    decoded JSON values and their members for every entry), so the collector ran
    again and again and found nothing: ~5 of ~17 us an entry read. None of them is in
    a cycle, so reference counting frees them all when the run is done; anything else
    is collected once the collector is back on, on its next pass.
    """
    if not gc.isenabled():  # someone else's pause: theirs to end
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


PAGE_COLUMNS = ("feed_id", "number", "first_seq", "last_seq", "first_updated", "last_updated",
                "body", "etag", "has_next", "sealed_at", "modified", "multipart", "rss")


def _insert_pages(pages: list[ArchivePage], now: datetime) -> None:
    """Store the run's pages; on PostgreSQL by COPY, which sends their ~50 KB bodies
    without quoting them into the SQL text (see archives/db/fastsql.py)."""
    for page in pages:
        page.sealed_at = page.modified = now
    fastsql.insert(ArchivePage, pages, PAGE_COLUMNS)


def _link_previous_page(feed: Feed, number: int, bodies: tuple[bytes, bytes | None] | None,
                        now: datetime) -> None:
    """Add next-archive to page `number` and to its RSS twin. Only the transaction that
    stores page number + 1 changes them, so bytes this sealer stored are still current.
    A twin not stored yet (migration 0007) stays so: freeze_rss_pages renders it linked."""
    stored = bodies if bodies is not None else (
        ArchivePage.objects.select_for_update().values_list("body", "rss")
        .get(feed=feed, number=number))
    body, etag = ArchiveDocument.link_next(feed.slug, number, bytes(stored[0]))
    rss = None if stored[1] is None else RssArchiveDocument.link_next(
        feed.slug, number, bytes(stored[1]))
    ArchivePage.objects.filter(feed=feed, number=number).update(
        body=body, etag=etag, has_next=True, rss=rss, modified=_no_earlier("modified", now)
    )


def _no_earlier(column: str, now: datetime) -> Greatest:
    """`now`, or the column's stored time if later (another host's clock may be ahead):
    a document's Last-Modified never moves back."""
    return Greatest(F(column), Value(now, output_field=models.DateTimeField()))


def freeze_linked_pages(limit: int = PAGES_PER_RUN) -> int:
    """Store the linked-pages body of up to `limit` pages sealed before those were stored
    with every page (migration 0004); how many. Until then the view renders them from
    the same entries, to the same bytes."""
    missing = (ArchivePage.objects.filter(multipart__isnull=True).select_related("feed")
               .order_by("feed_id", "number"))  # the partial index's order
    done = 0
    for page in missing.defer("body", "rss")[:limit]:
        address.require(page.feed)
        rows = atom.entry_rows(page.feed, page.first_seq, page.last_seq)
        multipart = linkedpages.render_page(page.feed, rows)
        # exported=None: its linked-page file is written by the next export pass (the
        # Atom and RSS bytes, and so their files, are unchanged).
        done += ArchivePage.objects.filter(pk=page.pk, multipart__isnull=True).update(
            multipart=multipart, exported=None)
    return done


def freeze_rss_pages(limit: int = PAGES_PER_RUN) -> int:
    """Store the RSS twin of up to `limit` pages sealed before twins were stored with every
    page (migration 0007); how many. Until then the view renders them from the same
    entries (with the feed's description as it is then, and no Last-Modified)."""
    missing = (ArchivePage.objects.filter(rss__isnull=True).select_related("feed")
               .order_by("feed_id", "number"))  # the partial index's order
    done = 0
    for page in missing.defer("body", "multipart")[:limit]:
        address.require(page.feed)
        rss = RssArchiveDocument.render_unfrozen(page)
        # Unchanged meanwhile: a page that gained next-archive since it was read is
        # rendered again on the next pass, with its link. `modified` moves: the feed may
        # have been retitled since a copy was rendered, and that copy had only its Date.
        done += ArchivePage.objects.filter(
            pk=page.pk, rss__isnull=True, has_next=page.has_next).update(
            rss=rss, modified=_no_earlier("modified", base.change_stamp()))
    return done
