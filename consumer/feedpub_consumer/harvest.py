"""A harvesting client for RFC 5005 archived feeds (Atom-PMH), usable against any server.

`harvest(url, state_path=...)` fetches the subscription document, follows `prev-archive`
until it reaches an archive document it processed on an earlier run (or the oldest page),
and applies the entries oldest first, as RFC 5005 section 4.2 asks: of the entries sharing
an `atom:id` the newest `atom:updated` wins, and on a tie the one from the more recently
updated document. An Atom-PMH deletion entry (no alternate link, an empty `<content/>`)
removes its record. What it learnt is kept in a state file (SQLite), so that a second run
costs one conditional request when nothing changed, and only the new pages when something did.

Memory stays flat however long the feed: each page is reduced to compact rows as soon as it
is read (its tree and bytes are dropped), the rows wait on disk until the walk ends, and the
records live in SQLite, not in Python objects.

It protects itself as section 6 asks (a request budget, loop detection, timeouts, a maximum
document size, http(s) only) and never fails silently: a page it cannot read is a warning,
the result says the reconstruction is incomplete, and the next run tries that page again.

Nothing here depends on feedpub's own URL layout or models: it is a plain HTTP client.
`harvest` (consumer/feedpub_consumer/harvesting.py) also reads the linked-pages format
(consumer/feedpub_consumer/linkedharvest.py, built on this module), told apart by its multipart
Content-Type.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from .atom import AtomDocument, DocumentError, document_rows, parse_document, timestamp_text
from .http import MISSING_STATUSES, FetchError, HttpClient, Response, RunLimitReached
from .records import from_feedpub_json
from .state import HarvestState, Reconstruction, RecordStore, StagedPages, StateError

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any


# The harvester -------------------------------------------------------------------------

@dataclass
class Summary:
    requests: int = 0
    pages_fetched: int = 0  # documents received in full (200)
    not_modified: int = 0
    entries_applied: int = 0
    deletions: int = 0
    records_changed: int = 0
    live_records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    complete: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Meter:
    """What a client had spent when a run began: its summary counts from there."""

    requests: int
    bytes: int
    started: float

    @classmethod
    def start(cls, client: HttpClient) -> Meter:
        return cls(client.requests, client.bytes_received, time.monotonic())

    def fill(self, summary: Summary, client: HttpClient) -> None:
        summary.requests = client.requests - self.requests
        summary.bytes = client.bytes_received - self.bytes
        summary.seconds = round(time.monotonic() - self.started, 3)


class LiveRecords:
    """The live records, oldest update first, read from the state as they are iterated
    (a list of a million records would not fit in memory)."""

    def __init__(self, store: RecordStore):
        self.store = store

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.store.live()

    def __len__(self) -> int:
        return self.store.count_live()


@dataclass
class HarvestResult:
    records: LiveRecords
    summary: Summary
    warnings: list[str]

    @property
    def complete(self) -> bool:
        return self.summary.complete


class HarvestFailed(Exception):
    """The subscription document itself could not be read: there is nothing to harvest."""


def show_progress(progress: tqdm | None, summary: Summary, client: HttpClient) -> None:
    """Bring the caller's bar, if any, to the pages fetched so far and the bytes received."""
    if progress is not None:
        progress.set_postfix_str(f"{client.bytes_received / 1e6:.1f} MB", refresh=False)
        progress.update(summary.pages_fetched - progress.n)


class PageLinks(NamedTuple):
    """What the walk needs of a page once its entries are staged."""

    prev_archive: str | None
    complete: bool


class HarvestRun:
    """What one run of any format's harvester keeps: its state, its HTTP client, the
    caller's progress bar, the warnings (each also told to `warn`) and the summary."""

    def __init__(self, *, state, client: HttpClient | None = None,
                 progress: tqdm | None = None, warn: Callable[[str], None] | None = None):
        self.state = state
        self.client = client or HttpClient()
        self.progress = progress
        self.warnings: list[str] = []
        self._warn_hook = warn
        self.summary = Summary()

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self._warn_hook:
            self._warn_hook(message)


