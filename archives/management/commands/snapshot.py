"""Freeze the live records of feeds into snapshots, the linked-pages entry points."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from archives.consumer.progress import add_progress_argument, progress_bar
from archives.models import Feed
from archives.storage.snapshots import take_snapshot


class Command(BaseCommand):
    help = "Freeze each feed's live records as of its newest entry into a snapshot."

    def add_arguments(self, parser):
        parser.add_argument("--feed", metavar="SLUG", help="only this feed")
        parser.add_argument("--keep", type=int, default=None, metavar="N",
                            help="then keep only the N newest snapshots of each feed")
        add_progress_argument(parser)

    def handle(self, *args, feed=None, keep=None, progress=None, **options):
        if keep is not None and keep < 1:
            raise CommandError("--keep must be at least 1")
        feeds = Feed.objects.all()
        if feed is not None:
            feeds = feeds.filter(slug=feed)
            if not feeds.exists():
                raise CommandError(f"No feed {feed!r}")
        for each in feeds:
            with progress_bar(self.stderr, progress, desc=each.slug, unit=" records") as bar:
                if not bar.disable:  # the snapshot's records, unless a writer is busy
                    bar.reset(total=each.records.filter(deleted_at=None).count())
                snapshot = take_snapshot(each, keep=keep, on_records=bar.update)
            self.stdout.write(f"{each.slug}: snapshot {snapshot.uuid}, {snapshot.records} "
                              f"records as of entry {snapshot.last_seq}, "
                              f"{snapshot.pages} page(s)")
