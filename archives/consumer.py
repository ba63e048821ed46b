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
`harvest` also reads the linked-pages format (archives/linkedconsumer.py, built on this
module), told apart by its multipart Content-Type.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import socket
import sqlite3
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from functools import partial
from http.client import HTTPException
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO
from urllib.parse import urljoin, urlsplit

from lxml import etree

if TYPE_CHECKING:
    from tqdm import tqdm  # the caller's progress bar, if any

ATOM_NS = "http://www.w3.org/2005/Atom"
FH_NS = "http://purl.org/syndication/history/1.0"
A = f"{{{ATOM_NS}}}"
FH = f"{{{FH_NS}}}"
USER_AGENT = "feedpub-consumer/0.1 (+RFC 5005 harvester)"
STATE_VERSION = 2  # 1 was a JSON file, converted when met
STATE_LOCK_WAIT = 5.0  # seconds a run waits for another one to release the state file
MISSING_STATUSES = (403, 404, 410)  # RFC 5005 4.1: a publisher may refuse or lose archives
EPOCH = datetime.min.replace(tzinfo=UTC)
ATOM, LINKED_PAGES = "atom", "linked-pages"  # the formats `harvest` reads


# Limits and HTTP -------------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What one run may spend (RFC 5005 section 6: feeds can be crafted to never end)."""

    max_requests: int = 10_000
    max_bytes: int = 20 * 1024 * 1024  # per document, after decompression
    timeout: float = 30.0  # seconds for a whole fetch: connect, headers, body, redirects
    deadline: float | None = None  # seconds for the whole run (from the client's creation)


class FetchError(Exception):
    """A document could not be fetched: network error, timeout, too large, bad URL."""


class RunLimitReached(FetchError):
    """The run has spent its requests or its time: no later fetch will succeed."""


class RequestBudgetExceeded(RunLimitReached):
    """The run has made its maximum number of requests."""


class RunDeadlineExceeded(RunLimitReached):
    """The run's deadline has passed."""


@dataclass
class Response:
    url: str  # after redirects
    status: int
    headers: Message
    body: bytes
    seconds: float

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def etag(self) -> str | None:
        return self.header("ETag")

    @property
    def last_modified(self) -> str | None:
        return self.header("Last-Modified")

    @property
    def cache_control(self) -> dict[str, str | None]:
        return cache_directives(self.header("Cache-Control"))


def is_multipart(response: Response) -> bool:
    """A linked-pages page (multipart/*), not an Atom document."""
    content_type = response.header("Content-Type") or ""
    return content_type.strip().lower().startswith("multipart/")


def cache_directives(value: str | None) -> dict[str, str | None]:
    """`Cache-Control: public, max-age=60` -> {"public": None, "max-age": "60"}."""
    directives: dict[str, str | None] = {}
    for part in (value or "").split(","):
        name, _, argument = part.strip().partition("=")
        if name:
            directives[name.lower()] = argument.strip('"') if argument else None
    return directives


_LINK_VALUE = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]+)*)")
_LINK_PARAM = re.compile(r";\s*([^=;\s]+)\s*=\s*(\"[^\"]*\"|[^;,\s]+)")


def parse_link_header(value: str | None, base: str) -> list[tuple[str, str]]:
    """(rel, absolute href) pairs of an RFC 8288 Link header; a rel list gives one pair each."""
    pairs = []
    for match in _LINK_VALUE.finditer(value or ""):
        try:
            href = urljoin(base, match.group(1).strip())
        except ValueError:  # not a URL: it cannot match the document's links either
            href = match.group(1).strip()
        for name, raw in _LINK_PARAM.findall(match.group(2)):
            if name.lower() == "rel":
                pairs += [(rel, href) for rel in raw.strip('"').split()]
    return pairs


