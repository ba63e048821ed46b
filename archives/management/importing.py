"""Records from a file, applied to a feed in batches through the write path: what
`manage.py import_records FEED FILE` does (docs/publishing/import.md).

A file is JSON lines (one record a line, the API's record body plus its `key`) or CSV (a
header row; `key`, `title`, `summary`, `links` and `metadata` columns, every other column
a metadata field). Lines go to `publishing.apply_batch` `batch_size` at a time, each batch
all or nothing, so a bad line stops the import with nothing of its batch written and
every batch before it committed. Re-running the file is safe: a put identical to the
stored record appends nothing, so batches already written append nothing again. For that
to hold, a key may appear once in a file (two versions of one record would both be written
again on every run).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError

from archives import jsoninput
from archives.log import publishing
from archives.models import Entry, Feed, Record

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# What the API adds to a record it shows: ignored, so that a file of its answers loads.
SHOWN_ONLY = frozenset({"atom_id", "created", "updated", "url"})
RECORD_COLUMNS = ("title", "summary")
JSON_COLUMNS = {"metadata": dict, "links": list}
TRUE, FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})


@dataclass
class Outcome:
    """What an import did (or, on a dry run, found)."""

    records: int = 0  # lines read that hold a record
    batches: int = 0  # batches committed
    kinds: dict[str, int] = field(default_factory=dict)  # entries appended, by kind
    unchanged: int = 0  # puts identical to the stored record, deletes of deleted ones
    missing: int = 0  # with missing_ok: deletes of keys the feed does not have, skipped

    @property
    def appended(self) -> int:
        return sum(self.kinds.values())


class _Unreadable(Exception):
    """A line that stops the reading: not UTF-8, or not CSV."""

    def __init__(self, number: int, why: str):
        self.number, self.why = number, why
        super().__init__(f"line {number}: {why}")


class ImportFailed(Exception):
    """Lines of the file are wrong: `problems` maps each line number to what is wrong.
    Nothing of the batch holding them was written; `outcome` is what was before it."""

    def __init__(self, problems: dict[int, str], outcome: Outcome):
        self.problems, self.outcome = dict(sorted(problems.items())), outcome
        super().__init__("; ".join(f"line {n}: {why}" for n, why in self.problems.items()))


@dataclass(frozen=True)
class Line:
    """One record of the file: the batch operation it makes, or why it makes none."""

    number: int
    operation: dict[str, Any] | None = None
    problem: str | None = None


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
    with open(path, "rb") as file:
        lines = _once_per_key(READERS[file_format](_decoded(file, on_bytes)))
        try:
            for batch in _batches(lines, batch_size):
                if dry_run:
                    problems.update(_check(batch, outcome))
                else:
                    _apply(feed, batch, outcome, missing_ok=missing_ok)
        except _Unreadable as error:  # (the batch it was reading is not written)
            raise ImportFailed({**problems, error.number: error.why}, outcome) from None
    if problems:
        raise ImportFailed(problems, outcome)
    return outcome


def _apply(feed: Feed, batch: list[Line], outcome: Outcome, *, missing_ok: bool) -> None:
    if any(line.problem for line in batch):  # not sent: named with every other bad line
        raise ImportFailed(_check(batch, Outcome()), outcome)
    operations = [line.operation for line in batch]
    try:
        entries = publishing.apply_batch(feed=feed, operations=operations,
                                         missing_ok=missing_ok)
    except publishing.BatchError as error:
        raise ImportFailed({batch[index].number: _why(why) for index, why in error.errors.items()},
                           outcome) from None
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


def _check(batch: list[Line], outcome: Outcome) -> dict[int, str]:
    """What is wrong with each bad line of `batch`, as the write path would say it (short
    of a delete of a key the feed lacks); the good lines are counted."""
    problems = {}
    for line in batch:
        why = line.problem or _refused(line.operation)
        if why:
            problems[line.number] = why
        else:
            outcome.records += 1
    return problems


def _refused(operation: dict[str, Any]) -> str | None:
    try:
        publishing.parse_operation(operation)
    except ValidationError as error:
        return _why(publishing.error_details(error))
    return None


def _why(errors: dict[str, list[str]] | list[str]) -> str:
    """What the write path's errors say, in one line: `title: This field is required.`"""
    if isinstance(errors, dict):
        return "; ".join(f"{name}: {' '.join(map(str, why))}" for name, why in errors.items())
    return " ".join(map(str, errors))


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


def _json_lines(lines: Iterable[tuple[int, str]]) -> Iterator[Line]:
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


def _csv_rows(lines: Iterable[tuple[int, str]]) -> Iterator[Line]:
    """Each row of a CSV file with a header row, numbered by the line it starts on (a
    quoted cell may hold line breaks). Read strictly: a quote left open, which would
    swallow every line after it into one cell, stops the reading at the row it opens."""
    numbers: list[int] = []

    def texts():
        for number, text in lines:
            numbers.append(number)
            yield text

    reader = csv.reader(texts(), strict=True)
    start = 1
    try:
        header = next(reader, None)
        if header is None or "key" not in header:
            raise _Unreadable(1, "the first line is a header row naming a key column")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise _Unreadable(1, f"the header names the column {repeated[0]!r} twice; "
                                 "name each column once")
        while True:
            start = len(numbers) + 1
            row = next(reader, None)
            if row is None:
                return
            if any(row):
                yield _csv_line(start, header, row)
    except csv.Error as error:
        raise _Unreadable(start, _csv_problem(error, start, len(numbers))) from None


def _csv_problem(error: csv.Error, start: int, end: int) -> str:
    """What a csv.Error means for the row starting on line `start` (read up to `end`)."""
    if str(error) == "unexpected end of data":  # the file ended inside quotes
        return (f"not CSV: a quoted cell opened in this row is not closed (the file ends "
                f"inside it, on line {end}); double a quote inside a quoted cell (\"\")")
    return f"not CSV: {error}" + (f" (on line {end})" if end != start else "")


def _csv_line(number: int, header: list[str], row: list[str]) -> Line:
    if len(row) > len(header):
        return Line(number, problem=f"{len(row)} cells, but the header names {len(header)}")
    cells = dict(zip(header, row, strict=False))
    value: dict[str, Any] = {"key": cells.pop("key", None)}
    extra = {}
    for name, text in cells.items():
        if name in JSON_COLUMNS:
            if text:
                try:
                    value[name] = jsoninput.loads(text)
                except json.JSONDecodeError as error:
                    return Line(number, problem=f"{name}: not JSON: {error.msg} "
                                                f"(column {error.colno} of the cell)")
                except jsoninput.JSONInputError as error:
                    return Line(number, problem=f"{name}: JSON refused: {error.msg}")
        elif name in RECORD_COLUMNS or name == "deleted":
            value[name] = text
        elif text:
            extra[name] = text
    if extra:
        metadata = value.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            return Line(number, problem="metadata: Must be a JSON object.")
        both = sorted(set(extra) & set(metadata))
        if both:
            return Line(number, problem=f"{both[0]}: both a column and a field of metadata")
        metadata.update(extra)
    deleted = value.get("deleted", "").strip().lower()
    if deleted not in TRUE | FALSE:
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
