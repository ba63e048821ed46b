"""Harvest an RFC 5005 archived feed or a linked-pages feed (any server) into its live
records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from archives.consumer import (
    ATOM,
    LINKED_PAGES,
    HarvestFailed,
    Limits,
    StateError,
    harvest,
    write_records,
)
from archives.linkedconsumer import AUTO, FROM_PAGE_1, FROM_SNAPSHOT
from archives.management.progress import add_progress_argument, progress_bar, write_around


class Command(BaseCommand):
    help = ("Rebuild the live records of an archived Atom feed (RFC 5005, Atom-PMH) or of a "
            "linked-pages feed. Exit status: 0 complete, 1 incomplete (a page was missing or "
            "unreadable), 2 could not run.")

    def add_arguments(self, parser):
        parser.add_argument("url", help="the feed: an Atom subscription document, or a "
                                        "linked-pages entry point (feedpub: <feed>/pages/latest)")
        parser.add_argument("--format", choices=[ATOM, LINKED_PAGES],
                            help="the feed's format (default: the state file's, else told by "
                                 "the first answer's Content-Type)")
        start = parser.add_mutually_exclusive_group()
        start.add_argument("--from-snapshot", dest="start", action="store_const",
                           const=FROM_SNAPSHOT, default=AUTO,
                           help="linked pages, first run: start from the newest snapshot, "
                                "and fail if there is none (default: from it if there is one, "
                                "else from the oldest page); feedpub's is found next to the "
                                "pages, another server's is named with --snapshot")
        start.add_argument("--from-page-1", dest="start", action="store_const",
                           const=FROM_PAGE_1,
                           help="linked pages, first run: apply the whole feed from its "
                                "oldest page")
        start.add_argument("--snapshot", metavar="URL",
                           help="linked pages, first run: start from this snapshot index")
        parser.add_argument("--state", help="state file (SQLite): makes the next run incremental")
        parser.add_argument("--output", "-o", default="-",
                            help="where to write the live records: a .jsonl file (JSON lines), "
                                 "a .json file (one array), or - for JSON lines on stdout")
        parser.add_argument("--max-requests", type=int, default=Limits.max_requests)
        parser.add_argument("--max-bytes", type=int, default=Limits.max_bytes,
                            help="largest document accepted")
        parser.add_argument("--timeout", type=float, default=Limits.timeout,
                            help="seconds for a whole fetch (connect, headers, body)")
        parser.add_argument("--deadline", type=float, default=None,
                            help="seconds for the whole run (default: none); the pages not "
                                 "read by then are read by the next run")
        parser.add_argument("--summary-json", action="store_true",
                            help="print the summary as JSON (on stderr)")
        add_progress_argument(parser)

    def handle(self, *args, url, format, start, snapshot, state, output, max_requests,
               max_bytes, timeout, deadline, summary_json, progress, **options):
        limits = Limits(max_requests=max_requests, max_bytes=max_bytes, timeout=timeout,
                        deadline=deadline)
        try:
            with progress_bar(self.stderr, progress, desc="harvest", unit=" pages") as bar:
                result = harvest(url, state_path=state, limits=limits, progress=bar,
                                 warn=lambda message: write_around(self.stderr,
                                                                   f"warning: {message}"),
                                 format=format, snapshot=snapshot, start=start)
        except (HarvestFailed, StateError) as error:
            self.stderr.write(f"harvest failed: {error}")
            sys.exit(2)
        try:
            self.write(result.records, output)
        except OSError as error:
            self.stderr.write(f"cannot write {output}: {error}")
            sys.exit(2)
        summary = result.summary
        if summary_json:
            self.stderr.write(json.dumps({**summary.as_dict(), "warnings": result.warnings}))
        else:
            self.stderr.write(
                f"{summary.requests} requests ({summary.pages_fetched} documents fetched, "
                f"{summary.not_modified} not modified), {summary.bytes:,} bytes, "
                f"{summary.seconds:.2f} s; {summary.entries_applied} entries applied "
                f"({summary.deletions} deletions), {summary.records_changed} records changed, "
                f"{summary.live_records} live records"
                + ("" if result.complete else "; INCOMPLETE: see the warnings above")
            )
        if not result.complete:
            sys.exit(1)

    def write(self, records, output: str) -> None:
        if output == "-":
            write_records(records, self.stdout._out)
            return
        with Path(output).open("w", encoding="utf-8") as out:
            write_records(records, out, json_lines=not output.endswith(".json"))
