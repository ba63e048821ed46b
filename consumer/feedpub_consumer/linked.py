"""The linked-pages format as a consumer reads it (docs/how-it-works/linked-pages.md): pages
of multipart entities parsed by the standard library's email parser, their Link headers,
snapshot indexes, and what an entity's body makes of a record.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage, MIMEPart
from email.parser import BytesParser
from email.policy import HTTP, EmailPolicy
from email.utils import parsedate_to_datetime
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urljoin, urlsplit, urlunsplit

from .atom import parse_timestamp
from .http import Response, parse_link_header

if TYPE_CHECKING:
    pass  # the caller's progress bar, if any


ACCEPT_PAGES = "multipart/mixed, */*;q=0.1"
ACCEPT_INDEX = "application/json, */*;q=0.1"
OPERATIONS = ("PUT", "DELETE", "PATCH")
# Where a first run starts: the newest snapshot if one is found (else the oldest page), a
# snapshot or nothing, the oldest page.
AUTO, FROM_SNAPSHOT, FROM_PAGE_1 = "auto", "snapshot", "page-1"


# Pages ---------------------------------------------------------------------------------

class PageError(Exception):
    """A body that is not a well-formed multipart page."""


class _HTTPPolicy(EmailPolicy):
    """policy.HTTP, with each distinct header value parsed once: the parser asks for every
    part's Content-Type several times, and parsing it anew took 9/10 of a page's time."""

    def header_fetch_parse(self, name: str, value: str):
        return _parsed_header(name, value)


@lru_cache(maxsize=1024)
def _parsed_header(name: str, value: str):
    return HTTP.header_fetch_parse(name, value)


_POLICY = _HTTPPolicy(**{name: getattr(HTTP, name) for name in (
    "linesep", "max_line_length", "raise_on_defect", "utf8")})


@dataclass(frozen=True)
class Entity:
    """One body part: its headers as sent, and its body."""

    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((value.strip() for key, value in self.headers if key.lower() == name),
                    None)

    @property
    def content_id(self) -> str | None:
        return self.header("Content-ID") or None

    @property
    def operation(self) -> str | None:
        """PUT, DELETE or PATCH ("http-equiv=PUT" or plain "PUT"); None if missing or other."""
        value = (self.header("Operation-Type") or "").upper()
        value = value.removeprefix("HTTP-EQUIV=").strip()
        return value if value in OPERATIONS else None

    @cached_property  # asked several times an entity, and parsing a date is slow
    def last_modified(self) -> datetime | None:
        return http_date(self.header("Last-Modified"))

    @property
    def location(self) -> str | None:
        return self.header("Content-Location") or None

    @property
    def content_type(self) -> str:
        """The media type, lowercase; text/plain when none is given (RFC 2046 5.1)."""
        value = self.header("Content-Type") or "text/plain"
        return value.split(";")[0].strip().lower()


@dataclass
class Page:
    url: str  # where it was retrieved from, after redirects
    links: dict[str, str]  # rel -> the first href of that rel in the Link headers
    last_modified: datetime | None
    etag: str | None
    entities: list[Entity]

    @property
    def next(self) -> str | None:
        return self.links.get("next")


def http_date(text: str | None) -> datetime | None:
    """An HTTP date (Last-Modified) as an aware UTC datetime; None if missing or invalid."""
    try:
        moment = parsedate_to_datetime(text or "")
    except (TypeError, ValueError, IndexError):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def link_map(response: Response) -> dict[str, str]:
    """rel -> href (absolute, the first of each rel) of all of a response's Link headers."""
    links: dict[str, str] = {}
    for rel, href in parse_link_header(", ".join(response.headers.get_all("Link") or []),
                                       response.url):
        links.setdefault(rel, href)
    return links


