"""The rows one write stores, in a few bulk queries: new records, changed records, their
entries (archives/log/publishing.py decides what they are; this stores them).

Their columns are their models' (archives/db/rows.py): a column added to Record or Entry is
written here without a change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.db import models

from archives.db import django_internals, fastsql
from archives.db.rows import (
    CHANGED_RECORD_COLUMNS,
    ENTRY_COLUMNS,
    RECORD_COLUMNS,
    positional,
)
from archives.models import ACTOR_COLUMNS, Entry, Feed, Record
from archives.validation import RECORD_FIELDS

# json.dumps(value, ensure_ascii=False), its encoder made once (json.dumps makes one a call).
encode_json = json.JSONEncoder(ensure_ascii=False).encode


class JsonOnce:
    """JSON text of values, each object encoded once however often it is asked for (what
    COPY's text format takes for a jsonb column). Keeps the objects it has seen, so that an
    id is never reused while it is in the memo."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, str]] = {}

    def seed(self, value: Any, text: str) -> None:
        """Take `text` as the JSON of `value` (validation's encoding of it)."""
        self._seen.setdefault(id(value), (value, text))

    def __call__(self, value: Any) -> str | None:
        if value is None:
            return None
        known = self._seen.get(id(value))
        if known is None:
            known = self._seen[id(value)] = (value, encode_json(value))
        return known[1]


class _Rows:
    """An instance's values for `columns`, as COPY and VALUES take them (JSON as text), in
    the order of `self.columns`: the JSON columns last, so that a row is two C calls and
    the encoding of its JSON values (`read_as`: a column read from another attribute)."""

    def __init__(self, model: type[models.Model], columns: Sequence[str],
                 read_as: dict[str, str] | None = None):
        def is_json(column: str) -> bool:
            return isinstance(model._meta.get_field(column), models.JSONField)

        plain = [column for column in columns if not is_json(column)]
        json_columns = [column for column in columns if is_json(column)]
        self.columns = (*plain, *json_columns)
        self._plain = _getter([(read_as or {}).get(column, column) for column in plain])
        self._json = _getter(json_columns)

    def __call__(self, instance: models.Model, as_json: JsonOnce) -> tuple:
        return (*self._plain(instance), *map(as_json, self._json(instance)))


def _getter(names: list[str]) -> Callable[[Any], tuple]:
    """The attributes `names` of an object, as a tuple (attrgetter's of one name is not)."""
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda instance: (get(instance),)
    return attrgetter(*names) if names else lambda instance: ()


_new_record_row = _Rows(Record, RECORD_COLUMNS)
_new_record_row_without_id = _Rows(Record, RECORD_COLUMNS[1:])  # (one record: its id RETURNED)
_changed_record_row = _Rows(Record, ("id", *CHANGED_RECORD_COLUMNS))  # (id first: not JSON)
# An entry is built before its new record has an id: it takes it from the record.
_entry_row = _Rows(Entry, ENTRY_COLUMNS, read_as={"record_id": "record.pk"})

# Up to this many entries, a write inserts them with one INSERT rather than by COPY (and a
# single new record by INSERT ... RETURNING its id): a single PUT's record and entry each
# cost one round trip instead of two or three.
FEW_ROWS = 8


def insert_records(records: list[Record], as_json: JsonOnce) -> None:
    """Insert new records: their entries need their ids, so on PostgreSQL one record is
    inserted returning its id, and more have their ids reserved in one query and go by
    COPY (see archives/db/fastsql.py)."""
    if not records:
        return
    if not fastsql.can_copy():
        Record.objects.bulk_create(records)
        return
    if len(records) == 1:
        record = records[0]
        [record.pk] = fastsql.insert_rows(Record, _new_record_row_without_id.columns, [
            _new_record_row_without_id(record, as_json)], returning_id=True)
    else:
        for record, pk in zip(records, fastsql.reserve_ids(Record, len(records)), strict=True):
            record.pk = pk
        fastsql.copy_rows(Record, _new_record_row.columns, (_new_record_row(record, as_json)
                                                            for record in records))
    django_internals.mark_saved(records)  # as bulk_create leaves them


def update_records(records: list[Record], as_json: JsonOnce) -> None:
    """Store the new state of changed records: on PostgreSQL in one UPDATE from a VALUES
    list (see archives/db/fastsql.py)."""
    if not records:
        return
    if not fastsql.can_copy():
        Record.objects.bulk_update(records, CHANGED_RECORD_COLUMNS)
        return
    fastsql.update_rows(Record, _changed_record_row.columns[1:],
                        [_changed_record_row(record, as_json) for record in records])


def insert_entries(entries: list[Entry], as_json: JsonOnce) -> None:
    """Append the entries: the bulk of every write, and nothing points to them (no ids
    needed back), so PostgreSQL takes them by COPY (see archives/db/fastsql.py)."""
    if not fastsql.can_copy():
        Entry.objects.bulk_create(entries)
        return
    rows = (_entry_row(entry, as_json) for entry in entries)
    if len(entries) <= FEW_ROWS:
        fastsql.insert_rows(Entry, _entry_row.columns, list(rows))
    else:
        fastsql.copy_rows(Entry, _entry_row.columns, rows)


# The related objects are set as their descriptors would (no query for them later).
_RECORD_FEED = Record._meta.get_field("feed")
_ENTRY_FEED, _ENTRY_RECORD = Entry._meta.get_field("feed"), Entry._meta.get_field("record")


_record = positional(Record, ("feed_id", "key"))
# An entry holds its record's fields as the change left them; a deletion, its title alone.
_entry = positional(Entry, ("feed_id", "seq", "record_id", "kind", "updated",
                            *ACTOR_COLUMNS, "schema_version", *RECORD_FIELDS))
_deletion = positional(Entry, ("feed_id", "seq", "record_id", "kind", "updated",
                               *ACTOR_COLUMNS, "title"))
# A record's fields (validation.RECORD_FIELDS), in one C call: what a put compares and sets.
record_fields = attrgetter(*RECORD_FIELDS)


def set_record_fields(record: Record, values: Sequence[Any]) -> None:
    """Give `record` the fields `values` (in RECORD_FIELDS' order: RecordData.stored())."""
    for name, value in zip(RECORD_FIELDS, values, strict=True):
        setattr(record, name, value)


def new_record(feed: Feed, key: str) -> Record:
    """A record not yet stored: the write that creates it sets its state."""
    record = _record(feed.pk, key)
    _RECORD_FEED.set_cached_value(record, feed)
    return record


def new_entry(feed: Feed, seq: int, record: Record, kind: str, updated: datetime,
              actor: Sequence[Any], schema_version: int | None) -> Entry:
    """The entry of a change to `record`, as the change left it (it takes the record's id
    when that is stored), by `actor` (its ACTOR_COLUMNS' values)."""
    if kind == Entry.Kind.DELETE:
        entry = _deletion(feed.pk, seq, record.pk, kind, updated, *actor, record.title)
    else:
        entry = _entry(feed.pk, seq, record.pk, kind, updated, *actor, schema_version,
                       *record_fields(record))
    _ENTRY_FEED.set_cached_value(entry, feed)
    _ENTRY_RECORD.set_cached_value(entry, record)
    return entry


def show_feed(record: Record, feed: Feed) -> None:
    """Let `record`, read for a write to `feed`, show it with no query of its own."""
    _RECORD_FEED.set_cached_value(record, feed)
