"""Export sealed pages as files: `python manage.py export_pages [--verify] [--feed SLUG]`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from feedpub_consumer.progress import (
    add_progress_argument,
    counted,
    progress_bar,
    write_around,
)

from archives.conf import settings
from archives.models import Feed
from archives.storage import export


class Command(BaseCommand):
    help = ("Write the files of sealed pages not exported yet to the feedpub_pages storage "
            "(--verify: check every file against the database and rewrite missing or stale "
            "ones). The sealer exports as it goes; this catches up or repairs.")

    def add_arguments(self, parser):
        parser.add_argument("--feed", metavar="SLUG", help="only this feed")
        parser.add_argument("--verify", action="store_true",
                            help="compare every file with the database (bytes, and a local "
                                 "file's time) and rewrite what is missing or stale")
        parser.add_argument("--dry-run", action="store_true",
                            help="say what would be written, write nothing")
        add_progress_argument(parser)

    def handle(self, *args, feed=None, verify=False, dry_run=False, progress=None, **options):
        if not settings.FEEDPUB_EXPORT_PAGES:
            raise CommandError("FEEDPUB_EXPORT_PAGES is off: nothing is exported")
        if feed is not None and not Feed.objects.filter(slug=feed).exists():
            raise CommandError(f"No feed {feed!r}")
        if verify:
            self.verify(feed, dry_run, progress)
        elif dry_run:
            self.stdout.write(f"{counted(export.pending(feed).count(), 'page')} to export")
        else:
            with progress_bar(self.stderr, progress, desc="exporting", unit=" pages",
                              total=export.pending(feed).count()) as bar:
                done = export.export_pending(slug=feed, limit=None, on_exported=bar.update)
            self.stdout.write(f"exported {counted(done, 'page')}")

    def verify(self, feed: str | None, dry_run: bool, progress: bool | None) -> None:
        with progress_bar(self.stderr, progress, desc="verifying", unit=" pages",
                          total=export.count_pages(feed)) as bar:
            report = export.verify(slug=feed, dry_run=dry_run, on_page=lambda: bar.update(1))
        verb = "would write" if dry_run else "wrote"
        for name in report.rewritten:
            write_around(self.stdout, f"{verb} {name} (missing or stale)")
        for name in report.removed:
            write_around(self.stdout, f"{'would remove' if dry_run else 'removed'} {name} "
                                      "(superseded)")
        for name in report.temporaries:
            write_around(self.stdout, f"{'would remove' if dry_run else 'removed'} {name} "
                                      "(left by a writer that died)")
        self.stdout.write(
            f"{counted(report.pages, 'page')} verified: {counted(len(report.rewritten), 'file')} "
            f"{'to write' if dry_run else 'written'}, {len(report.removed)} superseded"
            + (f"; {counted(report.unsettled, 'page')} too recent to export yet"
               if report.unsettled else ""))
