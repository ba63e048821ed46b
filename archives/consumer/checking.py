"""`check_feed`: one entry point for every format the checker reads (archived Atom, RSS
2.0, linked pages, and Atom's complete and paged feeds), told by the caller or the first
answer; it imports the format-specific checkers, and none of them imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import checkpaged
from .check import RSS, Checker, CheckResult, fetch_start, is_rss, load_state
from .checklinked import LinkedChecker
from .checkrss import RssChecker
from .http import ATOM, LINKED_PAGES, HttpClient, Limits, is_multipart

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any


def check_feed(url: str, *, limits: Limits | None = None, state_path: str | None = None,
               sample: int = 5, http_checks: bool = True,
               format: str | None = None, progress: tqdm | None = None) -> CheckResult:
    """Check the feed at `url`: an Atom or RSS 2.0 subscription document, or a linked-pages
    entry point (told by `format`, else by its Content-Type). Raises CheckFailed when it
    cannot even start. `sample` is for Atom and RSS feeds (their alternate links).
    `progress`: a tqdm bar the caller shows, advanced by one per document checked."""
    if format not in (None, ATOM, LINKED_PAGES, RSS):
        raise ValueError(f"unknown format {format!r}")
    client = HttpClient(limits)
    first = fetch_start(client, url)
    kind = format or (LINKED_PAGES if is_multipart(first) else RSS if is_rss(first) else ATOM)
    if state_path is not None:
        load_state(state_path, kind)  # fail before walking, not after
    if kind == ATOM:
        special = checkpaged.checker_for(first, client=client, state_path=state_path,
                                         sample=sample, http_checks=http_checks)
        if special is not None:  # a complete or paged feed
            return special.run(url, first)
    if kind == LINKED_PAGES:
        checker = LinkedChecker(client=client, state_path=state_path, http_checks=http_checks)
        checker.progress = progress
        return checker.run(url, first)
    if kind == RSS:
        checker = RssChecker(client=client, state_path=state_path, sample=sample,
                             http_checks=http_checks)
        checker.progress = progress
        return checker.run(url, first)
    checker = Checker(client=client, state_path=state_path, sample=sample,
                      http_checks=http_checks)
    checker.progress = progress
    return checker.run(url, first)
