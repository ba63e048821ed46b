"""Frozen documents rendered again after the service moves to another base URL
(FEEDPUB_BASE_URL): what `manage.py rerender_documents` does (docs/operating/moving.md).

Sealed pages (Atom, RSS twin, linked page) and snapshot pages are rendered once and keep
absolute URLs in their bodies, so after a move (a new domain, a port) they would point at
the old place forever. Each is rendered again from its own entries with the current base
URL. The new bytes are stored only if the stored ones are exactly what this renderer makes
of the same entries with the old base URL (read from the document's own links) and the
feed's description as the page shows it: so the base URL is the only thing that changes,
and no entry is reordered, added, dropped or altered. A document this release cannot
reproduce (sealed by a renderer that wrote other bytes, or changed by hand) is left as it
is and reported.

Validators move honestly (documents/base.py): a re-rendered page's `modified` moves to a
later second, which moves its Last-Modified, the file ETag that names that second, and its
exported files' times (the export pass writes them again: `exported` is now behind); its
content hash follows its bytes. A snapshot page's ETag is the hash of its bytes; its
Last-Modified is its last entity's (the format's rule), so it is revalidated by ETag only
(documents/linked.py). The documents rendered per request changed bytes with the setting:
every feed's `subscription_modified` and `description_modified` move to now, so their
Last-Modified does too.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from lxml import etree

from archives.db.heads import announce
from archives.documents import atom, base, linkedpages
from archives.documents.feeds import ArchiveDocument, RssArchiveDocument
from archives.models import ArchivePage, Entry, Feed, SnapshotPage
from archives.storage import export

BATCH = 20  # pages read (bodies and all) per query
ONE_SECOND = timedelta(seconds=1)


@dataclass
class Report:
    """What a pass re-rendered, found current, or could not reproduce."""

    pages: int = 0  # sealed pages stored again
    snapshot_pages: int = 0
    current: int = 0  # documents already rendered with this base URL
    feeds: int = 0  # feeds whose per-request documents take a new Last-Modified
    exported: int = 0  # pages whose files were written again
    not_reproduced: list[str] = field(default_factory=list)  # left as they were


def documents(slug: str | None = None) -> int:
    """How many sealed and snapshot pages a pass looks at (for a progress bar)."""
    pages = ArchivePage.objects.all()
    snapshot_pages = SnapshotPage.objects.filter(snapshot__complete=True)
    if slug is not None:
        pages = pages.filter(feed__slug=slug)
        snapshot_pages = snapshot_pages.filter(snapshot__feed__slug=slug)
    return pages.count() + snapshot_pages.count()


def rerender(*, slug: str | None = None, dry_run: bool = False,
             on_document: Callable[[], object] | None = None) -> Report:
    """Re-render every frozen document of every feed (or of `slug`) whose links use
    another base URL than FEEDPUB_BASE_URL, then export the pages' files again."""
    report = Report()
    feeds = Feed.objects.order_by("pk")
    for feed in feeds if slug is None else feeds.filter(slug=slug):
        pages = _Pages(feed, report, dry_run, on_document)
        pages.archive_pages()
        pages.snapshot_pages()
        if not dry_run:
            _touch(feed)
            report.feeds += 1
    if not dry_run and report.pages and settings.FEEDPUB_EXPORT_PAGES:
        # A page is exported once its new Last-Modified second has come (export.py).
        time.sleep(max(0.0, base.visible_second(base.change_stamp())
                       - base.now().timestamp()))
        report.exported = export.export_pending(slug=slug, limit=None)
    return report


