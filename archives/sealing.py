"""Sealing: freezing each full run of `page_size` entries into an archive page.

Page n holds entries (n-1)*page_size+1 .. n*page_size. A sealer renders the page
outside any lock (entries at or below the feed's committed last_seq never change), then
claims it with a conditional update of the feed's `sealed_pages` in a short transaction
that also stores the page and adds next-archive to page n-1. Two sealers racing for the
same page: one update matches, the other matches nothing and rolls back. A sealer killed
anywhere leaves either the whole page and its link, or nothing.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from django.db import transaction

from . import atom
from .models import ArchivePage, Feed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SealedPage:
    feed: str
    number: int
    first_seq: int
    last_seq: int


def seal_all(*, dry_run: bool = False) -> list[SealedPage]:
    """Seal every full page of every feed. A feed that fails (deleted meanwhile, say) is
    logged and skipped, so that one feed never stops the sealing of the others."""
    sealed = []
    for feed in Feed.objects.all():
        try:
            sealed += seal_feed(feed, dry_run=dry_run)
        except Feed.DoesNotExist:
            logger.info("feed %s was deleted while sealing", feed.slug)
        except Exception:
            logger.exception("sealing feed %s failed; the next pass tries again", feed.slug)
    return sealed


# Entries read from the database in one query (whole pages of them, at least one page):
# fewer round trips than a query per page, and bounded memory whatever the feed's size.
ENTRIES_PER_READ = 1000
# Pages sealed in one pass before the feed row is read again (it may have a new title).
PAGES_PER_PASS = 100


def seal_feed(
    feed: Feed, *, dry_run: bool = False, max_pages: int | None = None
) -> list[SealedPage]:
    """Seal the full pages of one feed (at most `max_pages`), oldest first; returns what
    it sealed."""
    sealed: list[SealedPage] = []
    previous = None  # (number, body) of the page this call sealed last
    while max_pages is None or len(sealed) < max_pages:
        feed.refresh_from_db(fields=["last_seq", "sealed_pages", "page_size", "title",
                                     "subtitle", "author", "slug"])
        if feed.full_pages <= feed.sealed_pages:
            break
        number = feed.sealed_pages + 1
        last_full = feed.full_pages
        if max_pages is not None:
            last_full = min(last_full, number + max_pages - len(sealed) - 1)
        if dry_run:
            sealed += [SealedPage(feed.slug, n, (n - 1) * feed.page_size + 1, n * feed.page_size)
                       for n in range(number, last_full + 1)]
            break
        stop = min(last_full, number + PAGES_PER_PASS - 1)
        previous = _seal_pages(feed, number, stop, sealed, previous)
        # None: another sealer took a page; go on from where it left the feed
    return sealed


def _seal_pages(feed: Feed, number: int, stop: int, sealed: list[SealedPage], previous):
    """Seal pages number..stop in order; returns the last (number, body) sealed, or None
    as soon as another sealer has taken a page."""
    size = feed.page_size
    pages_per_read = max(1, ENTRIES_PER_READ // size)
    for start in range(number, stop + 1, pages_per_read):
        end = min(stop, start + pages_per_read - 1)
        rows = atom.entry_rows(feed, (start - 1) * size + 1, end * size)
        for n in range(start, end + 1):
            body = _seal_page(feed, n, rows[(n - start) * size:(n - start + 1) * size], previous)
            if body is None:
                return None
            sealed.append(SealedPage(feed.slug, n, (n - 1) * size + 1, n * size))
            previous = (n, body)
    return previous


def _seal_page(feed: Feed, number: int, rows: list[atom.EntryRow], previous) -> bytes | None:
    """Seal page `number` from its rows; its bytes, or None if another sealer claimed it.
    `previous` is the (number, body) this sealer stored last, which saves reading page
    n-1 back when it is that page."""
    first, last = (number - 1) * feed.page_size + 1, number * feed.page_size
    if len(rows) != last - first + 1 or rows[0].seq != first or rows[-1].seq != last:
        raise RuntimeError(f"feed {feed.slug}: entries {first}..{last} are not all present")
    body = atom.render_archive(feed, number, rows)
    with transaction.atomic():
        # The page was rendered with this slug and page size: claim it only if neither
        # changed meanwhile (a rename is allowed until the first page is sealed).
        claimed = Feed.objects.filter(
            pk=feed.pk, sealed_pages=number - 1, page_size=feed.page_size, slug=feed.slug
        ).update(sealed_pages=number)
        if not claimed:
            return None
        ArchivePage.objects.create(
            feed=feed, number=number, first_seq=first, last_seq=last,
            first_updated=rows[0].updated, last_updated=rows[-1].updated,
            body=body, etag=page_etag(body),
        )
        if number > 1:
            known = previous[1] if previous and previous[0] == number - 1 else None
            _link_previous_page(feed, number - 1, known)
    logger.info("sealed %s page %s (entries %s..%s)", feed.slug, number, first, last)
    return body


def _link_previous_page(feed: Feed, number: int, body: bytes | None) -> None:
    """Add next-archive to page `number`. Only the sealer that claimed page number + 1 (in
    this transaction) may change it, so bytes this sealer stored for it are still current."""
    if body is None:
        body = bytes(
            ArchivePage.objects.select_for_update()
            .values_list("body", flat=True).get(feed=feed, number=number)
        )
    body = atom.add_next_archive(body, atom.archive_url(feed.slug, number + 1))
    ArchivePage.objects.filter(feed=feed, number=number).update(
        body=body, etag=page_etag(body), has_next=True
    )


def page_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
