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
(documents/linked.py). The documents rendered per request changed bytes with the setting,
and so did every record's URLs in OAI-PMH: a feed recorded under another base URL moves
first (`_move`): its recorded address, its `subscription_modified` and
`description_modified` (so their Last-Modified) and its records' OAI datestamps move to
now, once (a second pass finds it recorded under the base URL already).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

from django.db import models, transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Greatest
from django.utils import timezone
from lxml import etree

from archives.conf import settings
from archives.db.heads import announce
from archives.db.rows import ENTRY_ROW
from archives.documents import atom, base, linkedpages, urls
from archives.documents.feeds import ArchiveDocument, RssArchiveDocument
from archives.models import ArchivePage, Entry, Feed, Record, SnapshotPage
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
        # The feed moves first, once: a pass killed after this renders the rest of its
        # documents when run again, and tells its subscribers and harvesters nothing again.
        if not dry_run and feed.base_url != settings.FEEDPUB_BASE_URL:
            _move(feed)
            report.feeds += 1
        pages = _Pages(feed, report, dry_run, on_document)
        pages.archive_pages()
        pages.snapshot_pages()
    if not dry_run and settings.FEEDPUB_EXPORT_PAGES:
        report.exported = _export(slug)
    return report


def _export(slug: str | None) -> int:
    """Export every page whose files are behind: this pass's, and those an interrupted
    pass stored (which this one finds current), once their Last-Modified second has come
    (export.py)."""
    newest = export.pending(slug, settled=False).aggregate(Max("modified"))["modified__max"]
    if newest is None:
        return 0
    time.sleep(max(0.0, base.visible_second(newest) - base.now().timestamp()))
    return export.export_pending(slug=slug, limit=None)


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
            pages = list(ArchivePage.objects.filter(feed=self.feed, number__gt=after)
                         .order_by("number")[:BATCH])
            rendered = [page for page in map(self.archive_page, pages) if page is not None]
            while rendered and not self.dry_run:
                changed = self.store(rendered)  # those changed meanwhile: as they are now
                again = (self.archive_page(ArchivePage.objects.get(pk=page.pk))
                         for page in changed)
                rendered = [page for page in again if page is not None]
            if len(pages) < BATCH:
                return
            after = pages[-1].number

    def archive_page(self, page: ArchivePage) -> ArchivePage | None:
        """`page` with its bodies rendered again with the base URL (not stored), or None
        when it has that base URL already or does not reproduce."""
        self.on_document()
        feed, number = self.feed, page.number
        body = bytes(page.body)
        rss, multipart = (None if value is None else bytes(value)
                          for value in (page.rss, page.multipart))
        self_link = etree.fromstring(body).find(f"{atom.A}link[@rel='self']").get("href")
        old_base = _base_of(self_link, urls.url_path("archives:archive", feed.slug, number))
        if old_base == self.base_url:
            self.report.current += 1
            return None
        rows = atom.entry_rows(feed, page.first_seq, page.last_seq)
        # Each format as it was sealed (a next-archive link came later, maybe from a sealer
        # that already had the new base URL) and its renderer, given has_next.
        as_atom = _as_atom_shows_it(feed, body)
        # (A page sealed before its DELETE entities had a Content-Type keeps them so.)
        typed = multipart is None or linkedpages.deletions_typed(multipart)
        renderings: dict[str, tuple[bytes | None, Callable[[bool], bytes]]] = {
            "Atom": (_without_next_archive(body, ATOM_NEXT), lambda has_next:
                     ArchiveDocument.freeze(as_atom, number, rows, has_next=has_next)[0]),
        }
        if rss is not None:
            as_rss = _as_rss_shows_it(feed, rss)
            renderings["RSS"] = (_without_next_archive(rss, RSS_NEXT), lambda has_next:
                                 RssArchiveDocument.freeze(as_rss, number, rows,
                                                           has_next=has_next))
        renderings["linked page"] = (multipart, lambda has_next: linkedpages.render_page(
            feed, rows, typed_deletions=typed))
        new = {}
        for name, (sealed, render) in renderings.items():
            if sealed is None:  # a format not frozen yet: the backfill renders it anew
                continue
            if old_base is None or _render(old_base, render, False) != sealed:
                self.report.not_reproduced.append(f"{feed.slug} page {number} ({name})")
                return None
            new[name] = _render(self.base_url, render, page.has_next)
        self.report.pages += 1
        page.body, page.rss, page.multipart = new["Atom"], new.get("RSS"), new.get("linked page")
        return page

    def store(self, pages: list[ArchivePage]) -> list[ArchivePage]:
        """Store re-rendered pages; those that changed since they were read (sealing gave
        one its next-archive link), which are left for rendering again."""
        changed = []
        with transaction.atomic():
            # Stamped just before the commit (base.py); a later second than the stored one,
            # so that the file ETag (second, length) moves even if the length does not.
            now = base.change_stamp()
            for page in pages:
                if not ArchivePage.objects.filter(
                        pk=page.pk, modified=page.modified, has_next=page.has_next).update(
                        body=page.body, etag=base.bytes_etag(bytes(page.body)), rss=page.rss,
                        multipart=page.multipart,
                        modified=max(now, _next_second(page.modified))):
                    changed.append(page)
        self.report.pages -= len(changed)
        return changed

    def snapshot_pages(self) -> None:
        feed, after = self.feed, 0
        pages = SnapshotPage.objects.filter(snapshot__feed=feed, snapshot__complete=True)
        record_path = urls.url_path("archives:record", feed.slug, "KEY").removesuffix("KEY")
        while True:
            batch = list(pages.filter(pk__gt=after).order_by("pk").values_list(
                "pk", "body", "etag")[:BATCH])
            rendered = [(pk, etag, new) for pk, body, etag in batch
                        if (new := self.snapshot_page(pk, bytes(body), record_path))]
            if rendered and not self.dry_run:
                with transaction.atomic():  # (only rerender_documents changes them)
                    for pk, etag, new in rendered:
                        SnapshotPage.objects.filter(pk=pk, etag=etag).update(
                            body=new, etag=base.bytes_etag(new))
            if len(batch) < BATCH:
                return
            after = batch[-1][0]

    def snapshot_page(self, pk: int, body: bytes, record_path: str) -> bytes | None:
        """The page's body rendered again with the base URL, or None when it has that
        base URL already or does not reproduce."""
        self.on_document()
        feed, parts = self.feed, linkedpages.split(body)
        if linkedpages.location_of(parts[0]).startswith(self.base_url + record_path):
            self.report.current += 1
            return None
        seqs = [linkedpages.entry_seq(part) for part in parts]
        # (The range lets the (feed, seq) index find them: IN alone made PostgreSQL read
        # every entry of the feed.)
        rows = {row.seq: row for row in ENTRY_ROW.from_values(Entry.objects.filter(
            feed=feed, seq__range=(min(seqs), max(seqs)), seq__in=seqs).order_by()
            .values_list(*ENTRY_ROW.orm_names))}
        first = rows.get(seqs[0])
        old_base = first and _base_of(linkedpages.location_of(parts[0]),
                                      record_path + quote(first.key, safe=""))

        def render() -> bytes:
            prefix = urls.record_url_prefix(feed.slug)
            return linkedpages.render(linkedpages.entity(feed, rows[seq], prefix)
                                      for seq in seqs)

        if old_base is None or len(rows) != len(seqs) or _render(old_base, render) != body:
            self.report.not_reproduced.append(f"{feed.slug} snapshot page {pk}")
            return None
        self.report.snapshot_pages += 1
        return _render(self.base_url, render)


