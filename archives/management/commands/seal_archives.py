"""Seal every full page: `python manage.py seal_archives [--feed SLUG] [--watch SECONDS]`."""

from __future__ import annotations

import logging
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, close_old_connections
from django.utils import timezone
from tqdm import tqdm

from archives.consumer.progress import add_progress_argument, progress_bar, write_around
from archives.log.sealing import SealedPage, seal_all, seal_feed
from archives.management.stopping import GracefulStop
from archives.models import Feed, Heartbeat
from archives.storage.snapshots import Snapshotting

logger = logging.getLogger(__name__)

# --watch: one line rewritten in place (on a terminal only), never a line per pass.
WATCH_STATUS = "seal_archives: {n} pages sealed{postfix} [{elapsed}]"


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
        add_progress_argument(parser)

    def handle(self, *args, feed=None, watch=None, dry_run=False, snapshot_every=0,
               keep_snapshots=3, progress=None, **options):
        if watch is not None and watch <= 0:
            raise CommandError("--watch needs a positive number of seconds")
        if keep_snapshots < 1:
            raise CommandError("--keep-snapshots must be at least 1")
        # SIGTERM or Ctrl-C: the run being sealed commits (or rolls back) whole, then exit 0.
        with GracefulStop() as stop:
            if watch is None:
                with progress_bar(self.stderr, progress, desc="sealing", unit=" pages") as bar:
                    if not bar.disable:
                        bar.reset(total=backlog(feed))
                    sealed = self.seal_once(feed, dry_run, on_sealed=bar.update, stop=stop)
                self.report(sealed, dry_run, quiet=False)
                return
            with progress_bar(self.stderr, progress, bar_format=WATCH_STATUS) as bar:
                self.watch(feed, watch, dry_run, snapshot_every, keep_snapshots, Status(bar),
                           stop)

    def watch(self, feed: str | None, every: float, dry_run: bool, snapshot_every: float,
              keep_snapshots: int, status: Status, stop: GracefulStop) -> None:
        database_lost = False
        # Snapshots are taken a slice at a time between passes, so that a page that fills
        # meanwhile waits a slice for its seal, not the whole snapshot.
        snapshots = (Snapshotting(slug=feed, keep=keep_snapshots, every=snapshot_every)
                     if snapshot_every > 0 and not dry_run else None)
        try:
            while not stop():
                try:
                    status.pass_starts(feed)
                    self.report(self.seal_once(feed, dry_run, on_sealed=status.sealed,
                                               stop=stop), dry_run, quiet=True)
                    if not dry_run:
                        # /metrics shows it (feedpub_sealer_last_pass_timestamp_seconds): a
                        # sealer stopped, stuck or failing every pass is seen by its silence.
                        Heartbeat.beat("sealer")
                    if snapshots is not None and not stop():
                        self.snapshot(snapshots)
                except (OperationalError, InterfaceError) as error:
                    # A database restart or failover must not stop the sealer: drop the
                    # dead connection (the next query opens a new one) and try again.
                    close_old_connections()
                    if not database_lost:
                        logger.error("seal_archives: database unavailable (%s); retrying "
                                     "every %s s", str(error).strip(), every)
                        status.show("database unavailable")
                    database_lost = True
                else:
                    if database_lost:
                        logger.info("seal_archives: database available again")
                    database_lost = False
                    if snapshots is not None and snapshots.busy:
                        continue  # the next pass, then the next slice of the snapshot
                with stop.idle():
                    time.sleep(every)
        finally:
            if snapshots is not None and snapshots.busy:
                self.abandon(snapshots)

    def snapshot(self, snapshots: Snapshotting) -> None:
        """A slice of the snapshots due: a failing one is logged, and never stops the
        sealing (a lost database is handled by the loop, like a seal's)."""
        try:
            completed = snapshots.step()
        except (OperationalError, InterfaceError):
            raise
        except Exception:
            logger.exception("seal_archives: taking snapshots failed; trying again later")
            return
        for snapshot in completed:
            write_around(self.stdout, f"snapshot {snapshot.uuid} of {snapshot.feed.slug}: "
                              f"{snapshot.records} records as of entry {snapshot.last_seq}")

    def abandon(self, snapshots: Snapshotting) -> None:
        """Stopping: the unfinished snapshot is deleted, leaving nothing half-made behind
        (a sealer killed instead leaves it to the next start, which resumes it)."""
        try:
            snapshots.abandon()
        except Exception:  # noqa: BLE001 - left unfinished: the next start resumes it
            logger.exception("seal_archives: deleting an unfinished snapshot failed")

    def seal_once(self, slug: str | None, dry_run: bool, *, on_sealed,
                  stop: GracefulStop) -> list[SealedPage]:
        if slug is None:
            return seal_all(dry_run=dry_run, on_sealed=on_sealed, stop=stop)
        try:
            return seal_feed(Feed.objects.get(slug=slug), dry_run=dry_run, on_sealed=on_sealed,
                             stop=stop)
        except Feed.DoesNotExist:
            raise CommandError(f"No feed {slug!r}") from None

    def report(self, sealed: list[SealedPage], dry_run: bool, *, quiet: bool) -> None:
        verb = "would seal" if dry_run else "sealed"
        for page in sealed:
            write_around(
                self.stdout,
                f"{verb} {page.feed} page {page.number} (entries {page.first_seq}..{page.last_seq})"
            )
        if not sealed and not quiet:
            self.stdout.write("nothing to seal")


def backlog(slug: str | None) -> int:
    """Full pages not sealed yet, of every feed or of `slug`."""
    feeds = Feed.objects.all() if slug is None else Feed.objects.filter(slug=slug)
    return sum(feed.full_pages - feed.sealed_pages
               for feed in feeds.only("last_seq", "page_size", "sealed_pages"))


class Status:
    """The --watch status line: pages sealed so far, the backlog, the time of the last seal.
    The backlog is counted only when the line is shown: a daemon's passes cost no query."""

    def __init__(self, bar: tqdm):
        self.bar, self.backlog, self.last_seal = bar, 0, "none yet"

    def pass_starts(self, slug: str | None) -> None:
        if not self.bar.disable:
            self.backlog = backlog(slug)
            self.show()

    def sealed(self, pages: int) -> None:
        self.backlog = max(0, self.backlog - pages)
        self.last_seal = timezone.localtime().strftime("%Y-%m-%d %H:%M:%S")
        self.bar.update(pages)
        self.show()

    def show(self, note: str = "") -> None:
        self.bar.set_postfix_str(f"backlog {self.backlog} pages, last seal {self.last_seal}"
                                 + (f" ({note})" if note else ""))
