"""A conformance checker for archived feeds: RFC 5005, Atom-PMH, RFC 4287 and HTTP.

The Atom `Checker` (consumer/feedpub_consumer/checking.py's `check_feed(url)` picks the checker
for a feed's format) walks a feed from its subscription document back along `prev-archive`,
and forward along every `next-archive` it meets, and returns one Problem per violation,
each naming the URL it concerns. With a state file it also remembers a hash of every
archive page, so a later run can tell when a published page changed other than by gaining
its `next-archive` link. Like the harvester it works against any server. A linked-pages
feed (told by its multipart Content-Type) is checked by consumer/feedpub_consumer/checklinked.py;
an RSS 2.0 archived feed (application/rss+xml) by consumer/feedpub_consumer/checkrss.py, the same
walk; complete and paged feeds by consumer/feedpub_consumer/checkpaged.py; an OAI-PMH repository by
consumer/feedpub_consumer/checkoai.py. Each builds on this one.

Record schemas (consumer/feedpub_consumer/recordschemas.py, `schema.*`): a document's
`describedby` link of type application/schema+json must lead to a JSON Schema, and each
record read must match the schema it names. An Atom entry carries no metadata, so a record
is read at its alternate link (its JSON): the sample's records when the feed declares a
schema (a GET each instead of a HEAD: no more requests), every live record with
`fetch_records` (one request a record).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.message import Message
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lxml import etree, isoschematron

from .atom import (
    A,
    AtomDocument,
    DocumentError,
    document_rows,
    feed_links,
    parse_document,
    repeated_alternates,
    timestamp_text,
)
from .http import ATOM, FetchError, HttpClient, Limits, Response, RunLimitReached, parse_link_header
from .progress import counted
from .recordschemas import SCHEMA_TYPE, RecordSchemas
from .state import Reconstruction, RowsByPage

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any

SCHEMA_DIR = Path(__file__).parent / "schema"
NAVIGATION_RELS = ("self", "current", "prev-archive", "next-archive")
ATOM_MEDIA_TYPE = "application/atom+xml"
STATE_VERSION = 1
MAX_SCHEMA_ERRORS = 5  # per document: one broken template can produce thousands
RSS = "rss"  # RSS 2.0 archived feeds (RFC 5005 Appendix B): consumer/feedpub_consumer/checkrss.py


def is_rss(response: Response) -> bool:
    """An RSS feed by its Content-Type (one served as plain XML needs --format rss)."""
    content_type = (response.header("Content-Type") or "").split(";")[0].strip().lower()
    return content_type == "application/rss+xml"


@dataclass(frozen=True, order=True)
class Problem:
    url: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.url}  {self.code}: {self.message}"


class CheckFailed(Exception):
    """The check could not run at all (the start URL does not answer with a document)."""


# The headers of a checked page, once its HTTP checks are done (a Message is kilobytes).
NO_HEADERS = Message()


@dataclass
class Page:
    url: str
    response: Response
    document: AtomDocument | None  # None when the body is not an Atom feed
    # An archive page's hashes, for --state (content_hash, and the body's sha256).
    fingerprint: dict[str, str] | None = None


@dataclass
class CheckResult:
    problems: list[Problem]
    documents: int
    requests: int
    bytes: int
    seconds: float
    complete: bool  # False when the request budget ran out before the walk ended
    notes: list[str] = field(default_factory=list)


@cache
def _validators() -> tuple[etree.RelaxNG, isoschematron.Schematron]:
    relaxng = etree.RelaxNG(etree.parse(str(SCHEMA_DIR / "atom.rng")))
    schematron = isoschematron.Schematron(etree.parse(str(SCHEMA_DIR / "atom-rules.sch")),
                                          store_report=True)
    return relaxng, schematron


class HttpChecks:
    """What every checker does: collect problems, check a document's HTTP (HEAD agrees with
    GET, If-None-Match answers 304), and say how far it got."""

    def __init__(self, *, client: HttpClient | None = None):
        self.client = client or HttpClient(Limits())
        self.problems: set[Problem] = set()
        self.complete = True
        self.notes: list[str] = []
        self.started = time.monotonic()
        self.progress: tqdm | None = None  # advanced by one per document checked
        self.entries_seen = 0
        # The record schemas a feed links, and the records read checked against them.
        self.schemas = RecordSchemas(self.client, self._problem)

    def _checked(self, entries: int) -> None:
        """One more document checked, holding `entries` entries: the caller's bar shows it."""
        self.entries_seen += entries
        if self.progress is not None:
            self.progress.set_postfix_str(counted(self.entries_seen, "entry", "entries"),
                                          refresh=False)
            self.progress.update()

    def _problem(self, url: str, code: str, message: str) -> None:
        self.problems.add(Problem(url, code, message))

    def _follow(self, url: str, *, referrer: str, rel: str, code: str,
                headers: dict[str, str] | None = None) -> Response | None:
        """Fetch a linked document; a link that does not resolve is a problem (`code`)."""
        try:
            response = self.client.fetch(url, headers=headers)
        except RunLimitReached:
            raise
        except FetchError as error:
            self._problem(referrer, code, f"{rel} {url}: {error}")
            return None
        if response.status != 200:
            self._problem(referrer, code, f"{rel} {url} answered HTTP {response.status}")
            return None
        return response

    def _stopped(self, error: RunLimitReached) -> None:
        """Out of requests or time: no problem of the feed, but the walk did not finish."""
        self.complete = False
        self.notes.append(f"stopped early: {error}")

    def _result(self, documents: int) -> CheckResult:
        if (note := self.schemas.note(self._records_read())) is not None:
            self.notes.append(note)
        return CheckResult(sorted(self.problems), documents, self.client.requests,
                           self.client.bytes_received, round(time.monotonic() - self.started, 3),
                           self.complete, self.notes)

    def _records_read(self) -> str | None:
        """Which records a run reads whole, for the schema note; None: every one it meets
        (linked pages and OAI-PMH carry them)."""
        return None

    def _check_revalidation(self, url: str, header: str, value: str | None) -> None:
        if not value:
            return
        try:
            answer = self.client.fetch(url, headers={header: value})
        except RunLimitReached:
            raise
        except FetchError as error:
            self._problem(url, "http.revalidation", f"{header}: {error}")
            return
        if answer.status != 304:
            self._problem(url, "http.revalidation",
                          f"{header}: {value} answered HTTP {answer.status}, not 304")

    def _check_head(self, url: str, get: Response) -> None:
        try:
            head = self.client.fetch(url, method="HEAD")
        except RunLimitReached:
            raise
        except FetchError as error:
            self._problem(url, "http.head", str(error))
            return
        if head.status != get.status:
            self._problem(url, "http.head", f"HEAD answered {head.status}, GET {get.status}")
            return
        for name in ("Content-Type", "ETag", "Last-Modified", "Cache-Control", "Link"):
            if name == "Last-Modified" and None in (head.header(name), get.header(name)):
                continue  # a SHOULD: a server may send none until a change settles
            if head.header(name) != get.header(name):
                self._problem(url, "http.head", f"HEAD says {name}: {head.header(name)!r}, "
                                                f"GET says {get.header(name)!r}")
        length = head.header("Content-Length")
        encoded = get.header("Content-Encoding")
        if length is not None and not encoded and length != str(len(get.body)):
            self._problem(url, "http.head", f"HEAD says Content-Length: {length}, "
                                            f"GET sent {len(get.body)} bytes")


