"""Load a file of records into a feed: `python manage.py import_records FEED FILE`."""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from feedpub_consumer.progress import add_progress_argument, counted, progress_bar

from archives.log import access
from archives.log.access import Actor
from archives.log.publishing import MAX_BATCH_OPERATIONS
from archives.management import importing
from archives.models import Feed, Via


class Command(BaseCommand):
    help = ("Put the records of a JSON lines or CSV file into a feed, in batches through the "
            "write path (each all or nothing). Running it again appends nothing for records "
            "that did not change.")

    def add_arguments(self, parser):
        parser.add_argument("feed", metavar="FEED", help="the feed's slug")
        parser.add_argument("file", metavar="FILE", help="a .jsonl (.ndjson) or .csv file")
        parser.add_argument("--format", choices=sorted(set(importing.FORMATS.values())),
                            help="the file's format (default: from its name)")
        parser.add_argument("--batch-size", type=int, default=500, metavar="N",
                            help=f"records a batch (1 to {MAX_BATCH_OPERATIONS}; 500)")
        parser.add_argument("--dry-run", action="store_true",
                            help="check every line as the write path would; write nothing")
        parser.add_argument("--missing-ok", action="store_true",
                            help="skip a delete of a key the feed does not have (by "
                                 "default it is an error that stops the import)")
        parser.add_argument("--user", metavar="USERNAME",
                            help="act as this user, who must be a producer of the feed (by "
                                 "default the import is the operator's)")
        parser.add_argument("--note", default="", metavar="TEXT",
                            help="why: kept with every entry the import appends (never "
                                 "published; up to 500 characters)")
        add_progress_argument(parser)

    def handle(self, *args, feed, file, format, batch_size, dry_run, missing_ok, progress,
               user, note, **options):
        found = Feed.objects.filter(slug=feed).first()
        if found is None:
            raise CommandError(f"No feed {feed!r}: create it first (the admin, or POST "
                               "/api/feeds/)")
        file_format = format or importing.format_of(file)
        if file_format is None:
            raise CommandError(f"{file}: say --format jsonl or --format csv (by its name, a "
                               f"file is one of {', '.join(importing.FORMATS)})")
        if not 1 <= batch_size <= MAX_BATCH_OPERATIONS:
            raise CommandError(f"--batch-size must be 1 to {MAX_BATCH_OPERATIONS}")
        actor = self.actor(found, user, note)
        try:
            size = os.path.getsize(file)
            with progress_bar(self.stderr, progress,
                              desc=feed, unit="B", unit_scale=True, total=size) as bar:
                done = importing.import_records(
                    feed=found, path=file, file_format=file_format, batch_size=batch_size,
                    dry_run=dry_run, missing_ok=missing_ok, on_bytes=bar.update, actor=actor)
        except OSError as error:
            raise CommandError(f"{file}: {error.strerror}") from None
        except importing.ImportFailed as failure:
            raise CommandError(self.failed(failure, dry_run)) from None
        except access.NotAllowed as refusal:  # (the user's rights changed during the import)
            raise CommandError(str(refusal)) from None
        self.stdout.write("\n".join([*done.notes, self.summary(feed, done, dry_run)]))

    def actor(self, feed: Feed, username: str | None, note: str) -> Actor:
        """Who the import acts as, checked before any line is read (a dry run too)."""
        user = None
        if username is not None:
            users = get_user_model()._default_manager
            user = users.filter(**{users.model.USERNAME_FIELD: username}).first()
            if user is None:
                raise CommandError(f"--user: no user {username!r}")
            if not access.may_write_records(user, feed):
                raise CommandError(f"--user: {username!r} may not write the records of feed "
                                   f"'{feed.slug}': that needs the producer role on it (or "
                                   "maintainer)")
        try:
            return Actor(via=Via.IMPORT, user=user, note=note)
        except ValidationError as error:
            raise CommandError(f"--note: {' '.join(error.messages)}") from None

    def failed(self, failure: importing.ImportFailed, dry_run: bool) -> str:
        done = failure.outcome
        lines = [*done.notes, *failure.said()]  # how to write the file first, then what is wrong
        if dry_run:
            lines.append(f"{counted(len(failure.problems), 'bad line')}; nothing was written")
        elif not done.records:
            lines.append("nothing was written; fix the file and run again")
        else:
            were = "was" if done.records == 1 else "were"
            lines.append(f"nothing of the batch holding line {min(failure.problems)} was "
                         f"written; the {counted(done.records, 'record')} before it {were} "
                         f"({counted(done.appended, 'entry', 'entries')} appended). Fix the "
                         "file and run again: records already written append nothing.")
        return "\n".join(lines)

    def summary(self, feed: str, done: importing.Outcome, dry_run: bool) -> str:
        if dry_run:
            return f"{counted(done.records, 'record')} checked; nothing was written"
        kinds = ", ".join(f"{count} {kind}d" for kind, count in sorted(done.kinds.items()))
        missing = (f", {counted(done.missing, 'delete')} of keys the feed does not have "
                   "skipped" if done.missing else "")
        return (f"{feed}: {counted(done.records, 'record')} in "
                f"{counted(done.batches, 'batch', 'batches')}: "
                f"{counted(done.appended, 'entry', 'entries')} appended ({kinds or 'none'}), "
                f"{done.unchanged} unchanged{missing}")