class _NoRedirectErrors(urllib.request.HTTPErrorProcessor):
    """Hand every status back as a response: 304, 404 and 410 are answers, not errors."""

    def http_response(self, request, response):
        if response.status in (301, 302, 303, 307, 308):
            return super().http_response(request, response)  # let the redirect handler act
        return response

    https_response = http_response


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to http(s) URLs only (urllib would also follow one to ftp://).

    To any host: a publisher may move its archive pages to a CDN, and a feed's links can
    name any host anyway, so refusing other hosts here would protect nothing.
    """

    def http_error_302(self, req, fp, code, msg, headers):
        target = urljoin(req.full_url, headers.get("Location") or headers.get("URI") or "")
        if urlsplit(target).scheme.lower() not in ("http", "https"):
            fp.close()
            raise FetchError(f"refusing the redirect from {req.full_url} to {target}: only "
                             "http and https are followed")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        redirected = super().redirect_request(req, fp, code, msg, headers, newurl)
        if redirected is not None and req.get_method() == "HEAD":
            redirected.method = "HEAD"  # urllib before Python 3.12 follows a HEAD with a GET
        return redirected


class _Deadline:
    """Cuts the connections of one fetch when its time is up.

    A socket timeout bounds each read, so a server sending a byte a second would hold a
    fetch for ever; shutting its sockets from a timer bounds the whole fetch.
    """

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        """Watch a socket (urllib drops the connection's reference once the headers are in)."""
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:  # it expired while the connection was being made
            _cut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    """Wake a read blocked on this socket (shutdown, unlike close, is safe across threads;
    a socket closed since has no descriptor left, so this can never hit another one)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # also under TLS


class _WatchedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()  # the TCP connect itself is bounded by the socket timeout
        self.deadline.watch(self.sock)


class _WatchedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(
            self.sock, server_hostname=self._tunnel_host or self.host,
            do_handshake_on_connect=False)
        self.deadline.watch(self.sock)  # before the handshake, which can be trickled too
        self.sock.do_handshake()


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, client: HttpClient):
        super().__init__()
        self.client = client

    def http_open(self, req):
        return self.do_open(
            partial(_WatchedHTTPConnection, deadline=self.client.fetch_deadline), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, client: HttpClient):
        super().__init__()
        self.client = client

    def https_open(self, req):
        return self.do_open(
            partial(_WatchedHTTPSConnection, deadline=self.client.fetch_deadline), req,
            context=self._context)


class HttpClient:
    """urllib with a request budget, deadlines, a size limit, gzip, and request accounting."""

    def __init__(self, limits: Limits | None = None, *, user_agent: str = USER_AGENT):
        self.limits = limits or Limits()
        self.user_agent = user_agent
        self.requests = 0
        self.bytes_received = 0
        self.log: list[tuple[str, str, int]] = []  # (method, url, status) of every request
        self.fetch_deadline = _Deadline(self.limits.timeout)  # the current fetch's
        self._run_ends = (None if self.limits.deadline is None
                          else time.monotonic() + self.limits.deadline)
        self._opener = urllib.request.build_opener(
            _NoRedirectErrors(), _HttpOnlyRedirects(), _WatchedHTTPHandler(self),
            _WatchedHTTPSHandler(self))

    def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
              max_bytes: int | None = None) -> Response:
        try:
            scheme = urlsplit(url).scheme
        except ValueError as error:  # e.g. "http://[oops": a link that is not a URL
            raise FetchError(f"refusing to fetch {url!r}: not a URL ({error})") from None
        if scheme not in ("http", "https"):
            raise FetchError(f"refusing to fetch {url!r}: only http and https URLs are followed")
        if self.requests >= self.limits.max_requests:
            raise RequestBudgetExceeded(
                f"request budget of {self.limits.max_requests} spent before {url}")
        seconds, by_run = self._seconds_for(url)
        self.requests += 1
        request = urllib.request.Request(url, method=method, headers={  # noqa: S310 - checked above
            "User-Agent": self.user_agent,
            "Accept": "application/atom+xml, application/xml;q=0.9, */*;q=0.1",
            "Accept-Encoding": "gzip",
            **(headers or {}),
        })
        started = time.monotonic()
        self.fetch_deadline = _Deadline(seconds)
        try:
            with self.fetch_deadline, self._opener.open(request, timeout=seconds) as answer:
                body = self._read(answer, url, max_bytes or self.limits.max_bytes)
                if self.fetch_deadline.expired:  # the body may have been cut short
                    raise TimeoutError
                status, final_url, answer_headers = answer.status, answer.geturl(), answer.headers
        except urllib.error.HTTPError as error:  # raised for too many redirects and the like
            status, final_url, answer_headers, body = error.code, url, error.headers, b""
        except (FetchError, urllib.error.URLError, HTTPException, OSError, ValueError) as error:
            self.log.append((method, url, 0))
            reason = getattr(error, "reason", None) or error
            if self.fetch_deadline.expired or isinstance(reason, TimeoutError):
                raise self._timed_out(url, seconds, by_run) from error
            if isinstance(error, FetchError):
                raise
            raise FetchError(f"could not fetch {url}: {reason}") from error
        self.log.append((method, url, status))
        return Response(final_url, status, answer_headers, body, time.monotonic() - started)

    def _seconds_for(self, url: str) -> tuple[float, bool]:
        """Seconds the next fetch may take, and whether the run's deadline is what limits it."""
        if self._run_ends is None:
            return self.limits.timeout, False
        left = self._run_ends - time.monotonic()
        if left <= 0:
            raise RunDeadlineExceeded(
                f"the run deadline of {self.limits.deadline:g} s passed before {url}")
        return min(left, self.limits.timeout), left < self.limits.timeout

    def _timed_out(self, url: str, seconds: float, by_run: bool) -> FetchError:
        if by_run:
            return RunDeadlineExceeded(f"could not fetch {url}: timed out: the run deadline of "
                                       f"{self.limits.deadline:g} s passed")
        return FetchError(f"could not fetch {url}: timed out after {seconds:g} s")

    def _read(self, answer, url: str, max_bytes: int) -> bytes:
        length = answer.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"{url} is {length} bytes, more than the limit of {max_bytes}")
        raw = answer.read(max_bytes + 1)
        self.bytes_received += len(raw)
        if (answer.headers.get("Content-Encoding") or "").lower() == "gzip":
            decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                raw = decompressor.decompress(raw, max_bytes + 1)
            except zlib.error as error:
                raise FetchError(f"{url}: bad gzip body ({error})") from error
        if len(raw) > max_bytes:
            raise FetchError(f"{url} is larger than the limit of {max_bytes} bytes")
        return raw


# Atom documents ------------------------------------------------------------------------

class DocumentError(Exception):
    """A body that is not a well-formed Atom feed document."""


@dataclass(frozen=True)
class AtomEntry:
    id: str
    updated: datetime | None
    title: str
    summary: str
    links: tuple[dict[str, str], ...]
    has_content: bool
    content_empty: bool  # no text, no child elements and no src
    content_src: str | None

    @property
    def alternates(self) -> list[str]:
        # RFC 4287 4.2.7.2: a link without rel is an alternate link.
        return [link["href"] for link in self.links if link.get("rel", "alternate") == "alternate"]

    @property
    def is_deletion(self) -> bool:
        """Atom-PMH deletion entry: no alternate link and an empty content element."""
        return not self.alternates and self.has_content and self.content_empty


@dataclass
class AtomDocument:
    url: str
    root: etree._Element
    id: str | None
    updated: datetime | None
    links: dict[str, list[str]]
    is_archive: bool
    is_complete: bool
    entries: list[AtomEntry]

    def link(self, rel: str) -> str | None:
        hrefs = self.links.get(rel)
        return hrefs[0] if hrefs else None

    @property
    def prev_archive(self) -> str | None:
        return self.link("prev-archive")

    @property
    def next_archive(self) -> str | None:
        return self.link("next-archive")


# Documents come from strangers: no network, no giant trees, no external entities. Internal
# entities (declared in the document) are expanded, as XML requires; libxml2 refuses an
# expansion that grows too much (the "billion laughs").
_PARSER = etree.XMLParser(resolve_entities="internal", no_network=True, huge_tree=False)


def parse_document(body: bytes, url: str, *, base: str | None = None) -> AtomDocument:
    """Parse an Atom feed document; link hrefs are made absolute (xml:base, then `base`).

    `url` names the document (the link that led to it); `base` is the URL it was retrieved
    from after redirects, against which RFC 3986 (5.1.3) resolves relative references.
    """
    try:
        root = etree.fromstring(body, _PARSER, base_url=base or url)  # noqa: S320 - hardened
    except etree.XMLSyntaxError as error:
        raise DocumentError(f"not well-formed XML: {error}") from None
    if root.tag != f"{A}feed":
        raise DocumentError(f"the root element is {root.tag!r}, not an Atom feed")
    links: dict[str, list[str]] = {}
    for rel, href in _links(root):
        links.setdefault(rel, []).append(href)
    entries = [_entry(element) for element in root.iterfind(f"{A}entry")]
    return AtomDocument(
        url=url, root=root, id=_child_text(root, "id"),
        updated=parse_timestamp(_child_text(root, "updated")), links=links,
        is_archive=root.find(f"{FH}archive") is not None,
        is_complete=root.find(f"{FH}complete") is not None, entries=entries,
    )


def _links(element: etree._Element) -> Iterable[tuple[str, str]]:
    for link in element.iterfind(f"{A}link"):
        href = link.get("href")
        if href is not None:
            yield link.get("rel", "alternate"), _absolute(link, href)


# Most hrefs are absolute http(s) URLs that urljoin would hand back unchanged; skipping it
# halves the time a page takes to read.
_PLAIN_ABSOLUTE = re.compile(r"https?://[^/?#\s[\];][^?#\s[\];]*(?:\?[^#\s]+)?(?:#\S+)?\Z")


def _absolute(link: etree._Element, href: str) -> str:
    """`href` resolved against the link's base: xml:base, else the document's URL."""
    href = href.strip()
    if _PLAIN_ABSOLUTE.match(href):
        return href
    try:
        return urljoin(link.base or "", href)
    except ValueError as error:  # e.g. "http://[oops": an unbalanced IPv6 bracket
        raise DocumentError(f"the link {href!r} is not a URL ({error})") from None


_ENTRY_TEXTS = {f"{A}id", f"{A}updated", f"{A}title", f"{A}summary"}


def _entry(element: etree._Element) -> AtomEntry:
    # One pass over the children: a find() per field cost more than parsing the page.
    texts: dict[str, str] = {}
    links = []
    content = None
    for child in element:
        if child.tag == f"{A}link" and child.get("href") is not None:
            links.append(_link(child))
        elif child.tag == f"{A}content" and content is None:
            content = child
        elif child.tag in _ENTRY_TEXTS and child.tag not in texts:
            texts[child.tag] = child.text or "" if len(child) == 0 else "".join(child.itertext())
    return AtomEntry(
        id=texts.get(f"{A}id", "").strip(),
        updated=parse_timestamp(texts.get(f"{A}updated")),
        title=texts.get(f"{A}title", ""),
        summary=texts.get(f"{A}summary", ""),
        links=tuple(links),
        has_content=content is not None,
        content_empty=content is not None and not (content.text or "").strip()
        and len(content) == 0 and content.get("src") is None,
        content_src=content.get("src") if content is not None else None,
    )


def _link(link: etree._Element) -> dict[str, str]:
    attributes = {name: value for name in ("rel", "type", "title") if (value := link.get(name))}
    attributes["href"] = _absolute(link, link.get("href"))
    return attributes


def _child_text(element: etree._Element, name: str) -> str | None:
    child = element.find(f"{A}{name}")
    return None if child is None else "".join(child.itertext())


_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$"
)