class _Pages:
    """One feed's sealed and snapshot pages, rendered again."""

    def __init__(self, feed: Feed, report: Report, dry_run: bool,
                 on_document: Callable[[], object] | None):
        self.feed, self.report, self.dry_run = feed, report, dry_run
        self.on_document = on_document or (lambda: None)
        self.base_url = settings.FEEDPUB_BASE_URL

    def archive_pages(self) -> None:
        after = 0
        while True:
            numbers = list(ArchivePage.objects.filter(feed=self.feed, number__gt=after)
                           .order_by("number").values_list("number", flat=True)[:BATCH])
            for number in numbers:
                self.archive_page(number)
                self.on_document()
            if len(numbers) < BATCH:
                return
            after = numbers[-1]

    def archive_page(self, number: int) -> None:
        feed = self.feed
        page = ArchivePage.objects.get(feed=feed, number=number)
        body, rss, multipart = (None if value is None else bytes(value)
                                for value in (page.body, page.rss, page.multipart))
        self_link = etree.fromstring(body).find(f"{atom.A}link[@rel='self']").get("href")
        old_base = _base_of(self_link, atom._path("archives:archive", feed.slug, number))
        if old_base == self.base_url:
            self.report.current += 1
            return
        rows = atom.entry_rows(feed, page.first_seq, page.last_seq)
        renderings = {
            "Atom": (body, lambda: ArchiveDocument.freeze(
                _as_atom_shows_it(feed, body), number, rows, has_next=page.has_next)[0]),
            "RSS": (rss, lambda: RssArchiveDocument.freeze(
                _as_rss_shows_it(feed, rss), number, rows, has_next=page.has_next)),
            "linked page": (multipart, lambda: linkedpages.render_page(feed, rows)),
        }
        new = {}
        for name, (stored, render) in renderings.items():
            if stored is None:  # a format not frozen yet: the backfill renders it anew
                continue
            reproduced = old_base is not None and _render(old_base, render) == stored
            if not reproduced:
                self.report.not_reproduced.append(f"{feed.slug} page {number} ({name})")
                return
            new[name] = _render(self.base_url, render)
        self.report.pages += 1
        if self.dry_run:
            return
        with transaction.atomic():
            # Stamped just before the commit (base.py); a later second than the stored one,
            # so that the file ETag (second, length) moves even if the length does not.
            modified = max(base.change_stamp(), _next_second(page.modified))
            stored = ArchivePage.objects.filter(pk=page.pk, modified=page.modified,
                                                has_next=page.has_next).update(
                body=new["Atom"], etag=base.bytes_etag(new["Atom"]),
                rss=new.get("RSS", rss), multipart=new.get("linked page", multipart),
                modified=modified)
        if not stored:  # sealing gave it next-archive meanwhile: render what it is now
            self.report.pages -= 1
            self.archive_page(number)

    def snapshot_pages(self) -> None:
        feed, after = self.feed, 0
        pages = SnapshotPage.objects.filter(snapshot__feed=feed, snapshot__complete=True)
        record_path = atom._path("archives:record", feed.slug, "KEY").removesuffix("KEY")
        while True:
            batch = list(pages.filter(pk__gt=after).order_by("pk").values_list(
                "pk", "body", "etag")[:BATCH])
            for pk, body, etag in batch:
                self.snapshot_page(pk, bytes(body), etag, record_path)
                self.on_document()
            if len(batch) < BATCH:
                return
            after = batch[-1][0]

    def snapshot_page(self, pk: int, body: bytes, etag: str, record_path: str) -> None:
        feed, parts = self.feed, linkedpages.split(body)
        seqs = [linkedpages.entry_seq(part) for part in parts]
        rows = {row[0]: atom.EntryRow._make(row) for row in Entry.objects.filter(
            feed=feed, seq__in=seqs).values_list(*atom.ENTRY_ROW_COLUMNS)}
        first = rows.get(seqs[0])
        old_base = first and _base_of(linkedpages.location_of(parts[0]),
                                      record_path + quote(first.key, safe=""))
        if old_base == self.base_url:
            self.report.current += 1
            return

        def render() -> bytes:
            prefix = atom.record_url_prefix(feed.slug)
            return linkedpages.render(linkedpages.entity(feed, rows[seq], prefix)
                                      for seq in seqs)

        if old_base is None or len(rows) != len(seqs) or _render(old_base, render) != body:
            self.report.not_reproduced.append(f"{feed.slug} snapshot page {pk}")
            return
        self.report.snapshot_pages += 1
        if not self.dry_run:
            new = _render(self.base_url, render)
            SnapshotPage.objects.filter(pk=pk, etag=etag).update(
                body=new, etag=base.bytes_etag(new))


def _render(base_url: str, render: Callable[[], bytes]) -> bytes:
    with atom.rendered_with_base(base_url):
        return render()


def _base_of(url: str, path: str) -> str | None:
    """The base URL of `url`, a document's link to `path`; None if it is not one."""
    return url.removesuffix(path) if url.endswith(path) else None


def _as_atom_shows_it(feed: Feed, body: bytes) -> Feed:
    """`feed` described as Atom page `body` shows it: a feed retitled since keeps its old
    title in the pages sealed before, and they render again to the same head."""
    root, described = etree.fromstring(body), copy.copy(feed)
    described.title = root.findtext(f"{atom.A}title")
    described.subtitle = root.findtext(f"{atom.A}subtitle") or ""
    described.author = root.findtext(f"{atom.A}author/{atom.A}name")
    described.language = root.get(atom.XML_LANG)
    return described


def _as_rss_shows_it(feed: Feed, body: bytes) -> Feed:
    """`feed` described as RSS twin `body` shows it (its description is the subtitle, or
    the title when there is none: either renders the same)."""
    channel, described = etree.fromstring(body).find("channel"), copy.copy(feed)
    described.title = channel.findtext("title")
    described.subtitle = channel.findtext("description")
    described.language = channel.findtext("language")
    return described


def _next_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + ONE_SECOND


def _touch(feed: Feed) -> None:
    """Move the Last-Modified of the feed's documents rendered per request: their bytes
    changed with the base URL. At least a second later than before, so that their
    Last-Modified (a whole second) moves even if they last changed within this one."""
    with transaction.atomic():
        now = Value(base.change_stamp(), output_field=models.DateTimeField())
        Feed.objects.filter(pk=feed.pk).update(**{
            name: Greatest(F(name) + ONE_SECOND, now)
            for name in ("subscription_modified", "description_modified")})
        announce(feed.pk)
