"""The WebSub worker: `python manage.py websub_worker [--once] [--poll SECONDS]`."""

from __future__ import annotations

import logging

from django.core.management.base import BaseCommand, CommandError

from archives.conf import settings
from archives.management.stopping import GracefulStop
from archives.push.worker import RoundReport, Worker

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Verify WebSub subscription intents and deliver each change to subscribers "
            "(archives/push/). Any number may run at once.")

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true",
                            help="one round over the database, then exit")
        parser.add_argument("--poll", type=float, default=None, metavar="SECONDS",
                            help="seconds between rounds not woken by a notification "
                                 "(default FEEDPUB_WEBSUB_POLL_SECONDS)")

    def handle(self, *args, once=False, poll=None, **options):
        poll = settings.FEEDPUB_WEBSUB_POLL_SECONDS if poll is None else poll
        if poll <= 0:
            raise CommandError("--poll needs a positive number of seconds")
        worker = Worker()
        # SIGTERM or Ctrl-C: the round under way finishes (its deliveries recorded), a
        # wait ends at once, and the command exits 0.
        try:
            with GracefulStop() as stop:
                if once:
                    logger.info("websub_worker: one round, then exit")
                    self.report(worker.run_round())
                else:
                    logger.info("websub_worker: running, a full round every %s s", poll)
                    worker.run(poll_seconds=poll, on_round=self.report, stop=stop,
                               idle=stop.idle)
        finally:
            worker.close()

    def report(self, report: RoundReport) -> None:
        self.stdout.write(", ".join(f"{count} {name}" for name, count in vars(report).items()
                                    if count) or "nothing to do")
