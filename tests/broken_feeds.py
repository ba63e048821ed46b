"""A tiny threaded HTTP server of hand-made Atom documents, to test consumers against feeds
that break the rules (loops, one-way links, missing pages, disorder, changes, bad XML).

`FeedServer` serves whatever `documents` holds, answers conditional requests and HEAD the way
a correct server does (unless a document says otherwise), and logs every request.
`linked_feed(server, pages=3)` writes a correct archived feed that a test then breaks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape, quoteattr

ATOM_TYPE = "application/atom+xml; charset=utf-8"
IMMUTABLE = "public, max-age=31536000, immutable"
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Document:
    body: bytes
    status: int = 200
    content_type: str = ATOM_TYPE
    cache_control: str | None = "public, max-age=60"
    last_modified: datetime | None = T0
    etag: str | bool | None = None  # computed from the body unless given; False: none
    conditional: bool = True  # False: never answers 304
    extra_headers: dict[str, str] = field(default_factory=dict)
    head_headers: dict[str, str] = field(default_factory=dict)  # sent only to HEAD
    delay: float = 0.0  # seconds before answering (timeouts)
    trickle: float = 0.0  # seconds between bytes of the answer: never idle long enough for a
    trickle_body_only: bool = False  # read timeout to fire, yet never done

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": self.content_type, **self.extra_headers}
        if self.cache_control:
            headers["Cache-Control"] = self.cache_control
        if self.last_modified is not None:
            headers["Last-Modified"] = format_datetime(self.last_modified, usegmt=True)
        if self.etag is not False:
            headers["ETag"] = self.etag or '"' + hashlib.sha256(self.body).hexdigest()[:16] + '"'
        return headers


class FeedServer:
    """`with FeedServer() as server:` serves server.documents[path] on 127.0.0.1."""

    def __init__(self):
        self.documents: dict[str, Document] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                self.answer(send_body=True)

            def do_HEAD(self):  # noqa: N802
                self.answer(send_body=False)

            def answer(self, *, send_body: bool):
                server.requests.append((self.command, self.path, dict(self.headers)))
                document = server.documents.get(self.path)
                if document is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                time.sleep(document.delay)
                headers = document.headers()
                if not send_body:
                    headers.update(document.head_headers)
                status, body = document.status, document.body
                if document.conditional and status == 200 and self.not_modified(headers):
                    status, body = 304, b""
                if document.trickle:
                    self.trickle(status, headers, body if send_body else b"", document)
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if status != 304:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body and status != 304:
                    try:
                        self.wfile.write(body)
                    except (BrokenPipeError, ConnectionResetError):
                        return  # the client gave up (a size limit): as it should

            def trickle(self, status: int, headers: dict[str, str], body: bytes,
                        document: Document) -> None:
                head = f"HTTP/1.0 {status} Trickling\r\n" + "".join(
                    f"{name}: {value}\r\n" for name, value in headers.items())
                head += f"Content-Length: {len(body)}\r\n\r\n"
                at_once = len(head) if document.trickle_body_only else 1
                answer = head.encode() + body
                try:
                    self.wfile.write(answer[:at_once])
                    for offset in range(at_once, len(answer)):
                        time.sleep(document.trickle)
                        self.wfile.write(answer[offset:offset + 1])
                except OSError:  # the client gave up, as it should
                    return

            def not_modified(self, headers: dict[str, str]) -> bool:
                if "If-None-Match" in self.headers:
                    return self.headers["If-None-Match"] == headers.get("ETag")
                since = self.headers.get("If-Modified-Since")
                if since and "Last-Modified" in headers:
                    return parsedate_to_datetime(headers["Last-Modified"]) <= \
                        parsedate_to_datetime(since)
                return False

            def log_message(self, *args):  # keep test output quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def requested(self, path: str, method: str = "GET") -> int:
        return sum(1 for m, p, _ in self.requests if p == path and m == method)

    def __enter__(self) -> FeedServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


# Documents --------------------------------------------------------------------------

def entry(atom_id: str, updated: datetime, *, title: str = "A record", alternate: str | None =
          "https://records.example.org/{id}", deleted: bool = False, content: str | None = None
          ) -> str:
    """One <entry>: active (alternate link, no content) or deletion (no link, <content/>)."""
    parts = [f"<id>{escape(atom_id)}</id>", f"<title>{escape(title)}</title>",
             f"<updated>{rfc3339(updated)}</updated>"]
    if deleted:
        parts.append("<content/>")
    elif alternate:
        href = alternate.format(id=atom_id.rsplit(":", 1)[-1])
        parts.append(f'<link rel="alternate" type="application/atom+xml" href={quoteattr(href)}/>')
    if content is not None:
        parts.append(content)
    return "<entry>" + "".join(parts) + "</entry>"


def feed_document(*, updated: datetime | None, entries: list[str], links: dict[str, str],
                  archive: bool = False, complete: bool = False, extra: str = "") -> bytes:
    head = ['<?xml version="1.0" encoding="utf-8"?>',
            '<feed xmlns="http://www.w3.org/2005/Atom" '
            'xmlns:fh="http://purl.org/syndication/history/1.0">',
            "<id>urn:uuid:60a76c80-d399-11d9-b93c-0003939e0af6</id>",
            "<title>Hand-made feed</title>", "<author><name>Tests</name></author>"]
    if updated is not None:
        head.append(f"<updated>{rfc3339(updated)}</updated>")
    head += [f"<link rel={quoteattr(rel)} href={quoteattr(href)}/>" for rel, href in links.items()]
    if archive:
        head.append("<fh:archive/>")
    if complete:
        head.append("<fh:complete/>")
    return ("\n".join(head) + extra + "\n".join(entries) + "</feed>").encode()


@dataclass
class Page:
    """One page of a hand-made feed: what `publish` renders into the server."""

    path: str
    entries: list[tuple[str, datetime, bool]]  # (atom id, updated, deleted)
    prev: str | None = None
    next: str | None = None
    archive: bool = True


class LinkedFeed:
    """A correct archived feed of hand-made pages, oldest first; tests change and republish it.

    Entries are numbered across the feed: entry n is `urn:x:n`, updated at minute n.
    """

    def __init__(self, server: FeedServer, pages: int = 3, per_page: int = 2):
        self.server = server
        self.pages: list[Page] = []
        n = 0
        for number in range(1, pages + 1):
            entries = []
            for _ in range(per_page):
                n += 1
                entries.append((f"urn:x:{n}", at(n), False))
            self.pages.append(Page(f"/archives/{number}", entries))
        self.pages.append(Page("/feed", [(f"urn:x:{n + 1}", at(n + 1), False)], archive=False))
        for older, newer in zip(self.pages, self.pages[1:], strict=False):
            newer.prev = older.path
            if newer.archive:
                older.next = newer.path
        self.publish()

    @property
    def subscription(self) -> str:
        return self.server.url("/feed")

    @property
    def record_url(self) -> str:
        return self.server.url("/records/{id}")

    def publish(self) -> None:
        for page in self.pages:
            self.server.documents[page.path] = self.render(page)
            for atom_id, _, _ in page.entries:  # every record URL resolves
                path = "/records/" + atom_id.rsplit(":", 1)[-1]
                self.server.documents[path] = Document(b"<record/>", content_type="text/xml")

    def render(self, page: Page) -> Document:
        links = {"self": self.server.url(page.path), "current": self.server.url("/feed")}
        if page.prev:
            links["prev-archive"] = self.server.url(page.prev)
        if page.next:
            links["next-archive"] = self.server.url(page.next)
        updated = max((moment for _, moment, _ in page.entries), default=T0)
        body = feed_document(
            updated=updated, archive=page.archive, links=links,
            entries=[entry(atom_id, moment, deleted=deleted, alternate=self.record_url)
                     for atom_id, moment, deleted in reversed(page.entries)],
        )
        final = page.archive and page.next is not None
        return Document(body, last_modified=updated,
                        cache_control=IMMUTABLE if final else "public, max-age=60")

    def add_entries(self, *new: tuple[str, datetime, bool]) -> None:
        self.pages[-1].entries += list(new)
        self.publish()
