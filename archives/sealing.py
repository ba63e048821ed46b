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
    """Seal every full page of every feed."""
    sealed = []
    for feed in Feed.objects.all():
        sealed += seal_feed(feed, dry_run=dry_run)
    return sealed


def seal_feed(feed: Feed, *, dry_run: bool = False) -> list[SealedPage]:
    """Seal the full pages of one feed, oldest first; returns what it sealed."""
    sealed = []
    while True:
        feed.refresh_from_db(fields=["last_seq", "sealed_pages", "page_size", "title",
                                     "subtitle", "author", "slug"])
        if feed.full_pages <= feed.sealed_pages:
            return sealed
        number = feed.sealed_pages + 1
        first, last = feed.sealed_seq + 1, number * feed.page_size
        if dry_run:
            sealed += [SealedPage(feed.slug, n, (n - 1) * feed.page_size + 1, n * feed.page_size)
                       for n in range(number, feed.full_pages + 1)]
            return sealed
        if _seal_page(feed, number, first, last):
            sealed.append(SealedPage(feed.slug, number, first, last))
        # else another sealer took this page; go on from where it left the feed


def _seal_page(feed: Feed, number: int, first: int, last: int) -> bool:
    rows = atom.entry_rows(feed, first, last)
    if len(rows) != last - first + 1 or rows[0].seq != first:
        raise RuntimeError(f"feed {feed.slug}: entries {first}..{last} are not all present")
    body = atom.render_archive(feed, number, rows)
    with transaction.atomic():
        claimed = Feed.objects.filter(
            pk=feed.pk, sealed_pages=number - 1, page_size=feed.page_size
        ).update(sealed_pages=number)
        if not claimed:
            return False
        ArchivePage.objects.create(
            feed=feed, number=number, first_seq=first, last_seq=last,
            first_updated=rows[0].updated, last_updated=rows[-1].updated,
            body=body, etag=page_etag(body),
        )
        if number > 1:
            _link_previous_page(feed, number - 1)
    logger.info("sealed %s page %s (entries %s..%s)", feed.slug, number, first, last)
    return True


def _link_previous_page(feed: Feed, number: int) -> None:
    page = ArchivePage.objects.select_for_update().get(feed=feed, number=number)
    page.body = atom.add_next_archive(bytes(page.body), atom.archive_url(feed.slug, number + 1))
    page.etag = page_etag(page.body)
    page.has_next = True
    page.save(update_fields=["body", "etag", "has_next"])


def page_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
