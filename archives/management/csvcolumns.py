"""How `import_records` reads a CSV file's header and cells (docs/publishing/import.md#the-file):
which column fills which of a record's fields or metadata properties (`Columns`), and how a
cell becomes the JSON value of its property, typed by the feed's record schema (`CellType`).
The record's own columns follow its fields (archives.validation.RECORD_FIELDS): a text field
is a cell as it is, an object or list field a cell of JSON.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from archives import jsoninput, validation

if TYPE_CHECKING:  # (referencing documents its Resolver, but exports it only from here)
    from referencing._core import Resolver

# The record's fields a cell of JSON fills (an object or a list), by the type it must be.
JSON_COLUMNS = {name: kind for name, kind in validation.RECORD_FIELD_TYPES.items()
                if kind is not str}
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


class HeaderError(ValueError):
    """A header row that cannot be read: too wide, without `key`, or naming a column or a
    property twice; the message says why."""


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
            raise HeaderError(f"the header names {len(header):,} columns; a file has at "
                                 f"most {MAX_COLUMNS:,}")
        if "key" not in header:
            raise HeaderError("the first line is a header row naming a key column")
        counts = Counter(header)
        repeated = next((name for name in header if counts[name] > 1), None)
        if repeated is not None:
            raise HeaderError(f"the header names the column {repeated!r} twice; name "
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
                    raise HeaderError(f"the column {name!r} names no property: write "
                                         f"{METADATA_PREFIX}<name>")
            elif name not in OWN_COLUMNS or (name in SHARED_COLUMNS and name in declared
                                             and name not in explicit):
                named = name
            else:
                continue
            if named in filling:
                raise HeaderError(f"the columns {filling[named]!r} and {name!r} both fill "
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
            return json_cell(text, dict, "a JSON object")
        if self.kind != "array":
            return _scalar(text, self.kind)
        if self.items in ("object", "array"):
            return json_cell(text, list, "a JSON array")
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
            narrowed = [each for each in types if each is not None]
            if len(narrowed) == len(types):  # (a branch that allows any type: so does this)
                narrow(frozenset().union(*narrowed))
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
        branches = schema.get(name)
        for branch in branches if isinstance(branches, list) else []:
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


def json_cell(text: str, kind: type | None = None, named: str = "") -> Any:
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
