"""Seal every full page: `python manage.py seal_archives [--feed SLUG] [--watch SECONDS]`."""

from __future__ import annotations

import logging
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, close_old_connections

from archives.models import Feed
from archives.sealing import seal_all, seal_feed
from archives.snapshots import snapshot_changed_feeds

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Seal full archive pages (idempotent; safe to run several at once)."

    def add_arguments(self, parser):
        parser.add_argument("--feed", metavar="SLUG", help="only this feed")
        parser.add_argument("--watch", type=float, metavar="SECONDS",
                            help="keep running, sealing again every SECONDS")
        parser.add_argument("--dry-run", action="store_true",
                            help="say which pages are ready, seal nothing")
        parser.add_argument("--snapshot-every", type=float, default=0, metavar="SECONDS",
                            help="with --watch, also snapshot each feed that changed since "
                                 "its newest snapshot, every SECONDS (0: never)")
        parser.add_argument("--keep-snapshots", type=int, default=3, metavar="N",
                            help="snapshots kept per feed (default 3)")

    def handle(self, *args, feed=None, watch=None, dry_run=False, snapshot_every=0,
               keep_snapshots=3, **options):
        if watch is not None and watch <= 0:
            raise CommandError("--watch needs a positive number of seconds")
        if keep_snapshots < 1:
            raise CommandError("--keep-snapshots must be at least 1")
        if watch is None:
            self.seal_once(feed, dry_run, quiet=False)
            return
        database_lost, next_snapshot = False, time.monotonic()
        while True:
            try:
                self.seal_once(feed, dry_run, quiet=True)
                if snapshot_every > 0 and not dry_run and time.monotonic() >= next_snapshot:
                    self.snapshot(feed, keep_snapshots)
                    next_snapshot = time.monotonic() + snapshot_every
            except (OperationalError, InterfaceError) as error:
                # A database restart or failover must not stop the sealer: drop the dead
                # connection (the next query opens a new one) and try again next time.
                close_old_connections()
                if not database_lost:
                    logger.error("seal_archives: database unavailable (%s); retrying every "
                                 "%s s", str(error).strip(), watch)
                database_lost = True
            else:
                if database_lost:
                    logger.info("seal_archives: database available again")
                database_lost = False
            time.sleep(watch)

    def snapshot(self, slug: str | None, keep: int) -> None:
        """Snapshots run between two sealing passes: a failing one is logged, and never
        stops the sealing (a lost database is handled by the loop, like a seal's)."""
        try:
            snapshots = snapshot_changed_feeds(slug=slug, keep=keep)
        except (OperationalError, InterfaceError):
            raise
        except Exception:
            logger.exception("seal_archives: taking snapshots failed; trying again later")
            return
        for snapshot in snapshots:
            self.stdout.write(f"snapshot {snapshot.uuid} of {snapshot.feed.slug}: "
                              f"{snapshot.records} records as of entry {snapshot.last_seq}")

    def seal_once(self, slug: str | None, dry_run: bool, *, quiet: bool) -> None:
        if slug is None:
            sealed = seal_all(dry_run=dry_run)
        else:
            try:
                sealed = seal_feed(Feed.objects.get(slug=slug), dry_run=dry_run)
            except Feed.DoesNotExist:
                raise CommandError(f"No feed {slug!r}") from None
        verb = "would seal" if dry_run else "sealed"
        for page in sealed:
            self.stdout.write(
                f"{verb} {page.feed} page {page.number} (entries {page.first_seq}..{page.last_seq})"
            )
        if not sealed and not quiet:
            self.stdout.write("nothing to seal")