def parse_entities(body: bytes, content_type: str) -> list[Entity]:
    """The entities of a multipart body, by the standard library's email parser (CRLF or LF
    line ends). An empty body or a lone close-delimiter holds none."""
    if not content_type.strip().lower().startswith("multipart/"):
        raise PageError(f"Content-Type is {content_type or 'missing'}, not multipart/*")
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    # An EmailPolicy's parser builds EmailMessages; the stubs type a subclass of it as a
    # policy for plain Messages.
    message = cast(EmailMessage, BytesParser(policy=_POLICY).parsebytes(head + body))
    boundary = message.get_boundary()
    if boundary is None:
        raise PageError("the multipart Content-Type has no boundary")
    if body.strip() in (b"", b"--" + boundary.encode("latin-1", "replace") + b"--"):
        return []
    defects = list(message.defects)
    if message.is_multipart():
        defects += [defect for part in message.iter_parts() for defect in part.defects]
    if defects or not message.is_multipart():
        names = ", ".join(sorted({type(defect).__name__ for defect in defects}))
        raise PageError(f"not a well-formed multipart body ({names or 'no parts'})")
    return [_entity(part) for part in message.iter_parts()]


def _entity(part: MIMEPart) -> Entity:
    body = None if part.is_multipart() else part.get_payload(decode=True)
    # Headers as sent (raw_items), not as parsed: HTTP headers know no RFC 2047 words.
    return Entity(tuple(part.raw_items()), body if isinstance(body, bytes) else b"")


def parse_page(response: Response) -> Page:
    """Raises PageError for a body that is not a multipart page."""
    entities = parse_entities(response.body, response.header("Content-Type") or "")
    return Page(response.url, link_map(response),
                http_date(response.header("Last-Modified")), response.etag, entities)


# Snapshots -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SnapshotIndex:
    url: str
    id: str
    created: datetime
    pages: list[str]
    # feedpub's hints: where the feed goes on after the snapshot (optional)
    resume_page: str | None
    resume_after: str | None


def parse_index(response: Response) -> SnapshotIndex:
    """A snapshot index (datareplication's index.schema.json: id, createdAt, pages)."""
    try:
        index = json.loads(response.body)
    except ValueError as error:
        raise PageError(f"the snapshot index is not JSON ({error})") from None
    if not isinstance(index, dict):
        raise PageError("the snapshot index is not a JSON object")
    created = parse_timestamp(index.get("createdAt") if isinstance(index.get("createdAt"), str)
                              else None)
    pages = index.get("pages")
    if created is None or not isinstance(pages, list) or "id" not in index \
            or not all(isinstance(page, str) for page in pages):
        raise PageError("the snapshot index lacks id, a createdAt date-time or its pages")
    feed = index.get("feed")
    hints = feed if isinstance(feed, dict) else {}
    resume_page, resume_after = hints.get("resumePage"), hints.get("resumeAfterContentId")
    return SnapshotIndex(
        url=response.url, id=str(index["id"]), created=created,
        pages=[urljoin(response.url, page) for page in pages],
        resume_page=urljoin(response.url, resume_page) if isinstance(resume_page, str) else None,
        resume_after=resume_after if isinstance(resume_after, str) else None,
    )


_FEEDPUB_PAGES = re.compile(r"/pages/(?:latest|\d+)$")


def snapshot_url_for(url: str) -> str | None:
    """The newest snapshot of a feed laid out as feedpub's: pages at <feed>/pages/<n> and
    <feed>/pages/latest, snapshots at <feed>/snapshots/latest. None for other URLs."""
    parts = urlsplit(url)
    if not _FEEDPUB_PAGES.search(parts.path):
        return None
    path = _FEEDPUB_PAGES.sub("/snapshots/latest", parts.path)
    return urlunsplit(parts._replace(path=path, query="", fragment=""))


# Bodies --------------------------------------------------------------------------------

def body_content(entity: Entity) -> dict[str, Any] | None:
    """What a record holds of an entity's body: "record" (JSON), "text" or "base64", with
    the media type of the latter two; None for a JSON type whose body is not JSON."""
    media_type = entity.content_type
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            return {"record": json.loads(entity.body)}
        except ValueError:
            return None
    if media_type.startswith("text/"):
        charset = _charset(entity.header("Content-Type") or "")
        return {"content_type": media_type, "text": entity.body.decode(charset, "replace")}
    return {"content_type": media_type, "base64": base64.b64encode(entity.body).decode()}


def _charset(content_type: str) -> str:
    match = re.search(r";\s*charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    name = match.group(1) if match else "utf-8"
    try:
        "".encode(name)
    except LookupError:
        return "utf-8"
    return name


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result
