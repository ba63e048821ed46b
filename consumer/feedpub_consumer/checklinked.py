"""A conformance checker for linked-pages feeds, usable against any server; the rules are
those of docs/how-it-works/linked-pages.md#the-rules-the-checker-holds-a-server-to.

`LinkedChecker.run(url)` walks back along `prev` from the entry point and forward along
every `next` (pages reachable either way are published), and reports each rule by name:

- `linked.multipart`: a page is multipart/* and parses without defects (the standard
  library's email parser).
- `linked.self`: a page has one self link, naming the page.
- `linked.prev-next`: adjacent pages link each other (A next B, B prev A); a page has at
  most one prev and one next. A page may have lost its prev link (older pages cleaned up).
- `linked.unresolved`: a prev or next link that does not answer with a page.
- `linked.loop`: following prev, or next, comes back to a page.
- `linked.empty-page`: a page holds no entity.
- `linked.entity-last-modified`: every entity has a Last-Modified, never earlier than the
  entity before it, within a page and across pages.
- `linked.page-last-modified`: a page has a Last-Modified, equal to its last entity's.
- `linked.content-id`: every entity has a Content-ID, unique within the feed.
- `linked.operation-type`: every entity has an Operation-Type of PUT, DELETE or PATCH.
- `linked.immutability`: with a state file, a page changed since an earlier check other
  than by gaining entities while it had no next link, gaining a next link, or losing its
  prev link.
- `http.head` (HEAD and GET agree), `http.revalidation` (If-None-Match answers 304),
  `http.immutable` (Cache-Control immutable only on a page with a next link).
- `schema.*` (consumer/feedpub_consumer/recordschemas.py): a PUT entity whose body, a record in
  feedpub's JSON shape, names its schema (`"schema": URL`) must match it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .check import CheckResult, HttpChecks, load_state, save_state
from .http import LINKED_PAGES, HttpClient, Response, RunLimitReached, parse_link_header
from .linked import ACCEPT_PAGES, Entity, Page, PageError, link_map, parse_page
from .progress import counted

NAVIGATION = ("self", "prev", "next")


@dataclass
class Seen:
    """What the checks between pages need of a page, once its own checks are done: its
    links (in its headers: followed even when its body is not a page) and dates. Its body
    is not kept, so memory grows by little a page."""

    url: str
    links: dict[str, str]
    parsed: bool  # its body is a page
    first: datetime | None = None  # its oldest entity's Last-Modified
    last: datetime | None = None  # its newest entity's
    modified: datetime | None = None  # the page's own

    @property
    def prev(self) -> str | None:
        return self.links.get("prev")

    @property
    def next(self) -> str | None:
        return self.links.get("next")


class LinkedChecker(HttpChecks):
    def __init__(self, *, client: HttpClient | None = None, state_path: str | None = None,
                 http_checks: bool = True):
        super().__init__(client=client)
        self.state_path = state_path
        self.http_checks = http_checks
        self.pages: dict[str, Seen] = {}  # by the URL that led to them
        self.content_ids: dict[str, str] = {}  # Content-ID -> the page it was first met on
        # Read first, so that a page is compared while it is in hand.
        self.state = None if state_path is None else load_state(state_path, LINKED_PAGES)

    def run(self, url: str, first: Response) -> CheckResult:
        """Check the feed whose entry point `url` answered a GET with `first`."""
        try:
            entry = self._accept(first.url, first)  # the page itself, not a redirect to it
            oldest = self._walk(entry, "prev")
            self._walk(oldest, "next")  # through the pages read, on to the newer ones
            for seen in list(self.pages.values()):  # next links the walks did not follow
                if seen.next is not None and seen.next not in self.pages:
                    self._walk(seen, "next", through_known=False)
            self._check_between_pages()
        except RunLimitReached as error:  # other errors are problems of the feed
            self._stopped(error)
        if self.state_path is not None and self.state is not None:
            save_state(self.state_path, self.state)
        return self._result(len(self.pages))

    # The walk ---------------------------------------------------------------------------

    def _walk(self, start: Seen, rel: str, *, through_known: bool = True) -> Seen:
        """Follow `rel` from `start` to a page without it (or, unless `through_known`, to a
        page read before), fetching the pages not read yet; the last page reached. A page
        met twice on one walk is a loop."""
        chain, current = {start.url}, start
        while (target := getattr(current, rel)) is not None:
            if target in chain:
                self._problem(current.url, "linked.loop",
                              f"{rel} leads back to {target}, already reached following {rel}")
                break
            chain.add(target)
            known = self.pages.get(target)
            if known is not None and not through_known:
                break
            following = known or self._get(target, current.url, rel)
            if following is None:
                break
            current = following
        return current

    def _get(self, url: str, referrer: str, rel: str) -> Seen | None:
        response = self._follow(url, referrer=referrer, rel=rel, code="linked.unresolved",
                                headers={"Accept": ACCEPT_PAGES})
        return None if response is None else self._accept(url, response)

    def _accept(self, url: str, response: Response) -> Seen:
        """Check a page on its own, and keep what the checks between pages need of it."""
        try:
            page = parse_page(response)
        except PageError as error:
            self._problem(url, "linked.multipart", str(error))
            page = None
        seen = self.pages[url] = Seen(url, link_map(response), page is not None)
        self._check_links(seen, response)
        if page is not None:
            self._check_entities(url, page)
            self._check_immutability(url, page)
            dates = [entity.last_modified for entity in page.entities if entity.last_modified]
            seen.first, seen.last = (dates[0], dates[-1]) if dates else (None, None)
            seen.modified = page.last_modified
        if self.http_checks:
            self._check_http(seen, response)
        self._checked(len(page.entities) if page is not None else 0)
        return seen

    # One page ---------------------------------------------------------------------------

    def _check_links(self, seen: Seen, response: Response) -> None:
        links = parse_link_header(", ".join(response.headers.get_all("Link") or []),
                                  response.url)
        for rel in NAVIGATION:
            hrefs = [href for name, href in links if name == rel]
            code = "linked.self" if rel == "self" else "linked.prev-next"
            if len(hrefs) > 1:
                self._problem(seen.url, code, f"{len(hrefs)} {rel} links: {', '.join(hrefs)}")
        own = seen.links.get("self")
        if own is None:
            self._problem(seen.url, "linked.self", "no self link")
        elif own != response.url:
            self._problem(seen.url, "linked.self",
                          f"the self link {own} is not the page's URL {response.url}")

    def _check_entities(self, url: str, page: Page) -> None:
        if not page.entities:
            self._problem(url, "linked.empty-page", "the page holds no entity")
        before = None
        for number, entity in enumerate(page.entities, start=1):
            label = entity.content_id or f"entity {number}"
            self._check_entity(url, entity, label)
            modified = entity.last_modified
            if modified is not None and before is not None and modified < before:
                self._problem(url, "linked.entity-last-modified",
                              f"{label} ({_text(modified)}) is older than the entity before "
                              f"it ({_text(before)})")
            before = modified or before
        self._check_page_last_modified(url, page)

    def _check_entity(self, url: str, entity: Entity, label: str) -> None:
        if entity.last_modified is None:
            self._problem(url, "linked.entity-last-modified",
                          f"{label} has no valid Last-Modified "
                          f"({entity.header('Last-Modified') or 'none'})")
        if entity.operation is None:
            self._problem(url, "linked.operation-type",
                          f"{label} has Operation-Type {entity.header('Operation-Type')!r}, "
                          "not PUT, DELETE or PATCH")
        content_id = entity.content_id
        if content_id is None:
            self._problem(url, "linked.content-id", f"{label} has no Content-ID")
        elif content_id in self.content_ids:
            where = self.content_ids[content_id]
            self._problem(url, "linked.content-id", f"{content_id} is on {where} too"
                          if where != url else f"{content_id} is twice on this page")
        else:
            self.content_ids[content_id] = url
        if entity.operation == "PUT":
            self._check_record(url, entity, label)

    def _check_record(self, url: str, entity: Entity, label: str) -> None:
        """A PUT entity's record against the schema it names, if it names one (feedpub's
        record JSON; a body of another shape names none)."""
        if b'"schema"' not in entity.body:  # the common case without a schema, not parsed
            return
        try:
            body = json.loads(entity.body)
        except (ValueError, RecursionError):
            return
        if not isinstance(body, dict) or "schema" not in body:
            return
        key, where = body.get("key"), body.get("url") or entity.location
        record = f"{label}: record {key}" + (f" ({where})" if where else "")
        self.schemas.check_record(body.get("metadata"), body["schema"], where=url,
                                  record=record)

    def _check_page_last_modified(self, url: str, page: Page) -> None:
        if page.last_modified is None:
            self._problem(url, "linked.page-last-modified", "no valid Last-Modified header")
            return
        last = page.entities[-1].last_modified if page.entities else None
        if last is not None and last != page.last_modified:
            self._problem(url, "linked.page-last-modified",
                          f"Last-Modified {_text(page.last_modified)} is not its last "
                          f"entity's ({_text(last)})")

    def _check_http(self, seen: Seen, response: Response) -> None:
        self._check_revalidation(seen.url, "If-None-Match", response.etag)
        self._check_head(seen.url, response)
        if "immutable" in response.cache_control and seen.next is None:
            self._problem(seen.url, "http.immutable",
                          "Cache-Control immutable on a page without a next link (it may "
                          "still gain entities and its next link)")

    # Between pages ----------------------------------------------------------------------

    def _check_between_pages(self) -> None:
        pairs = set()
        for seen in self.pages.values():
            following = self.pages.get(seen.next) if seen.next else None
            if following is not None:
                pairs.add((seen.url, following.url))
                if following.prev not in (None, seen.url):  # none: prev links cleaned up
                    self._problem(following.url, "linked.prev-next",
                                  f"{seen.url} links next here, but this page's prev is "
                                  f"{following.prev}")
            preceding = self.pages.get(seen.prev) if seen.prev else None
            if preceding is not None:
                pairs.add((preceding.url, seen.url))
                if preceding.next != seen.url:
                    self._problem(preceding.url, "linked.prev-next",
                                  f"{seen.url} links prev here, but this page's next is "
                                  f"{preceding.next or 'missing'}")
        for older, newer in sorted(pairs):
            self._check_order(self.pages[older], self.pages[newer])

    def _check_order(self, older: Seen, newer: Seen) -> None:
        if older.last and newer.first and newer.first < older.last:
            self._problem(newer.url, "linked.entity-last-modified",
                          f"its first entity ({_text(newer.first)}) is older than the last one "
                          f"({_text(older.last)}) of the previous page {older.url}")
        if older.modified and newer.modified and newer.modified < older.modified:
            self._problem(newer.url, "linked.page-last-modified",
                          f"Last-Modified {_text(newer.modified)} is earlier than the previous "
                          f"page's ({_text(older.modified)})")

    # Over time --------------------------------------------------------------------------

    def _check_immutability(self, url: str, page: Page) -> None:
        if self.state is None:
            return
        now = page_state(page)
        before = self.state["pages"].get(url)
        if before is not None:
            for change in forbidden_changes(before, now, page):
                self._problem(url, "linked.immutability", change)
        self.state["pages"][url] = now


def entity_digest(entity: Entity) -> str:
    """A hash of an entity's headers (names in any case) and body."""
    head = "".join(f"{name.lower()}:{value.strip()}\n" for name, value in entity.headers)
    return hashlib.sha256(head.encode() + b"\n" + entity.body).hexdigest()