class Harvester(HarvestRun):
    """One run: revalidate the subscription, walk back to known ground, apply oldest first."""

    def __init__(self, *, state: HarvestState | None = None, fetch_records: bool = False,
                 **run):
        super().__init__(state=state or HarvestState.load(), **run)
        self.fetch_records = fetch_records
        self.unfetched = False

    def run(self, url: str, *, first: Response | None = None,
            meter: Meter | None = None) -> HarvestResult:
        """Harvest `url`; `first` is its answer to a plain GET when one was made already
        (`meter`: what the client had spent before it)."""
        meter = meter or Meter.start(self.client)
        if self.state.subscription not in (None, url):
            raise StateError(f"the state file is for {self.state.subscription}, not {url}")
        self.state.subscription = url
        staged = StagedPages(self.state.db)
        seen: set[str] = set()
        pending, self.state.pending = self.state.pending, []
        subscription = self._fetch_subscription(url, staged, first)
        if subscription is not None:
            seen.add(url)
            self._walk(subscription.prev_archive, staged, seen)
        for gap in pending:  # pages that were missing or unread last time: try them again
            if gap not in seen:
                self._walk(gap, staged, seen)
        self._apply(staged, complete=subscription is not None and subscription.complete)
        if self.fetch_records:
            self._fetch_records()
        show_progress(self.progress, self.summary, self.client)
        summary = self.summary
        meter.fill(summary, self.client)
        summary.complete = not self.state.pending and not self.unfetched
        if self.state.pending:
            self._warn("the reconstruction is incomplete: entries of these pages and any older "
                       "ones may be missing: " + ", ".join(self.state.pending))
        summary.live_records = self.state.records.count_live()
        return HarvestResult(LiveRecords(self.state.records), summary, self.warnings)

    def _fetch_subscription(self, url: str, staged: StagedPages,
                            first: Response | None) -> PageLinks | None:
        """The subscription document's links, or None when it has not changed (304)."""
        headers = {}
        if self.state.validators.get("etag"):
            headers["If-None-Match"] = self.state.validators["etag"]
        if self.state.validators.get("last_modified"):
            headers["If-Modified-Since"] = self.state.validators["last_modified"]
        try:
            response = first or self.client.fetch(url, headers=headers)
        except FetchError as error:
            raise HarvestFailed(str(error)) from error
        if response.status == 304 and headers:
            self.summary.not_modified += 1
            return None
        if response.status != 200:
            raise HarvestFailed(f"{url} answered HTTP {response.status}")
        try:
            document = parse_document(response.body, url, base=response.url)
        except DocumentError as error:
            raise HarvestFailed(f"{url}: {error}") from error
        self.state.validators = {name: value for name, value in (
            ("etag", response.etag), ("last_modified", response.last_modified)) if value}
        return self._stage(response, document, staged)

    def _walk(self, url: str | None, staged: StagedPages, seen: set[str]) -> None:
        """Follow prev-archive from `url` until known ground, the oldest page, or a failure."""
        while url is not None:
            if url in seen:  # before "processed": a page read earlier in this walk is both
                self._warn(f"loop: {url} was reached twice in one walk; stopped there")
                return
            if self.state.is_processed(url):
                return
            seen.add(url)
            page = self._fetch_archive(url, staged)
            if page is None:
                self.state.pending.append(url)
                return
            show_progress(self.progress, self.summary, self.client)
            url = page.prev_archive

    def _fetch_archive(self, url: str, staged: StagedPages) -> PageLinks | None:
        try:
            response = self.client.fetch(url)
        except FetchError as error:
            self._warn(f"unreadable archive page: {error}")
            return None
        if response.status in MISSING_STATUSES:
            self._warn(f"missing archive page: {url} answered HTTP {response.status}")
            return None
        if response.status != 200:
            self._warn(f"unreadable archive page: {url} answered HTTP {response.status}")
            return None
        try:
            document = parse_document(response.body, url, base=response.url)
        except DocumentError as error:
            self._warn(f"unreadable archive page {url}: {error}")
            return None
        if not document.is_archive:
            self._warn(f"{url} is reached by prev-archive but is not an archive document "
                       "(no fh:archive); its entries are used anyway")
        return self._stage(response, document, staged)

    def _stage(self, response: Response, document: AtomDocument,
               staged: StagedPages) -> PageLinks:
        """Keep what rebuilding needs of a page; its tree and bytes go when this returns."""
        self.summary.pages_fetched += 1
        staged.add(document_rows(document))
        if document.is_archive:
            self.state.mark_processed(document.url, {
                "etag": response.etag, "updated": timestamp_text(document.updated),
                "sha256": hashlib.sha256(response.body).hexdigest(),
                "immutable": "immutable" in response.cache_control})
        return PageLinks(document.prev_archive, document.is_complete)

    def _fetch_records(self) -> None:
        """--fetch-records (the command lines' default for Atom): what an Atom entry does
        not carry (a key, metadata), from the JSON at the alternate link of each live record
        not fetched since it last changed (feedpub's record URL answers
        `Accept: application/json` with the record). An
        answer that is not a JSON object leaves those fields empty; a failed fetch leaves
        the record to the next run, and this one incomplete."""
        failed = 0
        for atom_id, record in self.state.records.unfetched():
            try:
                response = self.client.fetch(record["alternate"],
                                             headers={"Accept": "application/json"})
            except RunLimitReached:
                failed += 1
                break
            except FetchError:
                failed += 1
                continue
            if response.status != 200:
                failed += 1
                continue
            try:
                body = json.loads(response.body)
            except ValueError:
                body = None
            self.state.records.fetched(atom_id, {**record, **from_feedpub_json(body)})
            show_progress(self.progress, self.summary, self.client)
        if failed:
            self.unfetched = True
            self._warn(f"the JSON of {failed} live record(s) could not be fetched from their "
                       "alternate links (or the request budget ran out); the next run tries "
                       "again (--no-fetch-records harvests without them)")

    def _apply(self, staged: StagedPages, *, complete: bool) -> None:
        reconstruction = Reconstruction(self.state.records)
        if complete:
            # fh:complete: this one document is the whole logical feed (Atom-PMH 4.3).
            reconstruction.reset()
        reconstruction.apply_rows(staged.oldest_first(first_page_only=complete))
        self.summary.entries_applied += reconstruction.applied
        self.summary.deletions += reconstruction.deletions
        self.summary.records_changed += reconstruction.changed


def write_records(records: Iterable[dict[str, Any]], out: TextIO, *,
                  json_lines: bool = True) -> None:
    """The live records as JSON lines (one object a line) or one JSON array, as they come."""
    if json_lines:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        return
    out.write("[")
    for number, record in enumerate(records):
        out.write(("\n" if number == 0 else ",\n")
                  + json.dumps(record, ensure_ascii=False, sort_keys=True))
    out.write("\n]\n")