def parse_timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 date-time as an aware UTC datetime (fraction cut to microseconds)."""
    match = _RFC3339.match((text or "").strip().upper())
    if not match:
        return None
    day, clock, fraction, zone = match.groups()
    fraction = (fraction or "0")[:6].ljust(6, "0")
    zone = "+00:00" if zone == "Z" else zone
    try:
        return datetime.fromisoformat(f"{day}T{clock}.{fraction}{zone}").astimezone(UTC)
    except ValueError:
        return None


def timestamp_text(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Reconstruction ------------------------------------------------------------------------

# What the reconstruction keeps of an entry: (atom id, updated, document's updated, deleted,
# the record as JSON). Compact, and no tree: the pages are gone once their rows exist.
Row = tuple[str, str, str, bool, str]


def document_rows(document: AtomDocument) -> list[Row]:
    """A document's entries as rows, in the order they are applied: oldest first."""
    doc_updated = timestamp_text(document.updated) or ""
    entries = sorted(document.entries, key=lambda e: e.updated or EPOCH)
    return [_row(entry, doc_updated, document.url) for entry in entries if entry.id]


def _row(entry: AtomEntry, doc_updated: str, source: str) -> Row:
    updated = timestamp_text(entry.updated) or ""
    deleted = entry.is_deletion
    record = {"id": entry.id, "updated": updated, "doc_updated": doc_updated,
              "deleted": deleted, "title": entry.title, "source": source}
    if not deleted:
        alternates = entry.alternates
        record.update(summary=entry.summary, alternate=alternates[0] if alternates else None,
                      links=list(entry.links))
    return entry.id, updated, doc_updated, deleted, json.dumps(record)