def prefix_hash(page: Page, count: int) -> str:
    """A hash of the first `count` entities of a page: what stays when entities are added."""
    digests = "".join(entity_digest(entity) for entity in page.entities[:count])
    return hashlib.sha256(digests.encode()).hexdigest()


def page_state(page: Page) -> dict[str, Any]:
    count = len(page.entities)
    return {"entities": count, "hash": prefix_hash(page, count),
            "links": {rel: page.links.get(rel) for rel in NAVIGATION}}


def forbidden_changes(before: dict[str, Any], now: dict[str, Any], page: Page) -> list[str]:
    """How a page changed other than as a published page may: gaining entities while it
    has no next link, gaining a next link, losing its prev link."""
    changes = []
    old, new = before["links"], now["links"]
    if old["self"] != new["self"]:
        changes.append(f"its self link changed from {old['self']} to {new['self']}")
    if new["prev"] not in (None, old["prev"]):
        changes.append(f"its prev link changed from {old['prev'] or 'none'} to {new['prev']}")
    if old["next"] is not None and new["next"] != old["next"]:
        changes.append(f"its next link changed from {old['next']} to {new['next'] or 'none'}")
    count = before["entities"]
    if now["entities"] < count or prefix_hash(page, count) != before["hash"]:
        changes.append(f"its first {counted(count, 'entity', 'entities')} changed or went")
    elif now["entities"] > count and old["next"] is not None:
        changes.append("it gained entities after it had a next link")
    return changes


def _text(moment: datetime) -> str:
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
