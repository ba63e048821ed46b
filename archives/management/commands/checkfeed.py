"""Check that an archived feed (any server) obeys RFC 5005, Atom-PMH, RFC 4287 and HTTP (or,
in RSS 2.0, RFC 5005 Appendix B), or that a linked-pages feed obeys its rules and HTTP."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand

from archives.checker import RSS, CheckFailed, check_feed
from archives.consumer import ATOM, LINKED_PAGES, Limits
from archives.management.progress import add_progress_argument, progress_bar


class Command(BaseCommand):
    help = ("Walk an archived Atom or RSS 2.0 feed or a linked-pages feed and print one line per "
            "violation, with the URL it concerns. Exit status: 0 clean, 1 violations found, "
            "2 could not run.")

    def add_arguments(self, parser):
        parser.add_argument("url", help="the feed: an Atom or RSS subscription document, or a "
                                        "linked-pages entry point (feedpub: <feed>/pages/latest)")
        parser.add_argument("--format", choices=[ATOM, LINKED_PAGES, RSS],
                            help="the feed's format (default: told by its Content-Type)")
        parser.add_argument("--state", help="state file (JSON) of page hashes: a later run "
                                            "flags published pages that changed")
        parser.add_argument("--sample", type=int, default=5,
                            help="Atom, RSS: live entries whose alternate link is fetched "
                                 "(0: none)")
        parser.add_argument("--no-http", action="store_true",
                            help="skip the HTTP checks (304, HEAD): one request per page")
        parser.add_argument("--max-requests", type=int, default=Limits.max_requests)
        parser.add_argument("--max-bytes", type=int, default=Limits.max_bytes)
        parser.add_argument("--timeout", type=float, default=Limits.timeout,
                            help="seconds for a whole fetch (connect, headers, body)")
        parser.add_argument("--deadline", type=float, default=None,
                            help="seconds for the whole run (default: none)")
        add_progress_argument(parser)

    def handle(self, *args, url, format, state, sample, no_http, max_requests, max_bytes,
               timeout, deadline, progress, **options):
        limits = Limits(max_requests=max_requests, max_bytes=max_bytes, timeout=timeout,
                        deadline=deadline)
        try:
            with progress_bar(self.stderr, progress, desc="checkfeed",
                              unit=" documents") as bar:
                result = check_feed(url, limits=limits, state_path=state, sample=sample,
                                    http_checks=not no_http, format=format, progress=bar)
        except CheckFailed as error:
            self.stderr.write(f"checkfeed could not run: {error}")
            sys.exit(2)
        for problem in result.problems:
            self.stdout.write(str(problem))
        for note in result.notes:
            self.stderr.write(f"note: {note}")
        self.stderr.write(
            f"{len(result.problems)} problem(s) in {result.documents} documents; "
            f"{result.requests} requests, {result.bytes:,} bytes, {result.seconds:.2f} s"
            + ("" if result.complete else "; the walk did not finish")
        )
        if result.problems:
            sys.exit(1)
        if not result.complete:
            sys.exit(2)