def _render(base_url: str, render: Callable[..., bytes], *args) -> bytes:
    with urls.rendered_with_base(base_url):
        return render(*args)


ATOM_NEXT = f"{atom.A}link[@rel='next-archive']"
RSS_NEXT = f"channel/{{{atom.ATOM_NS}}}link[@rel='next-archive']"


def _without_next_archive(body: bytes, path: str) -> bytes:
    """A sealed page's bytes as they were sealed, before it gained its next-archive link:
    lxml writes a parsed page back as it was (add_next_archive relies on it too)."""
    root = etree.fromstring(body)
    link = root.find(path)
    if link is None:
        return body
    link.getparent().remove(link)
    return etree.tostring(root, xml_declaration=True, encoding="utf-8")


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


def _move(feed: Feed) -> None:
    """Record FEEDPUB_BASE_URL as the feed's (archives/db/address.py), and say that what is
    rendered per request changed with it, in one transaction:
    - the Last-Modified of the feed's documents rendered per request: at least a second
      later than before, so that it moves (a whole second) even if they last changed
      within this one;
    - the OAI-PMH datestamp of each of its records, whose URLs there changed: to the
      moment of the move, stamped under the feed's lock as writes stamp theirs, so that
      OAI-PMH's safe point covers it (archives/oai/repository.py) and an incremental
      harvest from any earlier date gets every record again."""
    with transaction.atomic():
        Feed.objects.select_for_update().only("pk").get(pk=feed.pk)
        moved = timezone.now()
        Record.objects.filter(feed=feed, datestamp__lt=moved).update(datestamp=moved)
        now = Value(base.change_stamp(), output_field=models.DateTimeField())
        Feed.objects.filter(pk=feed.pk).update(base_url=settings.FEEDPUB_BASE_URL, **{
            name: Greatest(F(name) + ONE_SECOND, now)
            for name in ("subscription_modified", "description_modified")})
        announce(feed.pk)
