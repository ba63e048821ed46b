"""The linked-pages representation of the log (docs/how-it-works/linked-pages.md): pages whose
links are HTTP `Link` headers, each a multipart/mixed body (RFC 2046) of one entity per
entry, rendered into one `bytes`.

Linked page n holds exactly the entries of archive page n, oldest first (the newest page
what there is of its range). An entity is the same bytes wherever it appears (a page, a
snapshot): its Content-ID names its entry, forever.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote

from archives.formats import http_date, record_json
from archives.models import Entry, Feed

from .atom import EntryRow, Link, hub_link
from .urls import linked_entry_point_url, linked_page_url, record_url_prefix, schema_url

MULTIPART = "multipart/mixed"
CRLF = b"\r\n"


def content_id(feed: Feed, seq: int) -> str:
    """The Content-ID of entry `seq` of `feed`: unique within the feed, stable forever."""
    return f"<entry-{seq}@{feed.uuid}>"


def entry_seq(part: bytes) -> int:
    """The seq of the entry a body part renders, read from its Content-ID (`content_id`,
    its first header)."""
    start = part.index(b"<entry-") + len(b"<entry-")
    return int(part[start:part.index(b"@", start)])


def location_of(part: bytes) -> str:
    """A body part's Content-Location: the URL of its record."""
    return _header(part, b"Content-Location").decode()


def entity(feed: Feed, row: EntryRow, record_base: str) -> bytes:
    """One entry as a body part: its headers, a blank line, and for a PUT the record as it
    was at that entry, in the API's JSON shape (a DELETE has no body).

    Sealing renders one for every entry: the headers are one string (Content-ID,
    Operation-Type, Last-Modified, Content-Location, Content-Type, then Content-Length),
    the JSON encoder is made once. The format lists a Content-Type for every entity, a
    DELETE's (empty) too: the media type of the feed's records, which a part without one
    would not have (RFC 2046 5.1: text/plain).
    """
    location = record_base + quote(row.key, safe="")
    head = (f"Content-ID: {content_id(feed, row.seq)}\r\n"
            f"Operation-Type: http-equiv={'DELETE' if row.kind == DELETE else 'PUT'}\r\n"
            f"Last-Modified: {http_date(row.updated)}\r\n"
            f"Content-Location: {location}\r\n"
            f"Content-Type: {ENTITY_TYPE}\r\n")
    if row.kind == DELETE:
        return f"{head}Content-Length: 0\r\n\r\n".encode()
    record = record_json(feed_uuid=feed.uuid, key=row.key, title=row.title,
                         summary=row.summary, metadata=row.metadata, links=row.links,
                         created=row.created, updated=row.updated, deleted=False,
                         url=location, schema=None if row.schema_version is None
                         else schema_url(feed.slug, row.schema_version),
                         language=row.language)
    body = _as_json(record).encode()
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


ENTITY_TYPE = "application/json"  # a record, in the API's JSON shape
_ENTITY_TYPE_LINE = f"Content-Type: {ENTITY_TYPE}\r\n".encode()
_DELETION = b"\r\nOperation-Type: http-equiv=DELETE\r\n"


def deletions_typed(body: bytes) -> bool:
    """Whether the DELETE entities of a stored page carry their Content-Type. Pages sealed
    before they did have none there, and keep their bytes: a page rendered again (after a
    move, archives/log/rerendering.py) is rendered as it was sealed."""
    return all(_ENTITY_TYPE_LINE in part for part in split(body) if _DELETION in part)


DELETE = Entry.Kind.DELETE
# json.dumps(value, ensure_ascii=False, separators=(",", ":")), its encoder made once.
_as_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def render(parts: Iterable[bytes]) -> bytes:
    """A multipart/mixed body of `parts` (its Content-Type: `content_type_of`). The
    boundary is derived from the parts, so the same parts always make the same bytes, and
    checked not to occur in them (RFC 2046 5.1.1)."""
    parts = list(parts)
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    salt = 0
    while True:
        boundary = f"feedpub-{digest.hexdigest()[:24]}{salt or ''}".encode()
        if not any(boundary in part for part in parts):
            break
        salt += 1
    delimiter = b"--" + boundary
    return b"".join(delimiter + CRLF + part + CRLF for part in parts) + delimiter + b"--" + CRLF


def render_page(feed: Feed, rows: list[EntryRow], *, typed_deletions: bool = True) -> bytes:
    """A page of entries (oldest first); without `typed_deletions`, its DELETE entities
    as the pages sealed before they had one have them, with no Content-Type (`deletions_typed`)."""
    base = record_url_prefix(feed.slug)
    if typed_deletions:
        return render(entity(feed, row, base) for row in rows)
    return render(entity(feed, row, base).replace(_ENTITY_TYPE_LINE, b"", 1)
                  if row.kind == DELETE else entity(feed, row, base) for row in rows)


def split(body: bytes) -> list[bytes]:
    """The parts of a body `render` made, byte for byte (so a snapshot reuses the frozen
    entities of sealed pages instead of rendering them again)."""
    boundary = body[2:body.index(CRLF)]
    opening, closing = b"--" + boundary + CRLF, CRLF + b"--" + boundary + b"--" + CRLF
    return body[len(opening):-len(closing)].split(CRLF + b"--" + boundary + CRLF)


def last_modified_of(part: bytes) -> datetime:
    """An entity's Last-Modified (a page's is its last entity's)."""
    return parsedate_to_datetime(_header(part, b"Last-Modified").decode())


def _header(part: bytes, name: bytes) -> bytes:
    """The value of header `name` of a body part `entity` made (never its first)."""
    start = part.index(CRLF + name + b": ") + len(name) + 4
    return part[start:part.index(CRLF, start)]


def seq_of(part: bytes) -> int:
    """The seq of the entry an entity is (its Content-ID names it: `content_id`)."""
    start = part.index(b"<entry-") + len(b"<entry-")
    return int(part[start:part.index(b"@", start)])


def content_type_of(body: bytes) -> str:
    """The Content-Type of a stored page: its boundary is its first line."""
    boundary = body[2:body.index(CRLF)].decode()
    return f'{MULTIPART}; boundary="{boundary}"'


def page_links(slug: str, number: int, *, has_next: bool) -> list[Link]:
    """A page's links: its Link header, the only place the format puts them."""
    links = [Link("self", linked_page_url(slug, number))]
    if number > 1:
        links.append(Link("prev", linked_page_url(slug, number - 1)))
    if has_next:
        links.append(Link("next", linked_page_url(slug, number + 1)))
    else:  # the newest page: WebSub subscribers are told when it changes
        links.append(hub_link())
    return links


def entry_point_links(slug: str) -> list[Link]:
    """The Link header of the entry point (/pages/latest, a redirect to the newest page):
    it is the WebSub topic of the linked-pages format (rel="self"; a page's own self link
    names the page, as the format requires), and names the hub."""
    return [Link("self", linked_entry_point_url(slug)), hub_link()]
