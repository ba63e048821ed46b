"""Sealed pages published as files: the `feedpub_pages` storage (settings.STORAGES).

What a sealed page's files are, under names that mirror their URL paths (so nginx, a CDN
or an S3 website endpoint maps a URL to a file without asking Django), writing them,
and checking them against the database, which stays the source of truth:

    feeds/<slug>/archives/<n>/index.xml       page n with its next-archive link (final)
    feeds/<slug>/archives/<n>/open.xml        page n before it has one (the newest page)
    feeds/<slug>/archives/<n>/rss/index.xml   its RSS twin (rss/open.xml), once frozen
    feeds/<slug>/pages/<n>                    linked page n (final pages only)

each Atom and RSS file with its gzip twin `<name>.gz` beside it (nginx's gzip_static), the
bytes Django sends to a client that accepts gzip. A final page's open files are removed
once its final ones are written, so a reader that tries the final name first never takes
the superseded version.

Validators: a local file's time is the page's Last-Modified second (documents.
visible_second), so nginx's own ETag and Last-Modified for it (hex mtime, hex size) are
the ones Django sends for the page (ArchiveDocument). A page is exported only once that
second has passed, as Django sends Last-Modified only from then on: a file can never show
a date that a later version of its page shares (an open page that gains next-archive
within the second it was sealed in carries a later date by the time either is written).

When: sealing removes the superseded open files right after its transaction commits
(`superseded`); the sealer's every pass exports what is settled and not exported yet
(`export_pending`). What is exported is recorded per page (ArchivePage.exported: the
`modified` of the version in storage), so a sealer that dies between the commit and the
write loses nothing: the page is still pending at the next pass. `verify` (manage.py
export_pages --verify) rewrites any file that is missing or whose bytes (or time) differ
from the database's.

Writes are atomic: a reader sees the old file or the new one, never part of one
(AtomicFileSystemStorage renames a complete temporary file over the name; an S3 PUT
replaces an object whole). Neither is fsynced: after a power loss the database is still
right, and `export_pages --verify` repairs the files. A writer killed half-way leaves its
temporary file in TEMPORARY_DIR, which every export pass sweeps of files older than
STALE_TEMPORARY (a live writer holds one for milliseconds), as `--verify` also does
everywhere (temporaries were once made beside their files).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core.exceptions import ImproperlyConfigured
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, storages
from django.db.models import F, Q, QuerySet
from storages.backends.s3 import S3Storage

from archives.conf import settings
from archives.db import fastsql
from archives.documents import base, linkedpages, urls
from archives.documents.feeds import ArchiveDocument, RssArchiveDocument
from archives.models import ArchivePage

logger = logging.getLogger(__name__)

FINAL, OPEN = "index.xml", "open.xml"
GZIP = ".gz"
# Pages a sealer pass exports at most, so that a large backlog (a first export of an
# existing archive) never holds up sealing for long; `export_pages` does it all at once.
PAGES_PER_PASS = 500
BATCH = 50  # pages read (bodies and all) per query
# Where files are written before they are renamed into place: one directory, so that a
# sweep for the temporaries of killed writers lists only it (never a feed's pages/, which
# holds a file per page); in the storage (one filesystem: the rename stays atomic), and
# hidden (no URL maps to it).
TEMPORARY_DIR = ".tmp"
# tempfile.mkstemp's names: ours are "." + the file's name + "." + 8 random characters.
TEMPORARY_NAME = re.compile(r"\..+\.[a-z0-9_]{8}")
# A temporary older than this (by its inode's change time, which every write and utime
# moves; its mtime is set back to the page's) belongs to a writer that died: removed.
STALE_TEMPORARY = 600


def storage() -> PageStorage:
    pages = storages["feedpub_pages"]
    if not isinstance(pages, AtomicFileSystemStorage | PagesS3Storage):
        raise ImproperlyConfigured(
            f"STORAGES['feedpub_pages'] is a {type(pages).__name__}: pages are written to "
            "archives.storage.export.AtomicFileSystemStorage or PagesS3Storage")
    return pages


class AtomicFileSystemStorage(FileSystemStorage):
    """FileSystemStorage that replaces a file whole: the bytes go to a temporary file in
    the same directory, which is then renamed over the name (atomic on POSIX), where
    Django's writes in place (or under another name when it exists). Files are readable by
    all (nginx runs as another user) and take the time `content.modified` gives."""

    keeps_file_times = True  # verify compares them: they are nginx's Last-Modified

    def __init__(self, **options):
        options.setdefault("allow_overwrite", True)
        options.setdefault("file_permissions_mode", 0o644)
        options.setdefault("directory_permissions_mode", 0o755)
        super().__init__(**options)

    def put(self, name: str, content) -> None:
        """Write `name` whole, as it is named (Storage.save validates the name and looks
        for a free one four times over: a tenth of a page's export)."""
        self._save(name, content)

    def _save(self, name: str, content) -> str:
        path = self.path(name)
        directory, base = os.path.split(path)
        temporaries = self.path(TEMPORARY_DIR)
        # A name no other writer has, whatever host or container it runs in.
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{base}.", dir=temporaries)
        except FileNotFoundError:  # the storage's first file
            self._make_directories(temporaries)
            handle, temporary = tempfile.mkstemp(prefix=f".{base}.", dir=temporaries)
        if not os.path.isdir(directory):  # a page's first file
            self._make_directories(directory)
        try:
            with os.fdopen(handle, "wb") as file:
                for chunk in content.chunks():
                    file.write(chunk)
                if self.file_permissions_mode is not None:  # whatever the umask
                    os.fchmod(file.fileno(), self.file_permissions_mode)
                second = getattr(content, "modified", None)
                if second is not None:
                    file.flush()
                    os.utime(file.fileno(), (second, second))
            os.replace(temporary, path)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        return name

    def _make_directories(self, directory: str) -> None:
        """makedirs, each new directory then given its mode whatever the umask (as
        FileSystemStorage does): nginx, another user, must be able to enter them."""
        missing = []
        while directory and not os.path.isdir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:  # another writer's meanwhile: it sets the mode
                continue
            if self.directory_permissions_mode is not None:
                os.chmod(path, self.directory_permissions_mode)

    def second(self, name: str) -> int:
        """The file's time, in whole seconds (what nginx sends as Last-Modified)."""
        return int(os.stat(self.path(name)).st_mtime)

    def remove_stale_temporaries(self, *, everywhere: bool = False,
                                 dry_run: bool = False) -> list[str]:
        """Remove the temporary files of writers that died (older than STALE_TEMPORARY)
        from TEMPORARY_DIR or, `everywhere`, from the whole storage; their names."""
        top = self.path(TEMPORARY_DIR if not everywhere else "")
        before, removed = time.time() - STALE_TEMPORARY, []
        for directory, subdirectories, names in os.walk(top):
            if not everywhere:
                subdirectories.clear()
            for name in names:
                path = os.path.join(directory, name)
                with suppress(FileNotFoundError):  # another sweeper's meanwhile
                    if TEMPORARY_NAME.fullmatch(name) and os.stat(path).st_ctime < before:
                        if not dry_run:
                            os.unlink(path)
                        removed.append(os.path.relpath(path, self.location))
        return removed


class PagesS3Storage(S3Storage):
    """django-storages' S3 backend (any S3-compatible store: AWS, MinIO, R2, Ceph...):
    each object gets the Content-Type, Cache-Control and Content-Encoding its URL is
    served with, so that a CDN or an S3 website endpoint sends them. Objects keep the
    time of their PUT (S3 sets it), so no ETag or Last-Modified of ours survives there."""

    keeps_file_times = False

    def __init__(self, **options):
        options.setdefault("file_overwrite", True)
        options.setdefault("querystring_auth", False)  # public pages: plain URLs
        super().__init__(**options)

    def put(self, name: str, content) -> None:
        """Write `name` whole, as it is named (see AtomicFileSystemStorage.put)."""
        self._save(name, content)

    def _get_write_parameters(self, name, content=None):
        return {**super()._get_write_parameters(name, content),
                **getattr(content, "object_parameters", {})}


# Where pages are written: the `feedpub_pages` storage, one of the two backends above.
PageStorage = AtomicFileSystemStorage | PagesS3Storage


class PageContent(ContentFile):
    """A file's bytes, and what a storage writes beside them: the file's time (`modified`,
    a UNIX second; AtomicFileSystemStorage) and its object's headers (PagesS3Storage)."""

    def __init__(self, body: bytes, *, modified: int | None,
                 object_parameters: dict[str, str]):
        super().__init__(body)
        self.modified = modified
        self.object_parameters = object_parameters


@dataclass(frozen=True)
class PageFile:
    """One file of a page: its storage name, bytes, and the headers it is served with."""

    name: str
    body: bytes
    content_type: str
    cache_control: str
    second: int | None  # the file's time: its Last-Modified (None: linked pages')
    encoding: str | None = None

    def content(self) -> PageContent:
        object_parameters = {"ContentType": self.content_type, "CacheControl": self.cache_control}
        if self.encoding:
            object_parameters["ContentEncoding"] = self.encoding
        return PageContent(self.body, modified=self.second, object_parameters=object_parameters)


@dataclass(frozen=True)
class SealedState:
    """What the database says of a sealed page: everything its files follow from."""

    pk: int
    slug: str
    number: int
    body: bytes
    rss: bytes | None  # not frozen yet (pages sealed before migration 0007)
    multipart: bytes | None  # idem (migration 0004)
    has_next: bool
    modified: datetime
    exported: datetime | None = None

    COLUMNS = ("pk", "feed__slug", "number", "has_next", "modified", "exported")

    @classmethod
    def read(cls, pages: QuerySet) -> list[SealedState]:
        """The pages of a query, bodies and all (a query for the small columns, then one
        for the bodies, read in binary: fastsql.page_bodies)."""
        rows = list(pages.values_list(*cls.COLUMNS))
        bodies = fastsql.page_bodies([row[0] for row in rows])
        return [cls(pk, slug, number, *bodies[pk], has_next, modified, exported)
                for pk, slug, number, has_next, modified, exported in rows]


def archive_path(slug: str, number: int) -> str:
    """The storage directory of archive page `number`: its URL path, without any script
    prefix (the same from a request or the sealer's command line)."""
    return urls.url_path("archives:archive", slug, number).lstrip("/")


def page_files(page: SealedState) -> list[PageFile]:
    """The files of a sealed page as the database has it, each gzip twin before its
    plain file (a reader that finds the plain file finds its twin too)."""
    version = FINAL if page.has_next else OPEN
    directory = archive_path(page.slug, page.number)
    read_at = datetime.now(tz=UTC)  # (headers below do not depend on it)
    files: list[PageFile] = []
    atom_page = ArchiveDocument(page.slug, page.number, body=page.body,
                                etag=base.bytes_etag(page.body),
                                has_next=page.has_next, modified=page.modified,
                                read_at=read_at)
    files += _with_gzip(directory + version, atom_page)
    if page.rss is not None:
        rss_page = RssArchiveDocument(page.slug, page.number, body=page.rss,
                                      has_next=page.has_next, modified=page.modified,
                                      frozen=True, read_at=read_at)
        files += _with_gzip(directory + "rss/" + version, rss_page)
    if page.multipart is not None and page.has_next:
        # Served by Django behind the deploy nginx (its Content-Type carries a boundary
        # read from the body, and its Link header a next link nginx cannot know), by a CDN
        # or S3 website endpoint from here.
        files.append(PageFile(
            urls.url_path("archives:linked-page", page.slug, page.number).lstrip("/"),
            page.multipart, linkedpages.content_type_of(page.multipart),
            base.IMMUTABLE, None))
    return files


def _with_gzip(name: str, document: base.Document) -> list[PageFile]:
    second = base.visible_second(document.modified())
    cache_control = document.cache_control()
    return [PageFile(name + GZIP, document.gzipped(), document.content_type, cache_control,
                     second, "gzip"),
            PageFile(name, document.body(), document.content_type, cache_control, second)]


def superseded_names(slug: str, number: int) -> list[str]:
    """The open version's files of page `number`, which its final version supersedes
    (plain before gzip: the reverse of the order they are written in)."""
    directory = archive_path(slug, number)
    return [name + suffix for name in (directory + OPEN, directory + "rss/" + OPEN)
            for suffix in ("", GZIP)]


def write(page: SealedState, into: PageStorage | None = None) -> None:
    """Write every file of `page`, then remove the versions they supersede."""
    into = into or storage()
    for file in page_files(page):
        into.put(file.name, file.content())
    # (Sealing removed them as it linked the page; they may be back from an export of the
    # open version that raced with it and died before `linked_meanwhile`.)
    if page.has_next:
        _remove_open(page, into)


def _remove_open(page: SealedState, into: PageStorage) -> None:
    for name in superseded_names(page.slug, page.number):
        into.delete(name)


def linked_meanwhile(written: list[SealedState], into: PageStorage) -> None:
    """Remove the open files just written of pages that have gained their next-archive
    link since they were read: sealing removed the open files as it committed the link,
    which may have been before they were written, and nothing else would until the final
    version is exported (a reader meanwhile would get the page without its link). Checked
    after the writes: a link committed later removes them itself (`superseded`)."""
    open_pages = {page.pk: page for page in written if not page.has_next}
    if not open_pages:
        return
    for pk in ArchivePage.objects.filter(pk__in=open_pages, has_next=True).values_list(
            "pk", flat=True):
        _remove_open(open_pages[pk], into)


def superseded(slug: str, number: int) -> None:
    """Page `number` of `slug` has just gained its next-archive link (committed): remove
    its open files, so that readers get the current page from Django until its final
    files are exported. Never fails the sealing that calls it: the export pass removes
    them too."""
    if not settings.FEEDPUB_EXPORT_PAGES or number < 1:
        return
    try:
        into = storage()
        for name in superseded_names(slug, number):
            into.delete(name)
    except Exception:
        logger.exception("removing the open files of %s page %s failed; the export pass "
                         "removes them", slug, number)


def settled_before() -> datetime:
    """Pages modified before this instant have reached their Last-Modified second (see
    base.visible_second): int(modified) + 1 + settle <= now."""
    second = int(base.now().timestamp()) - settings.FEEDPUB_LAST_MODIFIED_SETTLE
    return datetime.fromtimestamp(second, tz=UTC)


def pending(slug: str | None = None, *, settled: bool = True):
    """Settled pages (or all, `settled=False`) whose current version is not in storage,
    oldest change first."""
    pages = ArchivePage.objects.filter(Q(exported__isnull=True) | Q(exported__lt=F("modified")))
    if settled:
        pages = pages.filter(modified__lt=settled_before())
    if slug is not None:
        pages = pages.filter(feed__slug=slug)
    return pages.order_by("modified")


def export_pending(*, slug: str | None = None, limit: int | None = PAGES_PER_PASS,
                   on_exported: Callable[[int], None] | None = None) -> int:
    """Export up to `limit` pending pages (None: all); how many. A sealer's backlog step."""
    if not settings.FEEDPUB_EXPORT_PAGES:
        return 0
    into, done = storage(), 0
    for name in remove_stale_temporaries(into):
        logger.warning("removed %s, left by a writer that died", name)
    while limit is None or done < limit:
        size = BATCH if limit is None else min(BATCH, limit - done)
        batch = SealedState.read(pending(slug)[:size])
        for page in batch:
            write(page, into)
        _mark_exported(batch)
        linked_meanwhile(batch, into)
        done += len(batch)
        if on_exported is not None and batch:
            on_exported(len(batch))
        if len(batch) < size:
            break
    return done


def remove_stale_temporaries(into: PageStorage, *, everywhere: bool = False,
                             dry_run: bool = False) -> list[str]:
    """The local storage's temporaries of killed writers, removed (an S3 PUT leaves none)."""
    sweep = getattr(into, "remove_stale_temporaries", None)
    return [] if sweep is None else sweep(everywhere=everywhere, dry_run=dry_run)


def _mark_exported(pages: list[SealedState]) -> None:
    """Record the versions written, each only if it is still the current one (a page that
    gained its next link meanwhile stays pending)."""
    if not pages:
        return
    current = Q()
    for page in pages:
        # (and without its linked page only if still without: freeze_linked_pages re-queues
        # the page as it stores one)
        unchanged = Q(pk=page.pk, modified=page.modified)
        if page.multipart is None:
            unchanged &= Q(multipart__isnull=True)
        current |= unchanged
    ArchivePage.objects.filter(current).update(exported=F("modified"))


@dataclass
class Verified:
    """What `verify` found."""

    pages: int = 0
    rewritten: list[str] = field(default_factory=list)  # names written (missing or stale)
    removed: list[str] = field(default_factory=list)  # superseded files found and removed
    temporaries: list[str] = field(default_factory=list)  # killed writers', removed
    unsettled: int = 0  # pages too recent to export yet


def verify(*, slug: str | None = None, dry_run: bool = False,
           on_page: Callable[[], None] | None = None) -> Verified:
    """Compare every file of every sealed page with the database; write again what is
    missing or stale (bytes differ, or a local file's time), remove superseded files and
    the temporaries of writers that died."""
    into, report, cutoff = storage(), Verified(), settled_before()
    report.temporaries = remove_stale_temporaries(into, everywhere=True, dry_run=dry_run)
    for page in _all_pages(slug):
        if on_page is not None:
            on_page()
        if page.modified >= cutoff:
            report.unsettled += 1
            continue
        report.pages += 1
        written = False
        for file in page_files(page):
            if not _is_current(into, file):
                report.rewritten.append(file.name)
                if not dry_run:
                    into.put(file.name, file.content())
                    written = True
        if page.has_next:
            for name in superseded_names(page.slug, page.number):
                if into.exists(name):
                    report.removed.append(name)
                    if not dry_run:
                        into.delete(name)
        if not dry_run and page.exported != page.modified:
            _mark_exported([page])
        if written:
            linked_meanwhile([page], into)
    return report


def _is_current(into: PageStorage, file: PageFile) -> bool:
    if not into.exists(file.name):
        return False
    if getattr(into, "keeps_file_times", False) and file.second is not None \
            and into.second(file.name) != file.second:
        return False
    with into.open(file.name, "rb") as stored:
        return stored.read() == file.body


def _all_pages(slug: str | None) -> Iterator[SealedState]:
    """Every sealed page, in the order they were stored, BATCH at a time (bodies are
    large)."""
    pages = ArchivePage.objects.order_by("pk")
    if slug is not None:
        pages = pages.filter(feed__slug=slug)
    after = 0
    while True:
        batch = SealedState.read(pages.filter(pk__gt=after)[:BATCH])
        yield from batch
        if len(batch) < BATCH:
            return
        after = batch[-1].pk


def count_pages(slug: str | None = None) -> int:
    pages = ArchivePage.objects.all()
    return (pages if slug is None else pages.filter(feed__slug=slug)).count()
