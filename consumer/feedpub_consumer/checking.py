"""`check_feed`: one entry point for every format the checker reads (archived Atom, RSS
2.0, linked pages, Atom's complete and paged feeds, and OAI-PMH repositories), told by the
caller, the URL (an OAI-PMH request has a `verb=` argument) or the first answer; it imports
the format-specific checkers, and none of them imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from . import checkpaged
from .check import RSS, Checker, CheckFailed, CheckResult, fetch_start, is_rss, load_state
from .checklinked import LinkedChecker
from .checkoai import OaiChecker
from .checkrss import RssChecker
from .http import ATOM, LINKED_PAGES, HttpClient, Limits, is_multipart
from .oai import OAI_PMH, is_oai_pmh, is_oai_url

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any


class CheckerOptions(TypedDict):
    """What an Atom or RSS checker is told, whichever checker the feed's answer picks."""
    client: HttpClient
    state_path: str | None
    sample: int
    http_checks: bool


def check_feed(url: str, *, limits: Limits | None = None, state_path: str | None = None,
               sample: int = 5, http_checks: bool = True,
               format: str | None = None, progress: tqdm | None = None,
               fetch_records: bool = False, metadata_prefix: str | None = None,
               set_spec: str | None = None) -> CheckResult:
    """Check the feed at `url`: an Atom or RSS 2.0 subscription document, a linked-pages
    entry point or an OAI-PMH base URL (told by `format`, else by a `verb=` argument, else
    by its first answer). Raises CheckFailed when it cannot even start.
    `sample` is for Atom and RSS feeds (their alternate links); for Atom, `fetch_records`
    reads every live record's JSON at its alternate link instead, and checks it against the
    schema it names.
    `metadata_prefix` and `set_spec` are for OAI-PMH (default: feedpub if offered, the
    whole repository). `progress`: a tqdm bar the caller shows, advanced by one per
    document checked."""
    if format not in (None, ATOM, LINKED_PAGES, RSS, OAI_PMH):
        raise ValueError(f"unknown format {format!r}")
    client = HttpClient(limits)
    first, kind = None, format or (OAI_PMH if is_oai_url(url) else None)
    if kind != OAI_PMH:
        first = fetch_start(client, url)
        kind = kind or (LINKED_PAGES if is_multipart(first) else RSS if is_rss(first)
                        else OAI_PMH if is_oai_pmh(first) else ATOM)
    if fetch_records and kind != ATOM:
        raise CheckFailed(f"fetching records is for Atom feeds only; {url} is checked as "
                          f"{kind}" + (", whose records carry their metadata"
                                       if kind in (LINKED_PAGES, OAI_PMH) else ""))
    if kind != OAI_PMH and (metadata_prefix is not None or set_spec is not None):
        raise CheckFailed(f"a metadata prefix and a set are for OAI-PMH only; {url} is "
                          f"checked as {kind}")
    if kind == OAI_PMH or first is None:  # (None: an OAI-PMH URL, never fetched)
        oai_checker = OaiChecker(client=client, metadata_prefix=metadata_prefix,
                                 set_spec=set_spec)
        if state_path is not None:
            oai_checker.notes.append("the state file is not used on an OAI-PMH repository: "
                                     "it has no pages to compare")
        oai_checker.progress = progress
        return oai_checker.run(url, first)
    if state_path is not None:
        load_state(state_path, kind)  # fail before walking, not after
    options = CheckerOptions(client=client, state_path=state_path, sample=sample,
                             http_checks=http_checks)
    checker: Checker | LinkedChecker
    if kind == ATOM:
        checker = (checkpaged.checker_for(first, fetch_records=fetch_records, **options)
                   or Checker(fetch_records=fetch_records, **options))
    elif kind == LINKED_PAGES:
        checker = LinkedChecker(client=client, state_path=state_path, http_checks=http_checks)
    else:
        checker = RssChecker(**options)
    checker.progress = progress
    return checker.run(url, first)