def _connect(path: str | os.PathLike | None) -> sqlite3.Connection:
    """A SQLite connection in autocommit mode (transactions are explicit); no path: a private
    temporary database on disk, deleted when the connection closes."""
    db = sqlite3.connect("" if path is None else path, isolation_level=None,
                         timeout=STATE_LOCK_WAIT)
    db.execute("PRAGMA temp_store = FILE")  # the staged pages: on disk, not in memory
    return db


class RecordStore:
    """The winning entry of every atom:id (live records and tombstones), in SQLite.

    On disk, not in memory: a feed of a million entries has up to a million records, about
    a kilobyte each as Python objects. SQLite keeps a bounded cache of them in memory.
    """

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, updated TEXT NOT "
                   "NULL, doc_updated TEXT NOT NULL, deleted INTEGER NOT NULL, record TEXT NOT "
                   "NULL)")
        # live(): the live records, oldest update first, read in index order.
        db.execute("CREATE INDEX IF NOT EXISTS records_live ON records (deleted, updated, id)")

    @classmethod
    def temporary(cls) -> RecordStore:
        return cls(_connect(None))

    def current(self, atom_id: str) -> tuple[str, str, str] | None:
        """(updated, document's updated, record as JSON) of the entry that won so far."""
        return self.db.execute("SELECT updated, doc_updated, record FROM records WHERE id = ?",
                               (atom_id,)).fetchone()

    def put(self, row: Row) -> None:
        self.db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?)", row)

    def clear(self) -> None:
        self.db.execute("DELETE FROM records")

    def live(self) -> Iterator[dict[str, Any]]:
        """The live records, oldest update first; without the bookkeeping fields."""
        for (text,) in self.db.execute(
                "SELECT record FROM records WHERE deleted = 0 ORDER BY updated, id"):
            record = json.loads(text)
            del record["doc_updated"], record["deleted"]
            yield record

    def count_live(self) -> int:
        return self.db.execute("SELECT count(*) FROM records WHERE deleted = 0").fetchone()[0]


