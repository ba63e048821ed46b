"""Render frozen documents again after a move: `python manage.py rerender_documents`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from feedpub_consumer.progress import add_progress_argument, progress_bar

from archives.conf import settings
from archives.log import rerendering
from archives.models import Feed


class Command(BaseCommand):
    help = ("After FEEDPUB_BASE_URL changed (a new domain, a port): render the sealed pages "
            "(Atom, RSS, linked pages) and snapshot pages whose links use another base URL "
            "again from their entries, moving their validators, and export their files "
            "again. Entries are neither reordered nor changed.")

    def add_arguments(self, parser):
        parser.add_argument("--feed", metavar="SLUG", help="only this feed")
        parser.add_argument("--dry-run", action="store_true",
                            help="say what would be rendered again, store nothing")
        add_progress_argument(parser)

    def handle(self, *args, feed=None, dry_run=False, progress=None, **options):
        if feed is not None and not Feed.objects.filter(slug=feed).exists():
            raise CommandError(f"No feed {feed!r}")
        with progress_bar(self.stderr, progress, desc="rendering", unit=" pages",
                          total=rerendering.documents(feed)) as bar:
            report = rerendering.rerender(slug=feed, dry_run=dry_run,
                                          on_document=lambda: bar.update(1))
        verb = "to render again" if dry_run else "rendered again"
        self.stdout.write(
            f"{report.pages} sealed pages and {report.snapshot_pages} snapshot pages {verb} "
            f"with {settings.FEEDPUB_BASE_URL}; {report.current} already used it"
            + ("" if dry_run else f"; {report.exported} pages exported; the documents of "
               f"{report.feeds} feed(s) take a new Last-Modified"))
        if report.not_reproduced:
            raise CommandError(
                f"{len(report.not_reproduced)} documents left as they were: this release does "
                "not render their entries to their stored bytes, so rendering them again "
                "could change more than their links: " + ", ".join(report.not_reproduced))
