"""How identifiers and instants are written in every document and in the API."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime


def rfc3339(moment: datetime) -> str:
    """The one timestamp format of documents and API: RFC 3339, UTC, with microseconds."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def record_json(*, feed_uuid: uuid.UUID, key: str, title: str, summary: str, metadata,
                links: list, created: datetime, updated: datetime, deleted: bool,
                url: str) -> dict:
    """A record as the API, its own URL and the linked-pages entities show it in JSON."""
    return {
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


def record_atom_id(feed_uuid: uuid.UUID, key: str) -> str:
    """A record's atom:id: stable, host-independent, and unique across feeds.

    It is `uuid.uuid5(feed_uuid, key).urn`, computed without building a UUID object,
    which took two thirds of the time: sealing computes one for every entry.
    """
    digest = bytearray(hashlib.sha1(feed_uuid.bytes + key.encode()).digest()[:16])  # noqa: S324
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
