"""The consumer tools' command lines: `feedpub-harvest` and `feedpub-checkfeed`, which need no
Django settings and no database, and `manage.py harvest` and `manage.py checkfeed`, which
take the same arguments and run the same code (each command adds `*_arguments` to its parser
and calls `run_*` with its options and its stdout and stderr).

`run_*` return the exit status: harvest 0 complete, 1 incomplete, 2 could not run;
checkfeed 0 clean, 1 violations found, 2 could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from .check import RSS, CheckFailed
from .checking import check_feed
from .harvest import HarvestFailed, write_records
from .harvesting import harvest
from .http import ATOM, LINKED_PAGES, Limits
from .linkedharvest import AUTO, FROM_PAGE_1, FROM_SNAPSHOT
from .oai import OAI_PMH, OaiHarvestResult
from .progress import Lines, add_progress_argument, counted, progress_bar, write_around
from .state import StateError

HARVEST_HELP = ("Rebuild the live records of an archived Atom feed (RFC 5005, Atom-PMH), of a "
                "linked-pages feed or of an OAI-PMH 2.0 repository. Exit status: 0 complete, "
                "1 incomplete (a page was missing or unreadable), 2 could not run.")
CHECKFEED_HELP = ("Walk an archived Atom or RSS 2.0 feed, a linked-pages feed or an OAI-PMH "
                  "repository and print one line per violation, with the URL it concerns; "
                  "records that name their schema are checked against it. Exit status: "
                  "0 clean, 1 violations found, 2 could not run.")


class Output:
    """Lines on a stream, each ended by a newline, as Django's OutputWrapper writes them."""

    def __init__(self, out: TextIO):
        self._out = out

    def write(self, msg: str = "", style_func=None, ending: str | None = "\n") -> None:
        if ending and not msg.endswith(ending):
            msg += ending
        self._out.write(msg)


def add_limits_arguments(parser: argparse.ArgumentParser, *, deadline_help: str,
                         max_bytes_help: str | None = None) -> None:
    parser.add_argument("--max-requests", type=int, default=Limits.max_requests)
    parser.add_argument("--max-bytes", type=int, default=Limits.max_bytes, help=max_bytes_help)
    parser.add_argument("--timeout", type=float, default=Limits.timeout,
                        help="seconds for a whole fetch (connect, headers, body)")
    parser.add_argument("--deadline", type=float, default=None, help=deadline_help)


def limits_of(options: dict[str, Any]) -> Limits:
    return Limits(max_requests=options["max_requests"], max_bytes=options["max_bytes"],
                  timeout=options["timeout"], deadline=options["deadline"])


# harvest ---------------------------------------------------------------------------------

def harvest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the feed: an Atom subscription document, a "
                                    "linked-pages entry point (feedpub: <feed>/pages/latest), "
                                    "or an OAI-PMH base URL")
    parser.add_argument("--format", choices=[ATOM, LINKED_PAGES, OAI_PMH],
                        help="the feed's format (default: the state file's, else oai-pmh "
                             "for a URL with verb=, else told by the first answer)")
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
    parser.add_argument("--metadata-prefix", metavar="PREFIX",
                        help="OAI-PMH: the metadata format (default: the state file's, else "
                             "feedpub if the repository offers it, else oai_dc)")
    parser.add_argument("--set", metavar="SPEC", dest="set_spec",
                        help="OAI-PMH: harvest this set only (default: the state file's, "
                             "else the whole repository)")
    parser.add_argument("--fetch-records", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="Atom: fetch each changed live record's JSON at its alternate "
                             "link, for the key and metadata an entry does not carry (one "
                             "request a record; default: on for Atom, as Atom-PMH has a "
                             "record read at its alternate link)")
    parser.add_argument("--state", help="state file (SQLite): makes the next run incremental")
    parser.add_argument("--output", "-o", default="-",
                        help="where to write the live records: a .jsonl file (JSON lines), "
                             "a .json file (one array), or - for JSON lines on stdout")
    add_limits_arguments(parser, max_bytes_help="largest document accepted",
                         deadline_help="seconds for the whole run (default: none); the pages "
                                       "not read by then are read by the next run")
    parser.add_argument("--summary-json", action="store_true",
                        help="print the summary as JSON (on stderr)")
    add_progress_argument(parser)