class Reconstruction:
    """The logical feed: per atom:id the winning entry (live records and tombstones).

    Tombstones are kept so that an older copy of a deleted entry, met later (a page that
    was missing on an earlier run), can never bring the record back.
    """

    def __init__(self, records: RecordStore | None = None):
        self.records = records if records is not None else RecordStore.temporary()
        self.applied = 0
        self.deletions = 0
        self.changed = 0

    def apply(self, document: AtomDocument) -> None:
        """Apply one document's entries, oldest first (documents must come oldest first)."""
        self.apply_rows(document_rows(document))

    def apply_rows(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self._apply_row(row)

    def reset(self) -> None:
        """An fh:complete document holds the whole feed: forget everything else."""
        self.records.clear()

    def _apply_row(self, row: Row) -> None:
        _, updated, doc_updated, deleted, record = row
        self.applied += 1
        current = self.records.current(row[0])
        # Section 4.2: newest atom:updated wins; on a tie the more recently updated document
        # (>=: documents are applied oldest first, so the later one is nearer the present).
        if current is not None and (updated, doc_updated) < current[:2]:
            return
        if deleted:
            self.deletions += 1
        if current is None or _content(record) != _content(current[2]):
            self.changed += 1
        self.records.put(row)

    def live(self) -> Iterator[dict[str, Any]]:
        """The live records, oldest update first; without the bookkeeping fields."""
        return self.records.live()


def _content(record: str) -> dict[str, Any]:
    """A record without where it was read from: the same entry met on another page is
    no change."""
    content = json.loads(record)
    del content["doc_updated"], content["source"]
    return content


class StagedPages:
    """The pages of one walk, newest first as they are read, reduced to their rows and kept
    on disk (a temporary table) until the walk ends and they can be applied oldest first."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.pages = 0
        db.execute("CREATE TEMP TABLE IF NOT EXISTS staged (page INTEGER, position INTEGER, "
                   "id, updated, doc_updated, deleted, record, PRIMARY KEY (page, position))")
        db.execute("DELETE FROM staged")

    def add(self, rows: list[Row]) -> None:
        self.pages += 1
        page = -self.pages  # so that ascending order is oldest first
        self.db.executemany("INSERT INTO staged VALUES (?, ?, ?, ?, ?, ?, ?)",
                            ((page, position, *row) for position, row in enumerate(rows)))

    def oldest_first(self, *, first_page_only: bool = False) -> Iterator[Row]:
        return self.db.execute("SELECT id, updated, doc_updated, deleted, record FROM staged "
                               "WHERE page >= ? ORDER BY page, position",
                               (-1 if first_page_only else -self.pages,))


# State ---------------------------------------------------------------------------------

class StateError(Exception):
    """The state file cannot be used."""


def open_state(path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """The state file at `path`, created if missing (None: a temporary one), in a transaction
    that holds its write lock for the run.

    Not JSON: the records of a large feed do not fit in memory. A run is one transaction: a
    run killed half-way leaves the previous state whole, and a second run on the same file
    waits a few seconds, then gives up.
    """
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _import_json_state(Path(path))
    db = _connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    except BaseException as error:
        db.close()
        if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
            raise StateError(f"the state file {path} is in use by another run") from error
        if isinstance(error, (sqlite3.DatabaseError, ValueError)):
            raise StateError(f"cannot read state file {path}: {error}") from error
        raise
    return db


def read_meta(db: sqlite3.Connection, *, kind: str) -> dict[str, str]:
    """A state's meta table, checked to be of this version and for a feed of format `kind`
    (files from before linked pages say no format: they are Atom's)."""
    meta = dict(db.execute("SELECT key, value FROM meta"))
    stored = meta.get("format", ATOM) if meta else kind
    if meta.setdefault("version", str(STATE_VERSION)) != str(STATE_VERSION):
        raise StateError(f"unknown state version {meta['version']!r}")
    if stored != kind:
        raise StateError(f"the state file is for a feed in the {stored} format, not {kind}")
    return meta


def state_format(db: sqlite3.Connection) -> str | None:
    """The format of the feed a state file is for; None for a new file."""
    meta = dict(db.execute("SELECT key, value FROM meta"))
    return meta.get("format", ATOM) if meta else None


class HarvestState:
    """What an Atom harvester keeps between runs, in one SQLite file (see `open_state`)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        meta = read_meta(db, kind=ATOM)
        # Archive pages applied on an earlier run: never fetched again.
        db.execute("CREATE TABLE IF NOT EXISTS pages (url TEXT PRIMARY KEY, info TEXT NOT NULL)")
        self.records = RecordStore(db)
        self.subscription: str | None = meta.get("subscription") or None
        self.validators: dict[str, str] = json.loads(meta.get("validators", "{}"))
        self.pending: list[str] = json.loads(meta.get("pending", "[]"))  # gaps to read again

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> HarvestState:
        """The state in `path`, created if missing (None: a temporary one), locked for a run."""
        db = open_state(path)
        try:
            return cls(db)
        except BaseException:
            db.close()
            raise

    def is_processed(self, url: str) -> bool:
        return self.db.execute("SELECT 1 FROM pages WHERE url = ?", (url,)).fetchone() is not None

    def mark_processed(self, url: str, info: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO pages VALUES (?, ?)", (url, json.dumps(info)))

    def save(self) -> None:
        """Commit the run (and release the file)."""
        meta = {"version": str(STATE_VERSION), "format": ATOM,
                "subscription": self.subscription or "",
                "validators": json.dumps(self.validators), "pending": json.dumps(self.pending)}
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close, dropping what was not saved."""
        self.db.close()


def _import_json_state(path: Path) -> None:
    """Turn a state file of version 1 (JSON) into a SQLite one, in place."""
    try:
        with path.open("rb") as existing:
            header = existing.read(16)
    except FileNotFoundError:
        return
    if not header or header == b"SQLite format 3\x00":
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != 1:
            raise ValueError(f"unknown state version {data.get('version')!r}")
    except (OSError, ValueError, AttributeError) as error:
        raise StateError(f"cannot read state file {path}: {error}") from error
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp",
                                     delete=False) as temporary:
        pass  # an empty file is an empty SQLite database
    try:
        _write_json_state(data, temporary.name)
    except BaseException as error:
        os.unlink(temporary.name)
        if isinstance(error, (ValueError, KeyError, TypeError, AttributeError)):
            raise StateError(f"cannot read state file {path}: {error!r}") from error
        raise
    os.replace(temporary.name, path)


def _write_json_state(data: dict[str, Any], path: str) -> None:
    state = HarvestState.load(path)  # an empty file: a new state
    try:
        state.subscription, state.validators = data["subscription"], data["validators"]
        state.pending = data["pending"]
        for url, info in data["processed"].items():
            state.mark_processed(url, info)
        for record in data["records"].values():
            state.records.put((record["id"], record["updated"], record["doc_updated"],
                               record["deleted"], json.dumps(record)))
        state.save()
    finally:
        state.close()


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


class Harvester:
    """One run: revalidate the subscription, walk back to known ground, apply oldest first."""

    def __init__(self, *, state: HarvestState | None = None, client: HttpClient | None = None,
                 progress: tqdm | None = None, warn: Callable[[str], None] | None = None):
        self.state = state or HarvestState.load()
        self.client = client or HttpClient()
        self.progress = progress
        self.warnings: list[str] = []
        self._warn_hook = warn
        self.summary = Summary()

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
        show_progress(self.progress, self.summary, self.client)
        summary = self.summary
        meter.fill(summary, self.client)
        summary.complete = not self.state.pending
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

    def _apply(self, staged: StagedPages, *, complete: bool) -> None:
        reconstruction = Reconstruction(self.state.records)
        if complete:
            # fh:complete: this one document is the whole logical feed (Atom-PMH 4.3).
            reconstruction.reset()
        reconstruction.apply_rows(staged.oldest_first(first_page_only=complete))
        self.summary.entries_applied += reconstruction.applied
        self.summary.deletions += reconstruction.deletions
        self.summary.records_changed += reconstruction.changed

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self._warn_hook:
            self._warn_hook(message)


def harvest(url: str, *, state_path: str | os.PathLike | None = None,
            limits: Limits | None = None, progress: tqdm | None = None,
            client: HttpClient | None = None, warn: Callable[[str], None] | None = None,
            format: str | None = None, snapshot: str | None = None,
            start: str = "auto") -> HarvestResult:
    """Harvest the feed at `url`, updating the state file if one is given.

    `url` is an Atom subscription document or a linked-pages entry point (see
    archives/linkedconsumer.py, which also explains `snapshot` and `start`). The
    format is the state file's, else `format`, else told by the first answer's Content-Type.
    `progress`: a tqdm bar the caller shows, brought to the pages fetched as they come.

    Raises HarvestFailed when the feed cannot be read at all, StateError when the state file
    cannot be used; every other problem is a warning in the result. The result's records are
    read from the state (a temporary one without `state_path`) as they are iterated.
    """
    if format not in (None, ATOM, LINKED_PAGES):
        raise ValueError(f"unknown format {format!r}")
    db = open_state(state_path)
    try:
        client = client or HttpClient(limits)
        meter, stored, first = Meter.start(client), state_format(db), None
        if stored is not None and format not in (None, stored):
            raise StateError(f"the state file is for a feed in the {stored} format, "
                             f"not {format}")
        kind = stored or format
        if kind is None:  # one GET tells; the harvester goes on with its answer
            try:
                first = client.fetch(url)
            except FetchError as error:
                raise HarvestFailed(str(error)) from error
            kind = LINKED_PAGES if is_multipart(first) else ATOM
        if kind == LINKED_PAGES:
            from . import linkedconsumer  # built on this module: imported when needed

            state = linkedconsumer.LinkedState(db)
            result = linkedconsumer.LinkedHarvester(
                state=state, client=client, progress=progress, warn=warn,
            ).run(url, first=first, meter=meter, snapshot=snapshot, start=start)
        else:
            state = HarvestState(db)
            result = Harvester(state=state, client=client, progress=progress,
                               warn=warn).run(url, first=first, meter=meter)
        state.save()
    except BaseException:
        db.close()
        raise
    return result


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
