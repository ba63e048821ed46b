"""A record's history on its admin page: its entries newest first, a page at a time, each with
who made it and what it changed from the version before (fields, and metadata by path:
`creators/0`), old and new. Staff only: nothing of it is published."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator

from archives.models import Entry, Record

PER_PAGE = 20
# The fields whose change a history row shows, in the order it shows them (metadata last:
# one line per path).
COMPARED = ("title", "summary", "language", "links")
UNKNOWN_ACTOR = "unknown actor"


@dataclass(frozen=True)
class Change:
    name: str  # a field, or "metadata/<path>"
    old: str | None  # a text as it is, else as JSON (a "1" and a 1 differ); None: absent
    new: str | None


@dataclass(frozen=True)
class Row:
    entry: Entry
    changes: list[Change]
    metadata_unknown: bool  # an entry written before metadata was kept (its changes unknown)
    current: bool  # the version the record has now


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _shown(value: Any) -> str:
    """A field's value: a text as it is, links as JSON."""
    return value if isinstance(value, str) else _json(value)


def paths(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Each leaf of a JSON value by its path (`creators/0/name`; a "/" or "~" in a name
    escaped as JSON Pointer does); an empty object or array is a leaf."""
    if isinstance(value, dict) and value:
        for name, item in value.items():
            step = str(name).replace("~", "~0").replace("/", "~1")
            yield from paths(item, f"{prefix}/{step}" if prefix else step)
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from paths(item, f"{prefix}/{index}" if prefix else str(index))
    else:
        yield prefix, value


def changes(before: Entry | None, after: Entry) -> list[Change]:
    """What `after` changed from `before` (None: everything it has is new)."""
    found = []
    for name in COMPARED:
        old = getattr(before, name) if before is not None else None
        new = getattr(after, name)
        if old != new and not (before is None and new in ("", [])):
            found.append(Change(name, None if before is None else _shown(old), _shown(new)))
    if after.metadata is None or (before is not None and before.metadata is None):
        return found
    old_paths = dict(paths(before.metadata)) if before is not None else {}
    new_paths = dict(paths(after.metadata))
    for path in sorted(old_paths.keys() | new_paths.keys()):
        old, new = old_paths.get(path, _ABSENT), new_paths.get(path, _ABSENT)
        if old != new or type(old) is not type(new):  # (1 and true, 1 and 1.0 differ)
            found.append(Change(f"metadata/{path}" if path else "metadata",
                                None if old is _ABSENT else _json(old),
                                None if new is _ABSENT else _json(new)))
    return found


_ABSENT = object()


def history_page(record: Record, number: Any) -> tuple[Page, list[Row]]:
    """The page `number` of the record's entries, newest first (a bad number: the first or
    last page), as rows: three queries, however long the history (the count, the page and
    the version before its oldest)."""
    entries = record.entries.order_by("-seq")
    page = Paginator(entries, PER_PAGE).get_page(number)
    listed: list[Entry] = list(page.object_list)
    rows: list[Row] = []
    if not listed:
        return page, rows
    # Each version is compared with the nearest older one that is not a deletion (what a
    # create after a deletion brought back, or changed).
    older = entries.filter(seq__lt=listed[-1].seq).exclude(kind=Entry.Kind.DELETE).first()
    newest = page.number == 1 and not record.is_deleted
    for index, entry in reversed(list(enumerate(listed))):
        if entry.is_deletion:
            rows.append(Row(entry, [], False, False))
            continue
        unknown = entry.metadata is None or (older is not None and older.metadata is None)
        rows.append(Row(entry, changes(older, entry), unknown, newest and index == 0))
        older = entry
    rows.reverse()
    return page, rows


def actor_label(entry: Entry) -> str:
    """Who made the entry, as the history says it."""
    if not entry.via:
        return UNKNOWN_ACTOR
    return entry.username or "the operator (a command)"
