"""Each shape of row that is read or written in bulk, declared once; what reads or writes it
is derived from that declaration.

- Rows read past the ORM (archives/db/fastsql.py) are NamedTuples whose fields carry, as
  `Annotated[type, Column(...)]`, their SQL expression, their name in an ORM values_list
  and how a database's value becomes Python: `Shape` derives the SELECT list, the
  values_list names and the conversion of fetched rows from it. A field added to the
  NamedTuple is read everywhere the shape is.
- Rows written in bulk (records and entries, archives/db/bulkwrite.py) are declared by
  their models: the column lists, the tuples COPY takes and the positional constructors
  come from `Model._meta.concrete_fields`. A field added to the model is written by them.

Renderers read the rows' fields by name (`row.title`, or one `attrgetter` of names in a
hot loop), never by position.
"""

from __future__ import annotations

import json
import json.scanner
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from enum import Enum
from operator import itemgetter
from typing import Annotated, Any, Generic, NamedTuple, TypeVar, get_type_hints

from django.db import models

from archives.models import Entry, Record


class Kind(Enum):
    """How a database hands back a column that Python wants otherwise."""

    JSON = "json"  # jsonb (PostgreSQL) or text (SQLite) holding JSON
    MOMENT = "moment"  # a timestamp: aware from psycopg's loader, naive UTC or text on SQLite
    UUID = "uuid"  # a UUID on PostgreSQL, its hex text on SQLite


class Column(NamedTuple):
    """What a field of a row shape is in the database."""

    sql: str  # its expression in the reader's SELECT (with the reader's table aliases)
    orm: str  # its name in a values_list (the same rows read through the ORM)
    kind: Kind | None = None  # a conversion it needs, if any


JSON, MOMENT, UUID = Kind.JSON, Kind.MOMENT, Kind.UUID


# Shapes read past the ORM --------------------------------------------------------------

class EntryRow(NamedTuple):
    """The columns of one Entry (and its record's key) that a document shows. A tuple:
    sealing makes a million of them. (Read by fastsql.entry_rows from `entries e JOIN
    records r`.)"""

    seq: Annotated[int, Column("e.seq", "seq")]
    kind: Annotated[str, Column("e.kind", "kind")]
    updated: Annotated[datetime, Column("e.updated", "updated", MOMENT)]
    title: Annotated[str, Column("e.title", "title")]
    summary: Annotated[str, Column("e.summary", "summary")]
    links: Annotated[list, Column("e.links", "links", JSON)]
    key: Annotated[str, Column("r.key", "record__key")]
    metadata: Annotated[dict | None, Column("e.metadata", "metadata", JSON)]
    created: Annotated[datetime, Column("r.created", "record__created", MOMENT)]  # the record's
    # of the feed's record schema it was checked under
    schema_version: Annotated[int | None, Column("e.schema_version", "schema_version")] = None
    language: Annotated[str, Column("e.language", "language")] = ""  # empty: the feed's


class LiveRecord(NamedTuple):
    """A record as the complete feed reads it, a batch at a time (fastsql.live_records,
    from the records table alone)."""

    id: Annotated[int, Column("id", "id")]
    key: Annotated[str, Column("key", "key")]
    title: Annotated[str, Column("title", "title")]
    summary: Annotated[str, Column("summary", "summary")]
    links: Annotated[list, Column("links", "links", JSON)]
    updated: Annotated[datetime, Column("updated", "updated", MOMENT)]
    language: Annotated[str, Column("language", "language")]


