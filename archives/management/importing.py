"""Records from a file, applied to a feed in batches through the write path: what
`manage.py import_records FEED FILE` does (docs/publishing/import.md).

A file is JSON lines (one record a line, the API's record body plus its `key`) or CSV (a
header row; `key`, `title`, `summary`, `links`, `metadata` and `deleted` columns, every
other column a metadata field, `metadata.<name>` the field <name>, typed by the feed's
record schema when it has one: `Columns`, `CellType`). Lines
go to `publishing.apply_batch` `batch_size` at a time, each batch all or nothing, so a bad
line stops the import with nothing of its batch written and every batch before it
committed; every record is checked there, against the feed's schema too. Re-running the
file is safe: a put identical to the stored record appends nothing, so batches already
written append nothing again. For that to hold, a key may appear once in a file (two
versions of one record would both be written again on every run).
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from archives import jsoninput, validation
from archives.db import schemas
from archives.log import publishing
from archives.models import Entry, Feed, Record
from archives.validation import RecordChecker

if TYPE_CHECKING:  # (referencing documents its Resolver, but exports it only from here)
    from referencing._core import Resolver

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# What the API adds to a record it shows: ignored, so that a file of its answers loads.
SHOWN_ONLY = frozenset({"atom_id", "created", "updated", "url"})
RECORD_COLUMNS = ("title", "summary")
JSON_COLUMNS = {"metadata": dict, "links": list}
# The record's own CSV columns (what every other column fills is a metadata property).
OWN_COLUMNS = frozenset(validation.RECORD_OWN_NAMES)
# Own columns whose text also fills the property of their name, when the feed's schema has
# one: a catalogue with a `title` property writes its title once.
SHARED_COLUMNS = validation.RECORD_TEXT_NAMES
# A column named `metadata.<name>` fills the property <name>, whatever its name.
METADATA_PREFIX = "metadata."
# A header names at most this many columns: a real catalogue has tens of properties (the
# demo's schema 12, DataCite's 20, a flattened MARC record a few hundred), and a record
# filling many more would pass its metadata's MAX_METADATA_BYTES (8 bytes a property at
# least, `"a": 1, `: at most 12,500). Said in docs/publishing/import.md.
MAX_COLUMNS = 10_000
TRUE, FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


@dataclass
class Outcome:
    """What an import did (or, on a dry run, found)."""

    records: int = 0  # lines read that hold a record
    batches: int = 0  # batches committed
    kinds: dict[str, int] = field(default_factory=dict)  # entries appended, by kind
    unchanged: int = 0  # puts identical to the stored record, deletes of deleted ones
    missing: int = 0  # with missing_ok: deletes of keys the feed does not have, skipped
    notes: list[str] = field(default_factory=list)  # how a CSV header is read, said once

    @property
    def appended(self) -> int:
        return sum(self.kinds.values())


class _Unreadable(Exception):
    """A line that stops the reading: not UTF-8, or not CSV."""

    def __init__(self, number: int, why: str):
        self.number, self.why = number, why
        super().__init__(f"line {number}: {why}")


@dataclass(frozen=True)
class Problem:
    """What is wrong with one line of the file, and the CSV column, when it is one cell."""

    number: int
    why: str
    column: str | None = None

    def __str__(self) -> str:
        return f"{_where([self.number], self.column)}: {self.why}"


class ImportFailed(Exception):
    """Lines of the file are wrong: `problems` maps each line number to what is wrong with
    it (`line 7, column "year": 'eighteen' is not an integer`). Nothing of the batch
    holding them was written; `outcome` is what was before it."""

    def __init__(self, problems: dict[int, Problem], outcome: Outcome):
        self.problems, self.outcome = dict(sorted(problems.items())), outcome
        super().__init__("; ".join(map(str, self.problems.values())))

    def said(self) -> list[str]:
        """Each problem said once, in the order of its first line: the lines that share one
        (the same reason, in the same column) are counted together, so that a reason every
        line has does not hide the one line that is wrong in another way."""
        shared: dict[tuple[str | None, str], list[int]] = {}
        for number, problem in self.problems.items():
            shared.setdefault((problem.column, problem.why), []).append(number)
        return [f"{_where(numbers, column)}: {why}"
                for (column, why), numbers in shared.items()]


@dataclass(frozen=True)
class Line:
    """One record of the file: the batch operation it makes, or why it makes none (and
    the CSV column that is wrong, when it is one cell)."""

    number: int
    operation: dict[str, Any] | None = None
    problem: str | None = None
    column: str | None = None

    def said(self, why: str) -> Problem:
        """What is wrong with the line, naming where."""
        return Problem(self.number, why, self.column)


def _where(numbers: list[int], column: str | None) -> str:
    """`line 7`, or `49 lines (2-16, 18-51)`, and the column when there is one."""
    if len(numbers) == 1:
        where = f"line {numbers[0]}"
    else:
        runs: list[list[int]] = []
        for number in numbers:
            if runs and number == runs[-1][-1] + 1:
                runs[-1].append(number)
            else:
                runs.append([number])
        shown = [f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0])
                 for run in runs[:MAX_RUNS_SHOWN]]
        more = ", \u2026" if len(runs) > MAX_RUNS_SHOWN else ""
        where = f"{len(numbers)} lines ({', '.join(shown)}{more})"
    if column is None:
        return where
    return f"{where}, column {json.dumps(column, ensure_ascii=False)}"


MAX_RUNS_SHOWN = 5  # runs of line numbers named for a problem many lines share


def format_of(path: str | Path) -> str | None:
    return FORMATS.get(Path(path).suffix.lower())


def import_records(*, feed: Feed, path: str | Path, file_format: str, batch_size: int,
                   dry_run: bool = False, missing_ok: bool = False,
                   on_bytes: Callable[[int], object] | None = None) -> Outcome:
    """Apply every record of the file at `path` to `feed`; raises ImportFailed. A dry run
    checks every line as the write path would (all of them, not up to the first bad
    batch) and writes nothing; it cannot know which deletes name a key the feed lacks.
    Such a delete is refused, unless `missing_ok` (a file regenerated every night may
    delete what was never imported): then it is skipped and counted."""
    outcome, problems = Outcome(), {}
    schema = schemas.checker(feed)  # (the write path checks each batch under the one in force)
    with open(path, "rb") as file:
        lines = _once_per_key(READERS[file_format](_decoded(file, on_bytes), schema, outcome))
        try:
            for batch in _batches(lines, batch_size):
                if dry_run:
                    problems.update(_check(batch, outcome, schema))
                else:
                    _apply(feed, batch, outcome, schema, missing_ok=missing_ok)
        except _Unreadable as error:  # (the batch it was reading is not written)
            raise ImportFailed({**problems, error.number: Problem(error.number, error.why)},
                               outcome) from None
    if problems:
        raise ImportFailed(problems, outcome)
    return outcome


def _apply(feed: Feed, batch: list[Line], outcome: Outcome, schema: RecordChecker | None, *,
           missing_ok: bool) -> None:
    if any(line.problem for line in batch):  # not sent: named with every other bad line
        raise ImportFailed(_check(batch, Outcome(), schema), outcome)
    operations = [line.operation for line in batch]
    try:
        entries = publishing.apply_batch(feed=feed, operations=operations,
                                         missing_ok=missing_ok)
    except publishing.BatchError as error:
        raise ImportFailed({batch[index].number: batch[index].said(_why(why))
                            for index, why in error.errors.items()}, outcome) from None
    except validation.SchemaOverBounds:  # said of each put of the batch, at once (_refused)
        raise ImportFailed(_check(batch, Outcome(), schema), outcome) from None
    outcome.batches += 1
    outcome.records += len(batch)
    for entry in entries:
        _count(outcome, entry)
    if missing_ok:
        # A delete that appended nothing found its record deleted already, or no record:
        # records are never removed, so the keys with none now had none then.
        quiet = {operation["key"] for operation, entry in zip(operations, entries, strict=True)
                 if entry is None and operation["op"] == "delete"}
        if quiet:
            found = Record.objects.filter(feed=feed, key__in=quiet).count()
            outcome.missing += len(quiet) - found
            outcome.unchanged -= len(quiet) - found


def _count(outcome: Outcome, entry: Entry | None) -> None:
    if entry is None:
        outcome.unchanged += 1
    else:
        outcome.kinds[entry.kind] = outcome.kinds.get(entry.kind, 0) + 1


def _check(batch: list[Line], outcome: Outcome,
           schema: RecordChecker | None) -> dict[int, Problem]:
    """What is wrong with each bad line of `batch`, as the write path would say it (short
    of a delete of a key the feed lacks); the good lines are counted."""
    problems = {}
    for line in batch:
        why = line.problem or _refused(line.operation, schema)
        if why:
            problems[line.number] = line.said(why)
        else:
            outcome.records += 1
    return problems


def _refused(operation: dict[str, Any], schema: RecordChecker | None) -> str | None:
    try:
        parsed = publishing.parse_operation(operation)
    except ValidationError as error:
        return _why(publishing.error_details(error))
    if schema is not None and isinstance(parsed, publishing.Put):
        # The feed's schema, as the write path asks it under the lock (and says it).
        try:
            errors = schema.errors(parsed.record.metadata)
        except validation.SchemaOverBounds as refusal:
            return str(refusal.message)
        if errors:
            return _why({"metadata": errors})
    return None


def _why(errors: dict[str, list[str]] | list[str]) -> str:
    """What the write path's errors say, in one line: `title: This field is required.`;
    the schema's name their place already: `metadata.year: 'x' is not of type 'integer'`."""
    if isinstance(errors, dict):
        return "; ".join(_field_why(name, list(map(str, why))) for name, why in errors.items())
    return " ".join(map(str, errors))


