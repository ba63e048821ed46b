"""A harvesting client for linked-pages feeds (datareplication's format,
docs/how-it-works/linked-pages.md), usable against any server.

A linked-pages feed is a doubly-linked list of pages (`Link` headers self/prev/next), each a
multipart body of entities with `Content-ID`, `Operation-Type` and `Last-Modified` headers.
The harvester follows the format's consumer algorithm:

- Start from the newest snapshot (pages of PUT entities: every live record as of the
  index's `createdAt`) or from the oldest page.
- Find where the feed goes on: crawl back along `prev` from the entry point (HEAD requests)
  to a page older than the snapshot, then walk forward along `next`, skipping the entities
  older than it. Entities of the snapshot's own second are applied again (Last-Modified has
  whole seconds): at least once, and harmless, since applying a tail of the log again, in
  order, ends in the same state.
- With a Content-ID to resume after, the walk starts at the first entity after it: exactly
  once. feedpub's snapshot index names one ("feed": "resumePage", "resumeAfterContentId");
  such extras are hints, used when present.
- Remember the last page, its ETag and the last entity's Content-ID and Last-Modified, so
  that the next run starts there: one conditional request when nothing changed. Should that
  page be gone, the run crawls back to it by the remembered Last-Modified.

A PUT sets the record at the entity's `Content-Location` to its body, a DELETE removes it,
a PATCH with a JSON body is applied as a JSON Merge Patch (RFC 7396). Each Content-ID is
applied at most once a run. Bodies are parsed by the standard library's email parser.

Memory stays flat: one page is in memory at a time; records and state live in SQLite
(state.open_state). Nothing here depends on feedpub's models: only `snapshot_url_for`
knows feedpub's URL layout, to find a snapshot when none is named.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from .atom import parse_timestamp, timestamp_text
from .harvest import HarvestFailed, HarvestResult, HarvestRun, LiveRecords, Meter, show_progress
from .http import LINKED_PAGES, MISSING_STATUSES, FetchError, Response
from .linked import (
    ACCEPT_INDEX,
    ACCEPT_PAGES,
    Entity,
    Page,
    PageError,
    SnapshotIndex,
    body_content,
    http_date,
    link_map,
    merge_patch,
    parse_index,
    parse_page,
    snapshot_url_for,
)
from .records import from_feedpub_json, shaped
from .state import STATE_VERSION, StateError, read_meta

# Where a first run starts: the newest snapshot if one is found (else the oldest page), a
# snapshot or nothing, the oldest page.
AUTO, FROM_SNAPSHOT, FROM_PAGE_1 = "auto", "snapshot", "page-1"


# Records and state ---------------------------------------------------------------------

class LinkedRecords:
    """The live records by Content-Location, in SQLite: a DELETE removes its row (entities
    are applied in the feed's order, so no tombstone is needed)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS linked_records (location TEXT PRIMARY KEY, "
                   "updated TEXT NOT NULL, content_id TEXT, source TEXT NOT NULL, "
                   "content TEXT NOT NULL)")
        # live(): oldest update first, read in index order.
        db.execute("CREATE INDEX IF NOT EXISTS linked_records_updated "
                   "ON linked_records (updated, location)")

    def content(self, location: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT content FROM linked_records WHERE location = ?",
                              (location,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, location: str, *, updated: str, content_id: str | None, source: str,
            content: dict[str, Any]) -> bool:
        """Set a record; whether its content changed."""
        text = json.dumps(content)
        before = self.db.execute("SELECT content FROM linked_records WHERE location = ?",
                                 (location,)).fetchone()
        self.db.execute("INSERT OR REPLACE INTO linked_records VALUES (?, ?, ?, ?, ?)",
                        (location, updated, content_id, source, text))
        return before is None or before[0] != text

    def delete(self, location: str) -> bool:
        """Remove a record; whether there was one."""
        return self.db.execute("DELETE FROM linked_records WHERE location = ?",
                               (location,)).rowcount > 0

    def live(self) -> Iterator[dict[str, Any]]:
        for location, updated, content_id, source, content in self.db.execute(
                "SELECT location, updated, content_id, source, content FROM linked_records "
                "ORDER BY updated, location"):
            content = json.loads(content)
            yield shaped({"id": location, "updated": updated, "content_id": content_id,
                          "source": source, **content},
                         **{"alternate": location, **from_feedpub_json(content.get("record"))})

    def count_live(self) -> int:
        return self.db.execute("SELECT count(*) FROM linked_records").fetchone()[0]


@dataclass
class Resume:
    """Where the feed goes on. `page` (None: found by crawling back from the entry point to
    the newest page older than `since`, or to the oldest page), skipping its entities up to
    and including the Content-ID `after`, or without one those older than `since`."""

    page: str | None = None
    etag: str | None = None  # of `page` when last read: unchanged, nothing new there
    next: str | None = None  # `page`'s next link when last read
    after: str | None = None
    since: str | None = None  # an RFC 3339 timestamp (whole seconds)

    @property
    def since_time(self) -> datetime | None:
        return parse_timestamp(self.since)


class LinkedState:
    """What a linked-pages harvester keeps between runs, in a state file like the Atom
    harvester's (state.open_state): the entry point, where to resume, the records."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        meta = read_meta(db, kind=LINKED_PAGES)
        self.records = LinkedRecords(db)
        self.entry: str | None = meta.get("entry") or None
        self.snapshot: str | None = meta.get("snapshot") or None  # the one started from
        try:
            self.resume = Resume(**json.loads(meta["resume"])) if meta.get("resume") else None
        except (TypeError, ValueError) as error:
            raise StateError(f"cannot read the state file's resume point: {error}") from error
        # The Content-IDs applied in this run: each at most once.
        db.execute("CREATE TEMP TABLE IF NOT EXISTS linked_applied (id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM linked_applied")

    def first_time(self, content_id: str) -> bool:
        return self.db.execute("INSERT OR IGNORE INTO linked_applied VALUES (?)",
                               (content_id,)).rowcount > 0

    def save(self) -> None:
        """Commit the run (and release the file)."""
        meta = {"version": str(STATE_VERSION), "format": LINKED_PAGES, "entry": self.entry or "",
                "snapshot": self.snapshot or "",
                "resume": json.dumps(asdict(self.resume)) if self.resume else ""}
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


# The harvester -------------------------------------------------------------------------

class Skip:
    """Which entities at the start of a walk were applied already (by the snapshot or an
    earlier run): those up to and including the Content-ID `after`, else those older than
    `since`. Once one entity is applied, every later one is."""

    def __init__(self, resume: Resume, warn: Callable[[str], None]):
        self.after, self.since = resume.after, resume.since_time
        self.warn = warn
        self.done = self.after is None and self.since is None

    def applies(self, entity: Entity, page: str) -> bool:
        if self.done:
            return True
        modified = entity.last_modified
        if self.after is not None:
            if entity.content_id == self.after:
                self.done = True
                return False
            if self.since is None or modified is None or modified <= self.since:
                return False  # still before it
            self._lost(page)
        if self.since is not None and modified is not None and modified < self.since:
            return False
        self.done = True
        return True

    def page_ended(self, page: str) -> None:
        """Without a date to bound the search, `after` must be on the first page."""
        if not self.done and self.after is not None and self.since is None:
            self._lost(page)
            self.done = True

    def _lost(self, page: str) -> None:
        self.warn(f"{page}: the entity {self.after} to resume after is not where it was; "
                  "resuming by Last-Modified instead (entities of that second may be "
                  "applied twice)")
        self.after = None


# Per-entity problems, counted a page and reported once: a feed without Content-IDs would
# otherwise print a warning per entity. True: the record is not as the feed says.
PROBLEMS = {
    "no-location": ("entities without a Content-Location, not applied", True),
    "operation": ("entities without an Operation-Type of PUT, DELETE or PATCH, not applied",
                  True),
    "body": ("entities whose body is not the JSON their Content-Type says, not applied", True),
    "patch": ("PATCH entities without a JSON body or a JSON record to patch, not applied",
              True),
    "snapshot-operation": ("snapshot entities that are not PUTs, not applied", True),
    "no-content-id": ("entities without a Content-ID (applied; resuming after them is at "
                      "least once)", False),
    "repeated": ("entities repeating a Content-ID applied earlier in this run, not applied "
                 "again", False),
    "no-last-modified": ("entities without a valid Last-Modified", False),
    "older": ("entities older than the one before them (Last-Modified goes back)", False),
}


class LinkedHarvester(HarvestRun):
    """One run: load a snapshot (first run), then walk the feed forward from where the last
    run or the snapshot ended, applying each entity once, in order."""

    def __init__(self, *, state: LinkedState, **run):
        super().__init__(state=state, **run)
        self._prefetched: dict[str, Response] = {}
        self._newest: datetime | None = None  # the Last-Modified of the last entity read
        self._crawled_from: str | None = None  # the page a crawl back began at

    def run(self, url: str, *, first: Response | None = None, meter: Meter | None = None,
            snapshot: str | None = None, start: str = AUTO) -> HarvestResult:
        """Harvest from `url`, the feed's entry point (typically its newest page). A first
        run starts from the snapshot index at `snapshot`, else the one `snapshot_url_for`
        finds (required with FROM_SNAPSHOT, used if found with AUTO), or with FROM_PAGE_1
        from the oldest page; later runs go on from where the previous one ended.
        `first`: the entry point's answer to a GET already made."""
        meter = meter or Meter.start(self.client)
        if self.state.entry not in (None, url):
            raise StateError(f"the state file is for {self.state.entry}, not {url}")
        self.state.entry = url
        if first is not None:
            self._prefetched = {url: first, first.url: first}
        if self.state.resume is None:
            self.state.resume = self._start(url, snapshot, start)
        self._walk(url, self.state.resume)
        show_progress(self.progress, self.summary, self.client)
        meter.fill(self.summary, self.client)
        if not self.summary.complete:
            self._warn("the reconstruction is incomplete: see the warnings above; the next "
                       "run tries again from where this one stopped")
        self.summary.live_records = self.state.records.count_live()
        return HarvestResult(LiveRecords(self.state.records), self.summary, self.warnings)

    # Where to start ---------------------------------------------------------------------

    def _start(self, url: str, snapshot: str | None, start: str) -> Resume:
        """Load the snapshot (if any) and say where the feed goes on after it."""
        if start == FROM_PAGE_1:
            return Resume()
        required = snapshot is not None or start == FROM_SNAPSHOT
        snapshot = snapshot or snapshot_url_for(url)
        if snapshot is None and required:
            raise HarvestFailed(f"no snapshot of {url} is known: name its index")
        index = self._snapshot_index(snapshot, required=required) if snapshot else None
        if index is None:
            return Resume()
        for page_url in index.pages:
            self._load_snapshot_page(page_url)
        self.state.snapshot = index.url
        since = timestamp_text(index.created.replace(microsecond=0))
        if index.resume_page is not None:  # the server says where: exactly once
            return Resume(page=index.resume_page, after=index.resume_after,
                          since=since if index.resume_after else None)
        return Resume(since=since)

    def _snapshot_index(self, url: str, *, required: bool) -> SnapshotIndex | None:
        """The index at `url`; None when there is none and none is required."""
        response = self._must_get(url, accept=ACCEPT_INDEX)
        if response.status in MISSING_STATUSES and not required:
            return None  # no snapshot yet: start from the oldest page
        if response.status != 200:
            raise HarvestFailed(f"the snapshot index {url} answered HTTP {response.status}")
        self.summary.pages_fetched += 1
        try:
            return parse_index(response)
        except PageError as error:
            raise HarvestFailed(f"{url}: {error}") from error

    def _load_snapshot_page(self, url: str) -> None:
        """Apply a snapshot page's PUTs. A snapshot is all or nothing: a page that cannot be
        read fails the run (and its transaction), so that the next run starts afresh."""
        response = self._must_get(url, accept=ACCEPT_PAGES)
        if response.status != 200:
            raise HarvestFailed(f"the snapshot page {url} answered HTTP {response.status}")
        try:
            page = parse_page(response)
        except PageError as error:
            raise HarvestFailed(f"the snapshot page {url}: {error}") from error
        self.summary.pages_fetched += 1
        problems: Counter[str] = Counter()
        for entity in page.entities:
            if entity.operation not in (None, "PUT"):
                problems["snapshot-operation"] += 1
            else:
                self._put(entity, url, problems)
        self._report(url, problems)

    # The walk ---------------------------------------------------------------------------

    def _walk(self, entry: str, resume: Resume) -> None:
        """Apply the feed from `resume` to its newest page, remembering how far it got."""
        page, skip = self._resume_page(entry, resume)
        seen: set[str] = set()
        while page is not None:
            if page.url in seen:
                self._warn(f"loop: {page.url} was reached twice in one walk; stopped there")
                self.summary.complete = False
                return
            seen.add(page.url)
            self._apply_page(page, skip)
            if page.next is None:
                self._check_end(page.url, seen)
                return
            page = self._page(page.next)

    def _check_end(self, last: str, seen: set[str]) -> None:
        """Walking forward from where crawling back ended must come back to where that
        began: else a next link is missing, and the next run crawls back again."""
        if self._crawled_from is None or self._crawled_from in seen:
            return
        self._warn(f"{last} has no next link, but {self._crawled_from}, where crawling back "
                   "along prev began, was not reached: the pages between are missing")
        self.summary.complete = False
        self.state.resume.page = None

    def _resume_page(self, entry: str, resume: Resume) -> tuple[Page | None, Skip]:
        """The first page to read and what to skip of it: the remembered page if it changed
        (its next page, whole, if it did not), else the page crawling back finds."""
        skip = Skip(resume, self._warn)
        if resume.page is not None:
            response = self._get(resume.page, etag=resume.etag)
            if response is None:
                return None, skip
            if response.status == 304:
                self.summary.not_modified += 1
                # A 304 repeats the Link header (our ETag may not cover a new next link).
                following = link_map(response).get("next") or resume.next
                return (self._page(following) if following else None), Skip(Resume(), self._warn)
            if response.status not in MISSING_STATUSES:
                return self._read(resume.page, response), skip
            if resume.after is None and resume.since is None:
                return None, skip  # a page the feed has not reached yet (an empty feed's)
            self._warn(f"{resume.page} answered HTTP {response.status}; finding the way on "
                       f"from {entry} by Last-Modified")
        start = self._crawl_back(entry, resume.since_time)
        return (self._page(start) if start else None), skip

    def _crawl_back(self, entry: str, since: datetime | None) -> str | None:
        """The newest page older than `since` (None: the oldest page), reached along `prev`
        from the entry point with HEAD requests; None (warned) when the way is broken."""
        url, seen = entry, set()
        while True:
            response = self._get(url, method="HEAD")
            if response is None:
                return None
            if response.status != 200:
                self._unreadable(f"{url} answered HTTP {response.status}")
                return None
            if response.url in seen:
                self._warn(f"loop: {response.url} was reached twice crawling back; stopped")
                self.summary.complete = False
                return None
            seen.add(response.url)
            self._crawled_from = self._crawled_from or response.url
            prev = link_map(response).get("prev")
            modified = http_date(response.header("Last-Modified"))
            if prev is None or (since and modified and modified < since):
                return response.url
            url = prev

    def _apply_page(self, page: Page, skip: Skip) -> None:
        problems: Counter[str] = Counter()
        last = None
        for entity in page.entities:
            self._check_order(entity, problems)
            if skip.applies(entity, page.url):
                self._apply(entity, page.url, problems)
            last = entity
        skip.page_ended(page.url)
        self._report(page.url, problems)
        resume = self.state.resume
        if last is not None:  # else (an empty page) it ends where it did
            resume.after = last.content_id
            modified = last.last_modified
            resume.since = timestamp_text(modified) if modified else resume.since
        resume.page, resume.etag, resume.next = page.url, page.etag, page.next
        show_progress(self.progress, self.summary, self.client)

    def _check_order(self, entity: Entity, problems: Counter[str]) -> None:
        modified = entity.last_modified
        if modified is None:
            problems["no-last-modified"] += 1
            return
        if self._newest is not None and modified < self._newest:
            problems["older"] += 1
        self._newest = modified

    def _apply(self, entity: Entity, source: str, problems: Counter[str]) -> None:
        content_id = entity.content_id
        if content_id is None:
            problems["no-content-id"] += 1
        elif not self.state.first_time(content_id):
            problems["repeated"] += 1
            return
        operation = entity.operation
        if operation is None:
            problems["operation"] += 1
        elif entity.location is None:
            problems["no-location"] += 1
        elif operation == "DELETE":
            self.summary.entries_applied += 1
            self.summary.deletions += 1
            self.summary.records_changed += self.state.records.delete(entity.location)
        elif operation == "PATCH":
            self._patch(entity, source, problems)
        else:
            self._put(entity, source, problems)

    def _put(self, entity: Entity, source: str, problems: Counter[str]) -> None:
        if entity.location is None:
            problems["no-location"] += 1
            return
        content = body_content(entity)
        if content is None:
            problems["body"] += 1
            return
        self._store(entity, source, content)

    def _patch(self, entity: Entity, source: str, problems: Counter[str]) -> None:
        patch = body_content(entity)
        current = self.state.records.content(entity.location) or {"record": {}}
        if patch is None or "record" not in patch or "record" not in current:
            problems["patch"] += 1
            return
        self._store(entity, source, {"record": merge_patch(current["record"],
                                                           patch["record"])})

    def _store(self, entity: Entity, source: str, content: dict[str, Any]) -> None:
        self.summary.entries_applied += 1
        self.summary.records_changed += self.state.records.put(
            entity.location, updated=timestamp_text(entity.last_modified) or "",
            content_id=entity.content_id, source=source, content=content)

    def _report(self, url: str, problems: Counter[str]) -> None:
        for code, count in problems.items():
            message, incomplete = PROBLEMS[code]
            self._warn(f"{url}: {message}: {count}")
            if incomplete:
                self.summary.complete = False

    # HTTP -------------------------------------------------------------------------------

    def _get(self, url: str, *, method: str = "GET", etag: str | None = None) -> Response | None:
        """The answer to a request, or None (warned) when there is none."""
        if etag is None and url in self._prefetched:  # a GET's answer serves a HEAD too
            response = self._prefetched[url]
            if method == "GET":
                self._prefetched.clear()
            return response
        headers = {"Accept": ACCEPT_PAGES}
        if etag:
            headers["If-None-Match"] = etag
        try:
            return self.client.fetch(url, method=method, headers=headers)
        except FetchError as error:
            self._unreadable(str(error))
            return None

    def _must_get(self, url: str, *, accept: str) -> Response:
        try:
            return self.client.fetch(url, headers={"Accept": accept})
        except FetchError as error:
            raise HarvestFailed(str(error)) from error

    def _page(self, url: str) -> Page | None:
        response = self._get(url)
        return None if response is None else self._read(url, response)

    def _read(self, url: str, response: Response) -> Page | None:
        if response.status != 200:
            self._unreadable(f"{url} answered HTTP {response.status}")
            return None
        try:
            page = parse_page(response)
        except PageError as error:
            self._unreadable(f"{url}: {error}")
            return None
        self.summary.pages_fetched += 1
        return page

    def _unreadable(self, message: str) -> None:
        self._warn(f"unreadable page: {message}")
        self.summary.complete = False