class OaiItem(NamedTuple):
    """A record as OAI-PMH shows it: its header, and its content unless only headers are
    asked for (the fields with defaults, which a header-only read leaves out). Read as rows,
    not as models: a list answer is a hundred. (fastsql.oai_records, from `records r JOIN
    feeds f`.)"""

    key: Annotated[str, Column("r.key", "key")]
    datestamp: Annotated[datetime, Column("r.datestamp", "datestamp", MOMENT)]
    updated: Annotated[datetime, Column("r.updated", "updated", MOMENT)]
    deleted_at: Annotated[datetime | None, Column("r.deleted_at", "deleted_at", MOMENT)]
    slug: Annotated[str, Column("f.slug", "feed__slug")]  # the feed's: the record's set
    feed_uuid: Annotated[uuid.UUID, Column("f.uuid", "feed__uuid", UUID)]
    id: Annotated[int, Column("r.id", "id")]
    title: Annotated[str, Column("r.title", "title")] = ""
    summary: Annotated[str, Column("r.summary", "summary")] = ""
    metadata: Annotated[Any, Column("r.metadata", "metadata", JSON)] = None
    links: Annotated[list, Column("r.links", "links", JSON)] = []
    created: Annotated[datetime | None, Column("r.created", "created", MOMENT)] = None
    # of its feed's record schema it was checked under
    schema_version: Annotated[int | None, Column("r.schema_version", "schema_version")] = None
    language: Annotated[str, Column("r.language", "language")] = ""

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None


class HistoryRow(NamedTuple):
    """An entry as a record's history shows it (fastsql.history_rows, from the entries
    table alone): what changed when, who changed it and why. `updated` is RFC 3339 text
    (formats.rfc3339), made by the database: a history reads thousands at once."""

    seq: int
    kind: str
    updated: str
    username: str
    token_name: str
    via: str
    note: str


Row = TypeVar("Row", bound=tuple)
M = TypeVar("M", bound=models.Model)


class Shape(Generic[Row]):
    """What a row shape's declaration gives its readers: the SELECT list, the values_list
    names and the conversion of fetched rows into the NamedTuple, for all its fields or
    (`head=True`) only those without a default."""

    def __init__(self, row_type: type[Row]):
        self.row_type = row_type
        hints = get_type_hints(row_type, include_extras=True)
        fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
        self.columns: tuple[Column, ...] = tuple(hints[name].__metadata__[0]
                                                 for name in fields)
        defaults: dict[str, Any] = row_type._field_defaults  # type: ignore[attr-defined]
        self.head_length = len([name for name in fields if name not in defaults])
        self.orm_names = tuple(column.orm for column in self.columns)
        self._make: Callable[[Iterable[Any]], Row] = row_type._make  # type: ignore[attr-defined]

    def select(self, *, head: bool = False) -> str:
        """The SELECT list of the shape's columns, in its fields' order."""
        return ", ".join(column.sql for column in self._columns(head))

    def from_values(self, values: Iterable[tuple]) -> Iterable[Row]:
        """Rows of a values_list(*shape.orm_names) queryset (the ORM converts them)."""
        return map(self._make, values)

    def converted(self, rows: list[tuple], *, postgresql: bool,
                  head: bool = False) -> list[Row]:
        """Fetched rows of `select(head=head)` as the shape's NamedTuples, each column as
        the ORM would give it: JSON decoded, timestamps aware, UUIDs as UUID. On PostgreSQL
        timestamps come aware from psycopg's loader (psycopg_internals.load_timestamps_in_c)
        and UUIDs as UUID; only jsonb, as text, is decoded. (The hot loop of sealing: a list
        and a few index assignments a row, no more than unpacking it cost.)"""
        conversions = self._conversions(head, postgresql)
        make = self._make if not head else self._make_head
        if not conversions:
            return list(map(make, rows))
        converted: list[Row] = []
        append = converted.append
        for fetched in rows:
            row = list(fetched)
            for index, convert in conversions:
                value = row[index]
                if value is not None:
                    row[index] = convert(value)
            append(make(row))
        return converted

    def _make_head(self, values: Iterable[Any]) -> Row:
        return self.row_type(*values)  # the rest: the fields' defaults

    def _columns(self, head: bool) -> tuple[Column, ...]:
        return self.columns[:self.head_length] if head else self.columns

    def _conversions(self, head: bool, postgresql: bool) -> list[tuple[int, Callable]]:
        convert = _POSTGRESQL if postgresql else _SQLITE
        return [(index, convert[column.kind]) for index, column in enumerate(self._columns(head))
                if column.kind in convert]