def _field_why(name: str, messages: list[str]) -> str:
    if all(message.startswith((f"{name}.", f"{name}[", f"{name}:")) for message in messages):
        return "; ".join(messages)
    return f"{name}: {' '.join(messages)}"


def _batches(lines: Iterable[Line], size: int) -> Iterator[list[Line]]:
    batch: list[Line] = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _once_per_key(lines: Iterable[Line]) -> Iterator[Line]:
    """Each line, a repeated key refused: each run would write both versions again."""
    seen: dict[str, int] = {}
    for line in lines:
        key = line.operation.get("key") if line.operation else None
        if isinstance(key, str):
            first = seen.setdefault(key, line.number)
            if first != line.number:
                line = Line(line.number, problem=f"key {key!r} is on line {first} too; a file "
                                                 "holds each record once")
        yield line


def _decoded(file, on_bytes: Callable[[int], object] | None) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a UTF-8 file (a byte order mark is dropped)."""
    for number, raw in enumerate(file, start=1):
        if on_bytes is not None:
            on_bytes(len(raw))
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise _Unreadable(number, f"not UTF-8 (byte {raw[error.start]:#04x} at column "
                                      f"{error.start + 1})") from None
        yield number, text


def _json_lines(lines: Iterable[tuple[int, str]], schema: RecordChecker | None,
                outcome: Outcome) -> Iterator[Line]:
    """Each record of a JSON lines file (its metadata is JSON: the schema types nothing)."""
    for number, text in lines:
        if not text.strip():
            continue
        try:
            value = jsoninput.loads(text)
        except json.JSONDecodeError as error:
            yield Line(number, problem=f"not JSON: {error.msg} (column {error.colno})")
            continue
        except jsoninput.JSONInputError as error:
            yield Line(number, problem=f"JSON refused: {error.msg}")
            continue
        if not isinstance(value, dict):
            yield Line(number, problem="a line is a JSON object: a record and its key")
            continue
        yield _line(number, value)


def _csv_rows(lines: Iterable[tuple[int, str]], schema: RecordChecker | None,
              outcome: Outcome) -> Iterator[Line]:
    """Each row of a CSV file with a header row, numbered by the line it starts on (a
    quoted cell may hold line breaks), its columns read as `Columns` says (the notes it
    makes go to `outcome`). Read strictly: a quote left open, which would swallow every
    line after it into one cell, stops the reading at the row it opens."""
    numbers: list[int] = []

    def texts():
        for number, text in lines:
            numbers.append(number)
            yield text

    reader = csv.reader(texts(), strict=True)
    start = 1
    try:
        header = next(reader, None)
        columns = Columns.read(header or [], None if schema is None else schema.schema)
        outcome.notes.extend(columns.notes)
        while True:
            start = len(numbers) + 1
            row = next(reader, None)
            if row is None:
                return
            if any(row):
                yield _csv_line(start, columns, row)
    except csv.Error as error:
        raise _Unreadable(start, _csv_problem(error, start, len(numbers))) from None


@dataclass(frozen=True)
class Columns:
    """What each column of a CSV header fills (docs/publishing/import.md#the-file): an own
    column (OWN_COLUMNS) the record's field, `metadata.<name>` the metadata property
    <name>, any other column the property of its name; and a SHARED_COLUMNS column the
    property of its name too, when the feed's schema has one that no `metadata.<name>`
    column fills. Cells are read by their property's type in the schema (`CellType`).
    `notes` say once how the header was read where a reader could expect otherwise."""

    header: list[str]
    properties: dict[str, str]  # column: the metadata property it fills
    types: dict[str, CellType]  # column: how its cells are read (TEXT when absent)
    notes: list[str]

    @classmethod
    def read(cls, header: list[str], schema: dict[str, Any] | None) -> Columns:
        """The columns of `header` (line 1) under `schema`; _Unreadable when it is wrong:
        too wide, without `key`, or naming a column or a property twice."""
        if len(header) > MAX_COLUMNS:  # before anything else costs in proportion to it
            raise _Unreadable(1, f"the header names {len(header):,} columns; a file has at "
                                 f"most {MAX_COLUMNS:,}")
        if "key" not in header:
            raise _Unreadable(1, "the first line is a header row naming a key column")
        counts = Counter(header)
        repeated = next((name for name in header if counts[name] > 1), None)
        if repeated is not None:
            raise _Unreadable(1, f"the header names the column {repeated!r} twice; name "
                                 "each column once")
        properties = schema.get("properties") if schema else None
        declared = properties if isinstance(properties, dict) else {}
        explicit = {name.removeprefix(METADATA_PREFIX) for name in header
                    if name.startswith(METADATA_PREFIX)}
        filling: dict[str, str] = {}  # property: the column that fills it
        for name in header:
            if name.startswith(METADATA_PREFIX):
                named = name.removeprefix(METADATA_PREFIX)
                if not named:
                    raise _Unreadable(1, f"the column {name!r} names no property: write "
                                         f"{METADATA_PREFIX}<name>")
            elif name not in OWN_COLUMNS or (name in SHARED_COLUMNS and name in declared
                                             and name not in explicit):
                named = name
            else:
                continue
            if named in filling:
                raise _Unreadable(1, f"the columns {filling[named]!r} and {name!r} both fill "
                                     f"the property {named!r}; keep one")
            filling[named] = name
        types = {}
        if declared:
            resolver = Registry().with_resource(
                SCHEMA_BASE, DRAFT202012.create_resource(schema)).resolver(SCHEMA_BASE)
            types = {column: cell_type(declared[named], resolver)
                     for named, column in filling.items() if named in declared}
        return cls(header, {column: named for named, column in filling.items()}, types,
                   _notes(header, schema or {}, declared, filling))


def _notes(header: list[str], schema: dict[str, Any], declared: dict[str, Any],
           filling: dict[str, str]) -> list[str]:
    """What a reader of the header could not guess: an own column that fills a property of
    the schema too, or that leaves one of its name to a `metadata.<name>` column, and the
    properties the schema requires that no column fills."""
    notes = []
    for name in header:
        if name not in OWN_COLUMNS or name not in declared:
            continue
        if filling.get(name) == name:
            notes.append(f"the column {name!r} fills both the record's {name} and the "
                         f"property {name!r} of the feed's schema (a "
                         f"'{METADATA_PREFIX}{name}' column would fill the property alone)")
        elif name not in filling:
            notes.append(f"the column {name!r} fills the record's own {name}, not the "
                         f"property {name!r} of the feed's schema: a "
                         f"'{METADATA_PREFIX}{name}' column fills that")
    required = schema.get("required")
    if isinstance(required, list) and "metadata" not in header:
        unfilled = [_column_for(name) for name in required
                    if isinstance(name, str) and name not in filling]
        if unfilled:
            shown = ", ".join(map(repr, unfilled[:MAX_NAMED]))
            more = f" and {len(unfilled) - MAX_NAMED} more" if len(unfilled) > MAX_NAMED else ""
            notes.append(f"the feed's schema requires properties that no column fills: add "
                         f"the column{'s' if len(unfilled) > 1 else ''} {shown}{more}")
    return notes


MAX_NAMED = 10  # properties a note names, at most


def _column_for(name: str) -> str:
    """The column that fills the property `name`."""
    if (name in OWN_COLUMNS and name not in SHARED_COLUMNS) or name.startswith(METADATA_PREFIX):
        return METADATA_PREFIX + name
    return name


def _csv_problem(error: csv.Error, start: int, end: int) -> str:
    """What a csv.Error means for the row starting on line `start` (read up to `end`)."""
    if str(error) == "unexpected end of data":  # the file ended inside quotes
        return (f"not CSV: a quoted cell opened in this row is not closed (the file ends "
                f"inside it, on line {end}); double a quote inside a quoted cell (\"\")")
    return f"not CSV: {error}" + (f" (on line {end})" if end != start else "")


def _csv_line(number: int, columns: Columns, row: list[str]) -> Line:
    if len(row) > len(columns.header):
        return Line(number, problem=f"{len(row)} cells, but the header names "
                                    f"{len(columns.header)}")
    value: dict[str, Any] = {}
    # The properties filled by columns, and those filled by SHARED_COLUMNS.
    extra: dict[str, Any] = {}
    shared: dict[str, Any] = {}
    for name, text in zip(columns.header, row, strict=False):
        if name in JSON_COLUMNS:
            if text:
                try:
                    value[name] = _json_cell(text)
                except CellError as error:
                    return Line(number, problem=f"{name}: {error}")
        elif name in OWN_COLUMNS:
            value[name] = text
        if name in columns.properties:
            try:
                found = columns.types.get(name, TEXT).value(text)
            except CellError as error:
                return Line(number, problem=str(error), column=name)
            if found is not None:
                (shared if name in OWN_COLUMNS else extra)[columns.properties[name]] = found
    value.setdefault("key", None)
    if extra or shared:
        metadata = value.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            return Line(number, problem="metadata: Must be a JSON object.")
        both = sorted(set(extra) & set(metadata))
        if both:
            return Line(number, problem=f"{both[0]}: both a column and a field of metadata")
        # A `metadata` cell giving the property says more than the record's own column.
        metadata.update(shared | metadata | extra)
    deleted = value.get("deleted", "").strip().lower()
    if deleted and deleted not in TRUE | FALSE:
        return Line(number, problem=f"deleted: {value['deleted']!r} is neither true nor false")
    value["deleted"] = deleted in TRUE
    return _line(number, value)


def _line(number: int, value: dict[str, Any]) -> Line:
    """The operation of one record: a delete when it says `"deleted": true`, else a put
    of its record fields (validated by the write path, which names what is wrong)."""
    deleted = value.get("deleted", False)
    if not isinstance(deleted, bool):
        return Line(number, problem="deleted: must be true or false")
    if deleted:
        return Line(number, {"op": "delete", "key": value.get("key")})
    record = {name: item for name, item in value.items()
              if name not in SHOWN_ONLY and name not in {"key", "deleted"}}
    return Line(number, {"op": "put", "key": value.get("key"), "record": record})


# CSV cells typed by the feed's record schema (docs/publishing/import.md#typed-columns): a
# column that fills a top-level property of the schema takes that property's type. The
# schema itself is checked by the write path, after this: here a cell only becomes JSON.

SEPARATOR, ESCAPE = "|", "\\"  # between the items of a list, and before one inside an item
BOOLEANS = {**dict.fromkeys(TRUE, True), **dict.fromkeys(FALSE, False)}
NUMBERS = {"integer": re.compile(r"-?(0|[1-9][0-9]*)", re.ASCII),
           "number": re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", re.ASCII)}
NAMED = {"integer": "an integer", "number": "a number",
         "boolean": "true or false (true/false, yes/no, 1/0)"}
JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
              (list, "array"), (dict, "object"), (type(None), "null"))
SCHEMA_BASE = "urn:feedpub:record-schema"


class CellError(ValueError):
    """A cell that does not fit its property's type; the message says why."""


@dataclass(frozen=True)
class CellType:
    """How a CSV cell becomes the value of a metadata property: `kind` is the JSON type
    the property takes (None: the schema does not decide one, and the cell is text, as
    without a schema); for an array, `items` is its items' (None: text)."""

    kind: str | None = None
    items: str | None = None

    def value(self, text: str) -> Any:
        """The cell's value, or None for an empty cell (the property is left out); raises
        CellError."""
        if self.kind in (None, "string"):
            return text or None
        text = text.strip()
        if not text:
            return None
        if self.kind == "object":
            return _json_cell(text, dict, "a JSON object")
        if self.kind != "array":
            return _scalar(text, self.kind)
        if self.items in ("object", "array"):
            return _json_cell(text, list, "a JSON array")
        items = _split(text)
        values = []
        for number, item in enumerate(items, start=1):
            where = f"item {number}: " if len(items) > 1 else ""
            if not item:
                raise CellError(f"{where}empty (write {ESCAPE}{SEPARATOR} for a "
                                f"{SEPARATOR} inside a value)")
            try:
                values.append(item if self.items in (None, "string") else
                              _scalar(item, self.items))
            except CellError as error:
                raise CellError(f"{where}{error}") from None
        return values


TEXT = CellType()


def cell_type(schema: Any, resolver: Resolver) -> CellType:
    """The CellType of a property whose schema is `schema` ($refs resolved by `resolver`)."""
    kind = _one_type(_types(schema, resolver, {}))
    if kind != "array":
        return CellType(kind)
    items = _subschema(schema, resolver, "items", set())
    return CellType(kind, None if items is None else _one_type(_types(*items, {})))


def _one_type(types: frozenset[str] | None) -> str | None:
    """The one JSON type a cell is read as, of those a schema allows (null aside: an empty
    cell leaves the property out); None when it allows any, or several."""
    found = (types or frozenset()) - {"null"}
    if found == {"integer", "number"}:
        return "number"
    return next(iter(found)) if len(found) == 1 else None


def _types(schema: Any, resolver: Resolver,
           known: dict[int, frozenset[str] | None]) -> frozenset[str] | None:
    """The JSON types `schema` allows, from `type`, `enum`, `const`, `$ref`, `allOf`,
    `anyOf` and `oneOf`; None when it does not narrow them ("number" includes "integer").
    `known` holds the subschemas' types found so far: each is read once, however often it
    is referred to, and one that refers back to itself is taken as allowing any."""
    if not isinstance(schema, dict):
        return None
    if id(schema) in known:
        return known[id(schema)]
    known[id(schema)] = None
    found: frozenset[str] | None = None

    def narrow(types: frozenset[str] | None) -> None:
        nonlocal found
        if types is not None:
            found = types if found is None else _both(found, types)

    kind = schema.get("type")
    if isinstance(kind, str | list):
        narrow(frozenset([kind] if isinstance(kind, str) else kind))
    if "const" in schema:
        narrow(frozenset([_json_type(schema["const"])]))
    if isinstance(schema.get("enum"), list):
        narrow(frozenset(map(_json_type, schema["enum"])))
    referred = _referred(schema, resolver)
    if referred is not None:
        narrow(_types(*referred, known))
    for each in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        narrow(_types(each, resolver, known))
    for name in ("anyOf", "oneOf"):
        branches = schema.get(name)
        if isinstance(branches, list) and branches:
            types = [_types(branch, resolver, known) for branch in branches]
            if None not in types:
                narrow(frozenset().union(*types))
    known[id(schema)] = found
    return found


def _both(first: frozenset[str], second: frozenset[str]) -> frozenset[str]:
    """The types both allow (a number may be an integer)."""
    def widened(types):
        return types | {"integer"} if "number" in types else types
    return widened(first) & widened(second)


def _subschema(schema: Any, resolver: Resolver, keyword: str,
               seen: set[int]) -> tuple[Any, Resolver] | None:
    """The first `keyword` (e.g. an array's `items`) found in `schema`, its $ref or its
    allOf, anyOf or oneOf branches, with the resolver of its $refs (each subschema looked
    at once: `seen`)."""
    if not isinstance(schema, dict) or id(schema) in seen:
        return None
    seen.add(id(schema))
    if keyword in schema:
        return schema[keyword], resolver
    referred = _referred(schema, resolver)
    if referred is not None:
        found = _subschema(*referred, keyword, seen)
        if found is not None:
            return found
    for name in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(name) if isinstance(schema.get(name), list) else []:
            found = _subschema(branch, resolver, keyword, seen)
            if found is not None:
                return found
    return None


def _referred(schema: dict[str, Any], resolver: Resolver) -> tuple[Any, Resolver] | None:
    """What the schema's $ref points to, within the schema (as the write path follows it)."""
    if not isinstance(schema.get("$ref"), str):
        return None
    try:
        resolved = resolver.lookup(schema["$ref"])
    except Unresolvable:  # (refused when the schema was set: a schema refers within itself)
        return None
    return resolved.contents, resolved.resolver


def _json_type(value: Any) -> str:
    return next(name for kind, name in JSON_TYPES if isinstance(value, kind))


def _scalar(text: str, kind: str) -> Any:
    if kind == "boolean":
        found = BOOLEANS.get(text.lower())
        if found is None:
            raise CellError(f"{text!r} is not {NAMED[kind]}")
        return found
    if not NUMBERS[kind].fullmatch(text):
        raise CellError(f"{text!r} is not {NAMED[kind]}")
    try:  # numbers as JSON lines' are read: stored as they were written, or refused
        return jsoninput.loads(text)
    except jsoninput.JSONInputError as error:
        raise CellError(error.msg) from None


def _split(text: str) -> list[str]:
    """The items of a list cell, each without the spaces around it: `a | b\\|c` is
    ["a", "b|c"] (and `\\\\` a backslash)."""
    if ESCAPE not in text:
        return [item.strip() for item in text.split(SEPARATOR)]
    items, current, chars = [], [], iter(text)
    for char in chars:
        if char == ESCAPE:
            following = next(chars, "")
            current.append(following if following in (SEPARATOR, ESCAPE) else char + following)
        elif char == SEPARATOR:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    items.append("".join(current).strip())
    return items


def _json_cell(text: str, kind: type | None = None, named: str = "") -> Any:
    """A cell holding JSON, read as JSON lines are; of type `kind` if given."""
    try:
        value = jsoninput.loads(text)
    except json.JSONDecodeError as error:
        raise CellError(f"not JSON: {error.msg} (column {error.colno} of the cell)") from None
    except jsoninput.JSONInputError as error:
        raise CellError(f"JSON refused: {error.msg}") from None
    if kind is not None and not isinstance(value, kind):
        raise CellError(f"not {named}")
    return value


READERS = {"jsonl": _json_lines, "csv": _csv_rows}