def run_harvest(options: dict[str, Any], *, stdout: Lines, stderr: Lines) -> int:
    output = options["output"]
    try:
        with progress_bar(stderr, options["progress"], desc="harvest", unit=" pages") as bar:
            result = harvest(options["url"], state_path=options["state"],
                             limits=limits_of(options), progress=bar,
                             warn=lambda message: write_around(stderr, f"warning: {message}"),
                             format=options["format"], snapshot=options["snapshot"],
                             start=options["start"],
                             metadata_prefix=options.get("metadata_prefix"),
                             set_spec=options.get("set_spec"),
                             fetch_records=options.get("fetch_records"))
    except (HarvestFailed, StateError) as error:
        stderr.write(f"harvest failed: {error}")
        return 2
    try:
        if output == "-":
            write_records(result.records, stdout._out)
        else:
            with Path(output).open("w", encoding="utf-8") as out:
                write_records(result.records, out, json_lines=not output.endswith(".json"))
    except OSError as error:
        stderr.write(f"cannot write {output}: {error}")
        return 2
    summary = result.summary
    oai = result if isinstance(result, OaiHarvestResult) else None
    if options["summary_json"]:
        stderr.write(json.dumps({**summary.as_dict(), **(oai.details if oai else {}),
                                 "warnings": result.warnings}))
    elif oai is not None:
        stderr.write(
            f"{counted(summary.requests, 'request')} "
            f"({counted(summary.pages_fetched, 'response')}), {summary.bytes:,} bytes, "
            f"{summary.seconds:.2f} s; {counted(summary.entries_applied, 'record')} applied "
            f"({counted(summary.deletions, 'deletion')}), "
            f"{counted(summary.records_changed, 'record')} changed, "
            f"{counted(summary.live_records, 'live record')}; "
            + (f"from {oai.sent_from}" if oai.sent_from else "a whole harvest")
            + (f", the next from {oai.next_from}" if oai.complete and oai.next_from
               else "")
            + ("" if result.complete else "; INCOMPLETE: see the warnings above")
        )
    else:
        stderr.write(
            f"{counted(summary.requests, 'request')} "
            f"({counted(summary.pages_fetched, 'document')} fetched, "
            f"{summary.not_modified} not modified), {summary.bytes:,} bytes, "
            f"{summary.seconds:.2f} s; {counted(summary.entries_applied, 'entry', 'entries')} "
            f"applied ({counted(summary.deletions, 'deletion')}), "
            f"{counted(summary.records_changed, 'record')} changed, "
            f"{counted(summary.live_records, 'live record')}"
            + ("" if result.complete else "; INCOMPLETE: see the warnings above")
        )
    return 0 if result.complete else 1


# checkfeed -------------------------------------------------------------------------------

def checkfeed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the feed: an Atom or RSS subscription document, a "
                                    "linked-pages entry point (feedpub: <feed>/pages/latest), "
                                    "or an OAI-PMH base URL")
    parser.add_argument("--format", choices=[ATOM, LINKED_PAGES, RSS, OAI_PMH],
                        help="the feed's format (default: oai-pmh for a URL with verb=, "
                             "else told by the first answer)")
    parser.add_argument("--state", help="state file (JSON) of page hashes: a later run "
                                        "flags published pages that changed")
    parser.add_argument("--sample", type=int, default=5,
                        help="Atom, RSS: live entries whose alternate link is fetched "
                             "(0: none); read as JSON and checked against its schema when "
                             "the feed declares one")
    parser.add_argument("--fetch-records", action="store_true",
                        help="Atom: fetch every live record's JSON at its alternate link "
                             "instead of a sample (one request a record), and check it "
                             "against the schema it names")
    parser.add_argument("--metadata-prefix", metavar="PREFIX",
                        help="OAI-PMH: the metadata format read (default: feedpub if the "
                             "repository offers it, else oai_dc)")
    parser.add_argument("--set", metavar="SPEC", dest="set_spec",
                        help="OAI-PMH: check this set only (default: the whole repository)")
    parser.add_argument("--no-http", action="store_true",
                        help="skip the HTTP checks (304, HEAD): one request per page")
    add_limits_arguments(parser, deadline_help="seconds for the whole run (default: none)")
    add_progress_argument(parser)


def run_checkfeed(options: dict[str, Any], *, stdout: Lines, stderr: Lines) -> int:
    try:
        with progress_bar(stderr, options["progress"], desc="checkfeed",
                          unit=" documents") as bar:
            result = check_feed(options["url"], limits=limits_of(options),
                                state_path=options["state"], sample=options["sample"],
                                http_checks=not options["no_http"], format=options["format"],
                                progress=bar, fetch_records=options.get("fetch_records", False),
                                metadata_prefix=options.get("metadata_prefix"),
                                set_spec=options.get("set_spec"))
    except CheckFailed as error:
        stderr.write(f"checkfeed could not run: {error}")
        return 2
    for problem in result.problems:
        stdout.write(str(problem))
    for note in result.notes:
        stderr.write(f"note: {note}")
    stderr.write(
        f"{counted(len(result.problems), 'problem')} in "
        f"{counted(result.documents, 'document')}; {counted(result.requests, 'request')}, "
        f"{result.bytes:,} bytes, {result.seconds:.2f} s"
        + ("" if result.complete else "; the walk did not finish")
    )
    if result.problems:
        return 1
    return 0 if result.complete else 2


# Console scripts (consumer/pyproject.toml [project.scripts]) ------------------------------

def _main(prog: str, description: str, arguments, run, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    arguments(parser)
    options = vars(parser.parse_args(argv))
    return run(options, stdout=Output(sys.stdout), stderr=Output(sys.stderr))


def harvest_main(argv: list[str] | None = None) -> int:
    return _main("feedpub-harvest", HARVEST_HELP, harvest_arguments, run_harvest, argv)


def checkfeed_main(argv: list[str] | None = None) -> int:
    return _main("feedpub-checkfeed", CHECKFEED_HELP, checkfeed_arguments, run_checkfeed, argv)
