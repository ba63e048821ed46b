"""Records from a file, applied to a feed in batches through the write path: what
`manage.py import_records FEED FILE` does (docs/publishing/import.md).

A file is JSON lines (one record a line, the API's record body plus its `key`) or CSV (a
header row; `key`, `deleted` and a column for each of the record's fields, `title`,
`summary`, and `metadata` and `links` as JSON; every other column a metadata field,
`metadata.<name>` the field <name>, typed by the feed's record schema when it has one:
archives.management.csvcolumns). Lines go to `publishing.apply_batch` `batch_size` at a
time, each batch all or nothing, so a bad line stops the import with nothing of its batch
written and every batch before it committed; every record is checked there, against the
feed's schema too. Re-running the file is safe: a put identical to the stored record appends
nothing, so batches already written append nothing again. For that to hold, a key may
appear once in a file (two versions of one record would both be written again on every
run). Every entry keeps the import's actor (the user it acts as, or the operator, and its
note); the write path checks that actor's rights on each batch.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError

from archives import jsoninput, validation
from archives.db import schemas
from archives.log import publishing
from archives.log.access import Actor
from archives.models import Entry, Feed, Record
from archives.validation import RecordChecker

from .csvcolumns import (
    FALSE,
    JSON_COLUMNS,
    OWN_COLUMNS,
    TEXT,
    TRUE,
    CellError,
    Columns,
    HeaderError,
    json_cell,
)

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# What the API adds to a record it shows: ignored, so that a file of its answers loads.
SHOWN_ONLY = frozenset({"atom_id", "created", "updated", "url"})


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
                   on_bytes: Callable[[int], object] | None = None,
                   actor: Actor | None = None) -> Outcome:
    """Apply every record of the file at `path` to `feed`; raises ImportFailed. A dry run
    checks every line as the write path would (all of them, not up to the first bad
    batch) and writes nothing; it cannot know which deletes name a key the feed lacks.
    Such a delete is refused, unless `missing_ok` (a file regenerated every night may
    delete what was never imported): then it is skipped and counted. `actor`: who imports
    (as for publishing.apply_batch: access.NotAllowed when they may not write the feed)."""
    outcome, problems = Outcome(), {}
    schema = schemas.checker(feed)  # (the write path checks each batch under the one in force)
    with open(path, "rb") as file:
        lines = _once_per_key(READERS[file_format](_decoded(file, on_bytes), schema, outcome))
        try:
            for batch in _batches(lines, batch_size):
                if dry_run:
                    problems.update(_check(batch, outcome, schema))
                else:
                    _apply(feed, batch, outcome, schema, missing_ok=missing_ok, actor=actor)
        except _Unreadable as error:  # (the batch it was reading is not written)
            raise ImportFailed({**problems, error.number: Problem(error.number, error.why)},
                               outcome) from None
    if problems:
        raise ImportFailed(problems, outcome)
    return outcome


def _apply(feed: Feed, batch: list[Line], outcome: Outcome, schema: RecordChecker | None, *,
           missing_ok: bool, actor: Actor | None) -> None:
    operations = [line.operation for line in batch if line.operation is not None]
    if len(operations) < len(batch):  # a bad line: not sent, named with every other one
        raise ImportFailed(_check(batch, Outcome(), schema), outcome)
    try:
        entries = publishing.apply_batch(feed=feed, operations=operations,
                                         missing_ok=missing_ok, actor=actor)
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
        why = line.problem if line.operation is None else _refused(line.operation, schema)
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
        try:
            columns = Columns.read(header or [], None if schema is None else schema.schema)
        except HeaderError as error:
            raise _Unreadable(1, str(error)) from None
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
                    value[name] = json_cell(text)
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


READERS = {"jsonl": _json_lines, "csv": _csv_rows}
