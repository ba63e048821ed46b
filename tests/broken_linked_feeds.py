"""Hand-made linked-pages feeds (multipart pages, `Link` headers, snapshots), served by
broken_feeds.FeedServer, to test consumers against feeds that break the format's rules.

`LinkedPagesFeed(server, pages=3)` writes a correct feed that a test then breaks: pages at
/pages/<n>, /pages/latest a 302 to the newest, snapshots at /snapshots/<id>/ (the same
layout as feedpub's, so that consumers find a snapshot next to the pages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from .broken_feeds import Document, FeedServer, at, rfc3339

CRLF, LF = b"\r\n", b"\n"


@dataclass
class Entity:
    """One body part. Entity n of a feed: Content-ID <n@hand-made>, record k<n>, minute n."""

    content_id: str | None
    modified: datetime | None
    key: str | None
    operation: str | None = "http-equiv=PUT"
    body: bytes | None = None  # None: the record as JSON (nothing for a DELETE)
    content_type: str | None = "application/json"
    extra: dict[str, str] = field(default_factory=dict)

    def headers(self, server: FeedServer) -> list[tuple[str, str]]:
        headers = [("Content-ID", self.content_id), ("Operation-Type", self.operation),
                   ("Last-Modified", self.modified and _http_date(self.modified)),
                   ("Content-Location", self.key and server.url(f"/records/{self.key}"))]
        if not self.deletion:
            headers.append(("Content-Type", self.content_type))
        headers += list(self.extra.items())
        return [(name, value) for name, value in headers if value is not None]

    @property
    def deletion(self) -> bool:
        return self.operation is not None and self.operation.endswith("DELETE")

    def payload(self) -> bytes:
        if self.body is not None:
            return self.body
        if self.deletion:
            return b""
        return json.dumps({"key": self.key, "title": f"record {self.key}"}).encode()


def entity(n: int, *, key: str | None = None, minute: float | None = None,
           operation: str = "http-equiv=PUT", **kwargs) -> Entity:
    return Entity(f"<{n}@hand-made>", at(n if minute is None else minute), key or f"k{n}",
                  operation, **kwargs)


def _http_date(moment: datetime) -> str:
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


def multipart(parts: list[bytes], *, boundary: str = "hand-made-boundary",
              newline: bytes = CRLF) -> bytes:
    """A multipart body of `parts` (each headers, a blank line, a body)."""
    delimiter = b"--" + boundary.encode()
    return b"".join(delimiter + newline + part + newline for part in parts) \
        + delimiter + b"--" + newline


def part(headers: list[tuple[str, str]], body: bytes, newline: bytes = CRLF) -> bytes:
    head = b"".join(f"{name}: {value}".encode() + newline for name, value in headers)
    return head + newline + body


@dataclass
class Page:
    path: str
    entities: list[Entity]
    prev: str | None = None
    next: str | None = None
    self_link: str | bool = True  # True: its own path; False: none


class LinkedPagesFeed:
    """A correct linked-pages feed of hand-made pages, oldest first; tests change it and
    call `publish` again."""

    def __init__(self, server: FeedServer, pages: int = 3, per_page: int = 2, *,
                 newline: bytes = CRLF):
        self.server = server
        self.newline = newline
        self.pages: list[Page] = []
        n = 0
        for number in range(1, pages + 1):
            entities = [entity(n + i) for i in range(1, per_page + 1)]
            n += per_page
            self.pages.append(Page(f"/pages/{number}", entities))
        self.link()
        self.publish()

    @property
    def latest(self) -> str:
        return self.server.url("/pages/latest")

    @property
    def entities(self) -> list[Entity]:
        return [each for page in self.pages for each in page.entities]

    def link(self) -> None:
        """prev and next between consecutive pages, as a correct feed has them."""
        for older, newer in zip(self.pages, self.pages[1:], strict=False):
            older.next, newer.prev = newer.path, older.path

    def publish(self) -> None:
        for page in self.pages:
            self.server.documents[page.path] = self.render(page)
        self.server.documents["/pages/latest"] = Document(
            b"", status=302, extra_headers={"Location": self.pages[-1].path})

    def render(self, page: Page) -> Document:
        parts = [part(each.headers(self.server), each.payload(), self.newline)
                 for each in page.entities]
        links = []
        if page.self_link:
            own = page.path if page.self_link is True else page.self_link
            links.append(f'<{self.server.url(own)}>; rel="self"')
        for rel in ("prev", "next"):
            if getattr(page, rel):
                links.append(f'<{self.server.url(getattr(page, rel))}>; rel="{rel}"')
        modified = page.entities[-1].modified if page.entities else None
        return Document(
            multipart(parts, newline=self.newline), last_modified=modified,
            content_type='multipart/mixed; boundary="hand-made-boundary"',
            cache_control="public, max-age=31536000, immutable" if page.next
            else "public, max-age=60",
            extra_headers={"Link": ", ".join(links)} if links else {})

    def add_entities(self, *new: Entity) -> None:
        """Append to the newest page."""
        self.pages[-1].entities += list(new)
        self.publish()

    def add_page(self, *new: Entity) -> None:
        """A new newest page; the former one gains its next link."""
        self.pages.append(Page(f"/pages/{len(self.pages) + 1}", list(new)))
        self.link()
        self.publish()

    def snapshot(self, upto: int, *, created: datetime, hints: dict | None = None,
                 snapshot_id: str = "s1", per_page: int = 2) -> str:
        """A snapshot of the records as of entity `upto` (PUTs of the live ones), at
        /snapshots/<id>/ and /snapshots/latest; its index URL."""
        live: dict[str, Entity] = {}
        for each in self.entities[:upto]:
            if each.deletion:
                live.pop(each.key, None)
            else:
                live[each.key] = each
        records = list(live.values())
        base = f"/snapshots/{snapshot_id}"
        pages = []
        for start in range(0, len(records), per_page):
            path = f"{base}/pages/{len(pages) + 1}"
            parts = [part(each.headers(self.server), each.payload(), self.newline)
                     for each in records[start:start + per_page]]
            self.server.documents[path] = Document(
                multipart(parts, newline=self.newline),
                content_type='multipart/mixed; boundary="hand-made-boundary"',
                last_modified=records[start:start + per_page][-1].modified)
            pages.append(self.server.url(path))
        index = {"id": snapshot_id, "createdAt": rfc3339(created), "pages": pages}
        if hints is not None:
            index["feed"] = hints
        self.server.documents[f"{base}/"] = Document(json.dumps(index).encode(),
                                                     content_type="application/json")
        self.server.documents["/snapshots/latest"] = Document(
            b"", status=302, extra_headers={"Location": f"{base}/"})
        return self.server.url(f"{base}/")

    def records(self) -> dict[str, str]:
        """Record URL -> title of the live records, as applying every entity gives them."""
        live: dict[str, str] = {}
        for each in self.entities:
            url = self.server.url(f"/records/{each.key}")
            if each.deletion:
                live.pop(url, None)
            else:
                live[url] = json.loads(each.payload())["title"]
        return live
