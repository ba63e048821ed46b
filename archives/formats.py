"""How identifiers and instants are written in every document and in the API."""

from __future__ import annotations

import hashlib
import math
import uuid
from datetime import UTC, datetime
from email.utils import formatdate
from functools import lru_cache


@lru_cache(maxsize=4096)
def rfc3339(moment: datetime) -> str:
    """The one timestamp format of documents and API: RFC 3339, UTC, with microseconds.
    Cached: sealing writes an entry's `updated` in two of the formats it freezes."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def http_date(moment: datetime) -> str:
    """An HTTP date (RFC 9110 5.6.7, the RFC 1123 form RSS dates take too): whole seconds,
    `Tue, 03 Jun 2003 09:39:21 GMT`. Cached by the second: sealing writes one for every
    entry, twice (linked pages, RSS), and the entries of a page mostly share their second."""
    return _http_date_of(math.floor(moment.timestamp()))


@lru_cache(maxsize=1024)
def _http_date_of(second: int) -> str:
    return formatdate(second, usegmt=True)  # what django.utils.http.http_date writes


def record_json(*, feed_uuid: uuid.UUID, key: str, title: str, summary: str, metadata,
                links: list, created: datetime, updated: datetime, deleted: bool,
                url: str, schema: str | None = None, language: str = "") -> dict:
    """A record as the API, its own URL and the linked-pages entities show it in JSON;
    `schema`: the URL of the version of its feed's record schema it was checked under
    (left out when the feed had none, as before schemas existed); `language`: the record's
    own, left out when it has none (its feed's is then its language)."""
    shown = {
        "key": key,
        "atom_id": record_atom_id(feed_uuid, key),
        "title": title,
        "summary": summary,
        "metadata": metadata,
        "links": links,
        "created": rfc3339(created),
        "updated": rfc3339(updated),
        "deleted": deleted,
        "url": url,
    }
    # A key added after the first pages were sealed (`schema`; a per-record field such as a
    # language) is left out while it has no value: sealed linked pages store this JSON in
    # their bytes, and a key always written would make every stored page differ from a
    # fresh render of it (rerender_pages, checkfeed) with nothing to say why.
    # tests/test_linkedpages.py holds a record without one to the bytes sealed before.
    if schema is not None:
        shown["schema"] = schema
    if language:
        shown["language"] = language
    return shown


@lru_cache(maxsize=4096)
def record_atom_id(feed_uuid: uuid.UUID, key: str) -> str:
    """A record's atom:id: stable, host-independent, and unique across feeds.

    It is `uuid.uuid5(feed_uuid, key).urn`, computed without building a UUID object,
    which took two thirds of the time: sealing computes one for every entry, in each of
    the three formats it freezes a page in (hence the cache, which spares two of three).
    """
    digest = bytearray(hashlib.sha1(feed_uuid.bytes + key.encode()).digest()[:16])  # noqa: S324
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
