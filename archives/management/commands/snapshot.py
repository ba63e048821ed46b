"""Freeze the live records of feeds into snapshots, the linked-pages entry points."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from feedpub_consumer.progress import add_progress_argument, progress_bar

from archives.models import Feed
from archives.storage.snapshots import NothingToSnapshot, take_snapshot


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
            try:
                with progress_bar(self.stderr, progress, desc=each.slug,
                                  unit=" records") as bar:
                    if not bar.disable:  # the snapshot's records, unless a writer is busy
                        bar.reset(total=each.records.filter(deleted_at=None).count())
                    snapshot = take_snapshot(each, keep=keep, on_records=bar.update)
            except NothingToSnapshot as error:
                # Its index would point at a page 1 that does not exist yet; a consumer
                # starts from that page once it does.
                if feed is not None:
                    raise CommandError(f"{error} (consumers start from its first page)") \
                        from None
                self.stdout.write(f"{each.slug}: no entries yet, no snapshot")
                continue
            self.stdout.write(f"{each.slug}: snapshot {snapshot.uuid}, {snapshot.records} "
                              f"records as of entry {snapshot.last_seq}, "
                              f"{snapshot.pages} page(s)")