ENTRY_ROW = Shape(EntryRow)
LIVE_RECORD = Shape(LiveRecord)
OAI_ITEM = Shape(OaiItem)


# jsonb as PostgreSQL writes it is one JSON value with no space around it, which the json
# module's scanner (C) reads alone: json.loads adds checks in Python around the same call,
# ~2.6 against ~0.8 us for a record's small values (sealing decodes two an entry).
# (typeshed types make_scanner's context as a make_scanner; it is the decoder whose settings
# it reads)
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _jsonb(text: str) -> Any:
    value, end = _scan_json(text, 0)
    if end != len(text):
        raise ValueError(f"jsonb text with more after its value at {end}: {text[:80]!r}")
    return value


def _json(value: Any) -> Any:
    """A JSON column as SQLite gives it: text to decode (or already decoded)."""
    return json.loads(value) if isinstance(value, str) else value


def aware(moment: datetime | str) -> datetime:
    """A timestamp as SQLite gives it (naive UTC, or text), aware."""
    if isinstance(moment, str):  # a backend that does not convert declared types
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


_POSTGRESQL: dict[Kind | None, Callable[[Any], Any]] = {JSON: _jsonb}
_SQLITE: dict[Kind | None, Callable[[Any], Any]] = {JSON: _json, MOMENT: aware, UUID: _uuid}


# Shapes written in bulk: declared by their models ----------------------------------------

def model_columns(model: type[models.Model]) -> tuple[str, ...]:
    """The model's columns in its fields' order: what Model(*values) takes, and what bulk
    writes name."""
    return tuple(field.attname for field in model._meta.concrete_fields)


def positional(model: type[M], names: Sequence[str]) -> Callable[..., M]:
    """A constructor of `model` that takes the values of the columns `names`, in that order,
    and passes them on in the model's order, each column not named at its field's default
    (a callable default called for each instance): Django's fast path, Model(*values). Its
    keyword path cost ~15 us an instance, as much as validating a record, and a batch
    builds one or two for each operation; reordering is one C call."""
    columns = model_columns(model)
    unknown = set(names) - set(columns)
    if unknown:
        raise ValueError(f"{model.__name__} has no column {sorted(unknown)}")
    fields = {field.attname: field for field in model._meta.concrete_fields}
    unnamed = [fields[column] for column in columns if column not in names]
    position = {name: index for index, name in enumerate(
        (*names, *(field.attname for field in unnamed)))}
    order = itemgetter(*(position[column] for column in columns))
    made_per_instance = [field.has_default() and callable(field.default) for field in unnamed]
    defaults = tuple(None if made else field.get_default()
                     for field, made in zip(unnamed, made_per_instance, strict=True))
    made = [(len(names) + offset, field.default) for offset, field in enumerate(unnamed)
            if made_per_instance[offset]]

    def build(*values: Any) -> M:
        if not made:
            return model(*order((*values, *defaults)))
        padded = [*values, *defaults]
        for index, make in made:
            padded[index] = make()
        return model(*order(padded))

    return build


RECORD_COLUMNS = model_columns(Record)
# What a change of a record never rewrites: the rest is its state, stored again by each
# change (an UPDATE from a VALUES list, archives/db/bulkwrite.py).
RECORD_WRITTEN_ONCE = ("id", "feed_id", "key", "created")
CHANGED_RECORD_COLUMNS = tuple(column for column in RECORD_COLUMNS
                               if column not in RECORD_WRITTEN_ONCE)
# Entries are appended and nothing points to them: their id comes from the database.
ENTRY_COLUMNS = tuple(column for column in model_columns(Entry) if column != "id")