class Checker(HttpChecks):
    # The format it reads (consumer/feedpub_consumer/checkrss.py reads RSS 2.0 with the same walk).
    format = ATOM
    media_type = ATOM_MEDIA_TYPE

    # Whether a checked page keeps its entries in memory (the RSS checker's sample reads
    # them); the Atom checkers keep each page's rows on disk instead (`rows`), so that a
    # walk of a million entries stays small (bench/checkfeed_memory.py).
    keeps_entries = False

    def __init__(self, *, client: HttpClient | None = None, state_path: str | None = None,
                 sample: int = 5, http_checks: bool = True, seed: int = 5005,
                 fetch_records: bool = False):
        super().__init__(client=client)
        self.state_path = state_path
        self.sample = sample
        # Every live record's JSON read at its alternate link (instead of a sample's HEAD),
        # and checked against the schema it names.
        self.fetch_records = fetch_records
        self.http_checks = http_checks
        self.seed = seed
        # Every page met, by URL, as `_kept` keeps it once checked: links, dates, hashes.
        self.pages: dict[str, Page] = {}
        self.rows = RowsByPage()
        self.chain: list[str] = []  # the prev-archive walk, newest first

    # The walk ------------------------------------------------------------------------

    def run(self, url: str, first: Response | None = None) -> CheckResult:
        """Check the feed whose subscription document is `url` (`first`: its answer to a
        GET already made)."""
        response = first or fetch_start(self.client, url)
        try:
            self._accept(url, response)  # its describedby schema is fetched too
            self._walk_back(url)
            self._walk_forward()
            self._check_links_between_pages()
            self._check_alternates()
            self._check_immutability()
        except RunLimitReached as error:  # other errors are problems of the feed
            self._stopped(error)
        return self._result(len(self.pages))

    def _walk_back(self, url: str) -> None:
        self.chain = [url]
        current = self.pages[url]
        while current.document is not None and current.document.prev_archive:
            target = current.document.prev_archive
            if target in self.chain:
                self._problem(current.url, "rfc5005.loop",
                              f"prev-archive leads back to {target}, already reached on this walk")
                return
            page = self._get(target, referrer=current.url, rel="prev-archive")
            if page is None:
                return
            self.chain.append(target)
            current = page

    def _walk_forward(self) -> None:
        """Pages reachable by next-archive are published too: fetch the ones not seen yet."""
        queue = [page.url for page in self.pages.values()]
        visited: set[str] = set()
        while queue:
            url = queue.pop()
            page = self.pages.get(url)
            if url in visited or page is None or page.document is None:
                continue
            visited.add(url)
            target = page.document.next_archive
            if (target and target not in self.pages
                    and self._get(target, referrer=url, rel="next-archive") is not None):
                queue.append(target)

    def _get(self, url: str, *, referrer: str, rel: str) -> Page | None:
        response = self._follow(url, referrer=referrer, rel=rel, code="rfc5005.unresolved")
        return None if response is None else self._accept(url, response)

    def _accept(self, url: str, response: Response) -> Page:
        """Check a document on its own; the whole page for the caller, while `pages` keeps
        only what the checks between pages need (`_kept`)."""
        try:
            document = self.parse(response.body, url, base=response.url)
        except DocumentError as error:
            self._problem(url, f"{self.format}.xml", str(error))
            document = None
        page = Page(url, response, document)
        self.pages[url] = page
        if document is not None:
            self._check_document(page, document)
        if self.http_checks:
            self._check_http(page)
        self._checked(len(document.entries) if document is not None else 0)
        self.pages[url] = self._kept(page)
        return page

    def _kept(self, page: Page) -> Page:
        """What is kept of a checked page: no body, no tree, and its entries only as rows
        on disk (unless `keeps_entries`); an archive page's hashes for --state."""
        document, response = page.document, page.response
        fingerprint = None
        if self.state_path is not None and document is not None and document.is_archive:
            fingerprint = {"content": content_hash(response.body),
                           "body": hashlib.sha256(response.body).hexdigest()}
        if document is not None and self.keeps_entries:
            document = replace(document, root=None)  # the tree, at least
        elif document is not None:
            if self.sample > 0 or self.fetch_records:
                self.rows.add(page.url, document_rows(document))
            document = document.slim()
        return Page(page.url, replace(response, body=b"", headers=NO_HEADERS), document,
                    fingerprint)

    # One document ------------------------------------------------------------------

    def parse(self, body: bytes, url: str, *, base: str) -> AtomDocument:
        return parse_document(body, url, base=base)

    def _check_document(self, page: Page, document: AtomDocument) -> None:
        """The checks of a page whose body parsed as a document (`page.document`)."""
        url = page.url
        self._check_schema(url, document.root)
        archive_links = [rel for rel in ("prev-archive", "next-archive") if document.link(rel)]
        if document.is_complete and archive_links:
            self._problem(url, "rfc5005.complete",
                          f"fh:complete beside {' and '.join(archive_links)} links")
        if document.is_archive and not document.link("current"):
            self._problem(url, "rfc5005.current", "an archive document without a current link")
        if document.updated is None:
            self._problem(url, "pmh.updated", "the document has no valid atom:updated")
        links = feed_links(document.root)
        for repeated in repeated_alternates(links):
            self._problem(url, "atom.alternates", f"the feed has {repeated} (RFC 4287 4.1.1 "
                                                  "allows one of each type and hreflang)")
        for link in links:  # the record schema in force (fetched once a run)
            if link.get("rel") == "describedby" and link.get("type") == SCHEMA_TYPE:
                self.schemas.validator(link["href"], referrer=url, rel="describedby")
        for entry in document.entries:
            label = entry.id or "(an entry without atom:id)"
            for repeated in repeated_alternates(entry.links):
                self._problem(url, "atom.alternates",
                              f"entry {label} has {repeated} (RFC 4287 4.1.2 allows one of "
                              "each type and hreflang)")
            if entry.updated is None:
                self._problem(url, "pmh.updated", f"entry {label} has no valid atom:updated")
            elif document.updated is not None and entry.updated > document.updated:
                self._problem(url, "pmh.doc-updated",
                              f"entry {label} ({timestamp_text(entry.updated)}) is newer than "
                              f"the document's updated ({timestamp_text(document.updated)})")
            self._check_entry_kind(url, entry, label)

    def _check_entry_kind(self, url: str, entry, label: str) -> None:
        """Atom-PMH: an active entry has an alternate link and no content; a deletion entry
        has no alternate link and an empty content element without src."""
        if entry.alternates:
            if entry.has_content:
                self._problem(url, "pmh.entry",
                              f"entry {label} has an alternate link and atom:content: neither an "
                              "active entry nor a deletion entry")
            return
        if not entry.has_content:
            self._problem(url, "pmh.deletion",
                          f"entry {label} has no alternate link and no atom:content")
        elif not entry.content_empty:
            what = "a src attribute" if entry.content_src else "non-empty content"
            self._problem(url, "pmh.deletion",
                          f"deletion entry {label} has {what}; its atom:content must be empty")

    def _check_schema(self, url: str, root: etree._Element) -> None:
        relaxng, schematron = _validators()
        if not relaxng.validate(root):
            for error in list(relaxng.error_log)[:MAX_SCHEMA_ERRORS]:
                self._problem(url, "atom.relaxng", f"line {error.line}: {error.message}")
        if not schematron.validate(root):
            report = schematron.validation_report
            failures = report.getroot().iterfind(
                "{http://purl.oclc.org/dsdl/svrl}failed-assert") if report is not None else []
            for failure in list(failures)[:MAX_SCHEMA_ERRORS]:
                text = " ".join("".join(failure.itertext()).split())
                self._problem(url, "atom.schematron", f"{failure.get('location')}: {text}")

    def _check_http(self, page: Page) -> None:
        url, response, document = page.url, page.response, page.document
        content_type = (response.header("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != self.media_type:
            self._problem(url, "http.content-type",
                          f"Content-Type is {content_type or 'missing'}, not {self.media_type}")
        # An ETag is required; Last-Modified is only a SHOULD (RFC 9110 8.8.2), and a server
        # may rightly leave it out while a document can still change within its second.
        if not response.header("ETag"):
            self._problem(url, "http.validators", "no ETag header")
        # Revalidated by ETag only: a date that is the newest entry's time (as the linked-
        # page rules ask) does not move when a page gains next-archive, so a server may
        # rightly refuse 304s on If-Modified-Since.
        self._check_revalidation(url, "If-None-Match", response.etag)
        self._check_head(url, response)
        cache_control = response.cache_control
        if "immutable" in cache_control and not self._may_be_immutable(document):
            self._problem(url, "http.immutable",
                          "Cache-Control immutable on a document that may still change "
                          "(only an archive page with its next-archive link is final)")
        if document is not None and response.header("Link"):
            self._check_link_header(url, response, document)

    def _may_be_immutable(self, document: AtomDocument | None) -> bool:
        """Only an archive page with its next-archive link is final."""
        return document is not None and document.is_archive and bool(document.next_archive)

    def _check_link_header(self, url: str, response: Response, document: AtomDocument) -> None:
        in_header = {pair for pair in parse_link_header(response.header("Link"), response.url)
                     if pair[0] in NAVIGATION_RELS}
        in_document = {(rel, href) for rel in NAVIGATION_RELS
                       for href in document.links.get(rel, [])}
        if not in_header:
            return
        for rel, href in sorted(in_header ^ in_document):
            where = "the Link header" if (rel, href) in in_header else "the document"
            self._problem(url, "http.link-header",
                          f"{rel} {href} is only in {where}; the Link header and the document "
                          "must name the same links")

    # Between pages -----------------------------------------------------------------

    def _check_links_between_pages(self) -> None:
        for page in self.pages.values():
            document = page.document
            if document is None:
                continue
            previous = self._document(document.prev_archive)
            if previous is not None:
                self._check_pair(older=previous, newer=document)
            following = self._document(document.next_archive)
            if following is not None and following.prev_archive != page.url:
                self._problem(following.url, "rfc5005.one-way",
                              f"{page.url} links next-archive here, but this page's prev-archive "
                              f"is {following.prev_archive or 'missing'}")
            if document.next_archive and not document.is_archive:
                self._problem(page.url, "rfc5005.next-archive",
                              "next-archive on a document that is not an archive document")

    def _check_pair(self, *, older: AtomDocument, newer: AtomDocument) -> None:
        """`newer` links prev-archive to `older`."""
        if not older.is_archive:
            self._problem(older.url, "rfc5005.archive",
                          f"reached by prev-archive from {newer.url} but has no fh:archive")
        if newer.is_archive and older.next_archive != newer.url:
            self._problem(older.url, "rfc5005.one-way",
                          f"{newer.url} links prev-archive here, but this page's next-archive "
                          f"is {older.next_archive or 'missing'}")
        if not newer.is_archive and older.next_archive:
            self._problem(newer.url, "rfc5005.one-way",
                          f"prev-archive {older.url} is not the newest archive page: it links "
                          f"next-archive to {older.next_archive}")
        newer_oldest = newer.entry_span[0] if newer.entry_span else None
        older_newest = older.entry_span[1] if older.entry_span else None
        if newer_oldest and older.updated and older.updated > newer_oldest:
            self._problem(older.url, "pmh.prev-updated",
                          f"updated {_text(older.updated)} is later than entry "
                          f"{_text(newer_oldest)} of {newer.url}, which links here")
        if newer_oldest and older_newest and older_newest > newer_oldest:
            self._problem(newer.url, "pmh.order",
                          f"entry {_text(newer_oldest)} is older than entry "
                          f"{_text(older_newest)} of the previous page {older.url}")
        if older.updated and newer.updated and older.updated > newer.updated:
            self._problem(newer.url, "pmh.order",
                          f"updated {_text(newer.updated)} is earlier than the previous page's "
                          f"{_text(older.updated)} ({older.url})")

    def _document(self, url: str | None) -> AtomDocument | None:
        page = self.pages.get(url) if url else None
        return page.document if page else None

    def _reads_records(self) -> bool:
        """Whether the alternates fetched are read as records, their JSON checked against
        the schema each names: every live record's with `fetch_records`; else the sample's
        when the feed declares a schema (a GET instead of a HEAD: an entry carries no
        metadata, and this costs no more requests)."""
        return self.fetch_records or bool(self.schemas.validators)

    def _records_read(self) -> str | None:
        if self.fetch_records:
            return None
        every = "--fetch-records reads every live record's JSON, one request a record"
        if self.sample > 0:
            return f"a sample of the live records, --sample {self.sample}; {every}"
        return f"an entry carries no metadata, and --sample is 0: {every}"

    def _check_alternates(self) -> None:
        """A sample of live records: their alternate link must resolve (Atom-PMH 4.2), and
        with a record schema their JSON must match it; with `fetch_records`, every live
        record's."""
        if self.sample <= 0 and not self.fetch_records:
            return
        reconstruction = Reconstruction()
        for url in reversed(self.chain):
            reconstruction.apply_rows(self.rows.of(url))
        live: Iterable[dict[str, Any]] = (record for record in reconstruction.live()
                                          if record.get("alternate"))
        if not self.fetch_records:
            live = reservoir(live, self.sample, random.Random(self.seed))  # noqa: S311
        for record in live:
            self._check_alternate(record)

    def _check_alternate(self, record: dict[str, Any]) -> None:
        href = record["alternate"]
        reads = self._reads_records()
        try:
            if reads:
                answer = self.client.fetch(href, headers={"Accept": "application/json"})
            else:
                answer = self.client.fetch(href, method="HEAD")
                if answer.status in (405, 501):  # HEAD not offered: ask for the document
                    answer = self.client.fetch(href)
        except RunLimitReached:
            raise
        except FetchError as error:
            self._problem(record["source"], "pmh.alternate",
                          f"entry {record['id']}: alternate {href}: {error}")
            return
        if not 200 <= answer.status < 300:
            self._problem(record["source"], "pmh.alternate",
                          f"entry {record['id']}: alternate {href} answered HTTP {answer.status}")
        elif reads:
            self._check_record_json(record, answer)

    def _check_record_json(self, record: dict[str, Any], answer: Response) -> None:
        """A record's JSON (feedpub's shape) that names its schema: its metadata must match.
        An answer in another shape (another server's page for people) names none."""
        try:
            body = json.loads(answer.body)
        except (ValueError, RecursionError):
            return
        if isinstance(body, dict) and "schema" in body:  # (the problem names its URL)
            key = body.get("key")
            label = f"record {key}" if isinstance(key, str) else f"the record of {record['id']}"
            self.schemas.check_record(body.get("metadata"), body["schema"], where=answer.url,
                                      record=label)

    # Over time ---------------------------------------------------------------------

    def _check_immutability(self) -> None:
        if self.state_path is None:
            return
        state = load_state(self.state_path, self.format)
        for page in self.pages.values():
            # (_kept gives every archive page a fingerprint when there is a state file)
            if page.document is None or not page.document.is_archive or page.fingerprint is None:
                continue
            seen = {**page.fingerprint,
                    "has_next": page.document.next_archive is not None,
                    "updated": timestamp_text(page.document.updated)}
            before = state["pages"].get(page.url)
            if before is not None and before["content"] != seen["content"]:
                self._problem(page.url, "immutability.changed",
                              "this archive page changed since an earlier check, other than by "
                              "gaining its next-archive link")
            elif before is not None and before["has_next"] and before["body"] != seen["body"]:
                self._problem(page.url, "immutability.changed",
                              "this archive page changed after it had its next-archive link")
            state["pages"][page.url] = seen
        save_state(self.state_path, state)


def reservoir(items: Iterable[Any], size: int, rng: random.Random) -> list[Any]:
    """`size` of `items` chosen uniformly, holding no more than that many at a time
    (Algorithm R): a sample of a million live records without a list of them."""
    chosen: list[Any] = []
    for seen, item in enumerate(items):
        if seen < size:
            chosen.append(item)
        elif (slot := rng.randrange(seen + 1)) < size:
            chosen[slot] = item
    return chosen


# Internal entities are expanded: C14N cannot write an entity reference, and what a page
# says is the expansion. libxml2 refuses an expansion that grows too much; nothing external.
_HASH_PARSER = etree.XMLParser(resolve_entities="internal", no_network=True,
                               remove_blank_text=True)


def content_hash(body: bytes) -> str:
    """A hash of an archive page that ignores its next-archive link (the one allowed change)
    and insignificant whitespace."""
    try:
        root = etree.fromstring(body, _HASH_PARSER)  # noqa: S320 - parser hardened
    except etree.XMLSyntaxError:
        return hashlib.sha256(body).hexdigest()
    if root.getroottree().docinfo.internalDTD is not None:
        # Under a DTD libxml2's C14N writes stray xmlns="" attributes: canonicalize the
        # document as it reads with its entities expanded, without the DTD.
        root = etree.fromstring(etree.tostring(root), _HASH_PARSER)  # noqa: S320
    # Atom's links are the feed's children, RSS's the channel's (RFC 5005 Appendix B).
    for link in root.xpath("(.|channel)/a:link[@rel='next-archive']", namespaces={"a": A[1:-1]}):
        link.getparent().remove(link)
    try:
        canonical = etree.tostring(root, method="c14n")
    except etree.C14NError:  # e.g. a relative namespace URI, which C14N 1.0 refuses
        canonical = etree.tostring(root.getroottree())
    return hashlib.sha256(canonical).hexdigest()


def load_state(path: str, kind: str) -> dict[str, Any]:
    """A checkfeed state file of what was seen of a feed in format `kind` (files from before
    linked pages say no format: they are Atom's)."""
    if not Path(path).exists():
        return {"version": STATE_VERSION, "format": kind, "pages": {}}
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        if (not isinstance(state, dict) or state.get("version") != STATE_VERSION
                or not isinstance(state.get("pages"), dict)):
            raise ValueError("not a checkfeed state file")
    except (OSError, ValueError) as error:
        raise CheckFailed(f"cannot read state file {path}: {error}") from error
    if state.setdefault("format", ATOM) != kind:
        raise CheckFailed(f"the state file {path} is for a feed in the {state['format']} "
                          f"format, not {kind}")
    return state


def save_state(path: str, state: dict[str, Any]) -> None:
    """Write, then rename: a reader never sees half a file. The temporary file's name is
    unique, so two runs saving at once cannot rename each other's (the last one wins)."""
    target = Path(path)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent,
                                     prefix=f"{target.name}.", suffix=".tmp",
                                     delete=False) as out:
        try:
            json.dump(state, out, indent=1, sort_keys=True)
        except BaseException:
            os.unlink(out.name)
            raise
    os.replace(out.name, target)


def _text(moment: datetime) -> str:
    return timestamp_text(moment) or "?"


def fetch_start(client: HttpClient, url: str) -> Response:
    """The answer of the URL a check starts from; CheckFailed if it is not a document."""
    try:
        response = client.fetch(url)
    except FetchError as error:
        raise CheckFailed(str(error)) from error
    if response.status != 200:
        raise CheckFailed(f"{url} answered HTTP {response.status}")
    return response
