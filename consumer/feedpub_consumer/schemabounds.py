"""What checking a record against a record schema may cost, bounded: one implementation for
feedpub's server (which refuses a schema over the bounds when it is set) and for checkfeed
(which will not check records against a hostile server's schema over them).

A JSON Schema is a program. Three things in a small schema make checking one record cost
without bound, and each is bounded here before any record is checked:

- Subschemas applied at one place of a record multiply: `anyOf`, `allOf`, `oneOf`, `not`,
  `if`/`then`/`else`, `dependentSchemas` and `$ref` apply theirs to the same value, so 18
  levels of `{"anyOf": [{"$ref": next}, {"$ref": next}]}` apply 2^18 subschemas to one
  value. `schema_steps` counts them (a `$ref` followed, down to the deepest a record may be)
  and `check_schema` refuses a schema over MAX_SCHEMA_STEPS at any one place.
- A counted repetition is written out by the regex engine: `x{5000}y` against 70,000 `x`
  takes seconds. A pattern's size is its length with every `{n}`/`{n,m}` written out;
  `pattern`, `patternProperties` and `format: "regex"` accept the same expressions: ECMA-262
  syntax, at most MAX_PATTERN_SIZE once written out (`is_regex`).
- A refusal's report: the validator builds every error of a record, with every branch of
  every `anyOf` in it, as Python objects (about 25 us each): `errors` asks for them only when
  their number is bounded, and otherwise names the first place only, or none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

import jsonschema_rs
from jsonschema_rs import Draft202012Validator

# Subschema applications at one place of a record (a pattern counts its size): at most this
# many. Measured (docs/performance/record-schemas.md): at this bound the slowest record a
# schema can make (100,000 bytes of 33,000 values, every one at the bound) is checked in
# about 0.05 s, and four such writes at once, served, each in under 1 s (at 256, up to 1.3 s);
# the demo's schema applies at most 32 at one place, the tests' fewer.
MAX_SCHEMA_STEPS = 128
# A pattern's size with its counted repetitions written out (`[a-z]{2,8}` is 8). No larger
# than MAX_SCHEMA_STEPS, which a pattern counts toward: the refusal then names the pattern.
MAX_PATTERN_SIZE = 128
# A pattern's length in characters, looked at before its size: a long one is refused without
# reading it through (a class such as `[A-Za-z0-9._%+-]` is 16 characters of size 1).
MAX_PATTERN_LENGTH = 2_000
# What a `format: "regex"` counts, as a step: each string under it is read by Python
# (`is_regex`), some 2 us, where a subschema costs the validator 10-150 ns.
REGEX_FORMAT_WEIGHT = 32
# What counting a schema's cost may itself cost, in subschemas counted and places merged:
# a 100,000-byte schema can name a $ref to the whole at each of a thousand properties, at
# each of 64 levels (64 million, a minute); the demo's takes a few thousand.
MAX_COUNT_WORK = 2_000_000
# The largest metadata the bounds hold for (feedpub's MAX_METADATA_BYTES): checkfeed does not
# check a larger record a server sends.
MAX_RECORD_BYTES = 100_000
# What a report of a record's errors may cost, in errors the validator could build: values
# of the record times the schema's steps (bytes quoted: the same, times the depth).
MAX_ERROR_WORK = 10_000
MAX_ERROR_TEXT = 20_000_000
# The deepest a record may be, when the caller does not say (feedpub's MAX_METADATA_DEPTH).
DEFAULT_DEPTH = 64
# Where a schema without an $id is placed, for its relative $refs (nothing is fetched).
DEFAULT_BASE = "https://feedpub.invalid/record-schema"

IN_PLACE_SCHEMAS = ("not", "if", "then", "else")
IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
IN_PLACE_MAPS = ("dependentSchemas",)
ANY_PROPERTY = ("additionalProperties", "unevaluatedProperties", "propertyNames")
ANY_ITEM = ("items", "contains", "unevaluatedItems")

_format_checker = Draft202012Validator({"format": "regex"}, validate_formats=True)


class TooCostly(Exception):
    """A schema whose checking could cost without bound; the message says why."""


class Unfollowed(TooCostly):
    """A $ref the count cannot follow (the validator refuses most of them itself)."""


# Said of a record too large, under a schema of many steps, to report place by place (the
# validator would build every error of every branch: `errors`), by the server and checkfeed.
UNREPORTED_MISMATCH = ("metadata: does not match the record schema (a record this large is "
                       "not reported place by place under this schema; check it with any "
                       "JSON Schema validator)")


def pattern_size(pattern: str) -> int:
    """How long `pattern` is with every counted repetition written out, as the regex engine
    compiles it: `x{5000}y` is 5,001, `(ab){3}` 6, `(a{1000}){1000}` 1,000,000. Alternatives
    add up; `*`, `+` and `?` count once."""
    frames: list[list[int]] = [[0, 0]]  # [total, size of the last atom] per open group
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        frame = frames[-1]
        if char == "\\":
            i += 2
            if pattern[i - 1:i] in ("u", "p", "P", "x") and pattern[i:i + 1] == "{":
                i = pattern.find("}", i) + 1 or n  # \u{...}, \p{...}: no repetition
            frame[0] += 1
            frame[1] = 1
            continue
        if char == "[":
            i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            frame[0] += 1
            frame[1] = 1
        elif char == "(":
            frames.append([0, 0])
        elif char == ")" and len(frames) > 1:
            inner = max(frames.pop()[0], 1)
            frames[-1][0] += inner
            frames[-1][1] = inner
        elif char == "{":
            end = pattern.find("}", i)
            low, _, high = pattern[i + 1:end].partition(",") if end > 0 else ("", "", "")
            if low.isdigit() and (high.isdigit() or not high):
                times = int(high) if high else int(low) + (1 if "," in pattern[i:end] else 0)
                frame[0] += frame[1] * (times - 1)
                frame[1] *= times
                i = end
            else:
                frame[0] += 1
                frame[1] = 1
        elif char not in "*+?|^$":
            frame[0] += 1
            frame[1] = 1
        elif char == "|":
            frame[1] = 0
        i += 1
    while len(frames) > 1:  # (an unclosed group: the engine refuses it anyway)
        inner = frames.pop()[0]
        frames[-1][0] += inner
    return frames[0][0]


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` is not a regular expression feedpub takes, or None: `pattern`,
    `patternProperties` and `format: "regex"` all ask this."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return (f"the pattern {shorter(pattern, 60)!r} is {len(pattern):,} characters long; "
                f"at most {MAX_PATTERN_LENGTH:,}")
    size = pattern_size(pattern)
    if size > MAX_PATTERN_SIZE:
        return (f"the pattern {shorter(pattern, 60)!r} repeats more than {MAX_PATTERN_SIZE} "
                f"times once its counted repetitions ({{n}}, {{n,m}}) are written out "
                f"({size:,}); at most {MAX_PATTERN_SIZE}")
    if not _format_checker.is_valid(pattern):
        return f"{shorter(pattern, 60)!r}{NOT_ECMA}"
    return None


NOT_ECMA = " is not an ECMA-262 regular expression"


def is_regex(text: str) -> bool:
    """`format: "regex"` in a record: the rule `pattern` has in a schema."""
    return regex_problem(text) is None


def compile_validator(schema: Any, base_uri: str | None = None) -> Draft202012Validator:
    """The validator of a record schema, as the server and checkfeed compile it: every format
    of the draft checked (`regex` by feedpub's rule), nothing fetched. Raises
    jsonschema_rs.ValidationError for a schema that is not one."""
    return Draft202012Validator(schema, validate_formats=True, offline=True,
                                formats={"regex": is_regex}, base_uri=base_uri)


def shorter(text: str, length: int) -> str:
    return text if len(text) <= length else text[:length - 1] + "\u2026"


# Counting -------------------------------------------------------------------------------

@dataclass
class _Cost:
    """Subschemas applied at one value (`here`), and below it: at each property named, at any
    other property, at each item of a prefix, at any other item. Each figure below is the
    most applied at any one place under it."""

    here: int
    properties: dict[str, int] = field(default_factory=dict)
    any_property: int = 0
    items: dict[int, int] = field(default_factory=dict)
    any_item: int = 0

    def add(self, other: _Cost, limit: int) -> None:
        self.here = min(self.here + other.here, limit)
        self.properties = _merged(self.properties, self.any_property, other.properties,
                                  other.any_property, limit)
        self.any_property = min(self.any_property + other.any_property, limit)
        self.items = _merged(self.items, self.any_item, other.items, other.any_item, limit)
        self.any_item = min(self.any_item + other.any_item, limit)

    def most(self) -> int:
        return max(self.here, self.any_property, self.any_item, *self.properties.values(),
                   *self.items.values())


def _merged(mine: dict, my_default: int, theirs: dict, their_default: int, limit: int) -> dict:
    return {key: min(mine.get(key, my_default) + theirs.get(key, their_default), limit)
            for key in mine.keys() | theirs.keys()}


class _Counter:
    def __init__(self, schema: Any, base: str, limit: int, strict: bool):
        self.limit = limit
        self.strict = strict  # else a pattern that is not ECMA-262 counts by its size
        self.work = 0
        self.known: dict[tuple[int, int], _Cost] = {}
        self.pending: set[tuple[int, int]] = set()
        self.resources: dict[str, Any] = {}
        self.anchors: dict[tuple[str, str], Any] = {}
        self.dynamic: dict[str, list[Any]] = {}
        self.bases: dict[int, str] = {}
        self._index(schema, base)

    def _index(self, node: Any, base: str) -> None:
        level = [(node, base)]
        while level:
            deeper = []
            for item, where in level:
                if isinstance(item, dict):
                    if isinstance(item.get("$id"), str):
                        where = urldefrag(_joined(where, item["$id"]))[0]
                        self.resources.setdefault(where, item)
                    self.bases[id(item)] = where
                    if isinstance(item.get("$anchor"), str):
                        self.anchors[(where, item["$anchor"])] = item
                    if isinstance(item.get("$dynamicAnchor"), str):
                        self.anchors[(where, item["$dynamicAnchor"])] = item
                        self.dynamic.setdefault(item["$dynamicAnchor"], []).append(item)
                    deeper += [(child, where) for child in item.values()]
                elif isinstance(item, list):
                    deeper += [(child, where) for child in item]
            level = deeper
        self.resources.setdefault(base, node)

    def resolve(self, ref: str, node: dict) -> Any:
        target, fragment = urldefrag(_joined(self.bases[id(node)], ref))
        found = self.resources.get(target)
        if found is None:
            raise Unfollowed(f"$ref {ref!r} leads outside the schema")
        if fragment and not fragment.startswith("/"):
            anchor = self.anchors.get((target, fragment))
            if anchor is None:
                raise Unfollowed(f"$ref {ref!r} names no anchor of the schema")
            return anchor
        for step in filter(None, unquote(fragment).split("/")):
            step = step.replace("~1", "/").replace("~0", "~")
            if (isinstance(found, list) and step.isascii() and step.isdigit()
                    and int(step) < len(found)):
                found = found[int(step)]
            elif isinstance(found, dict) and step in found:
                found = found[step]
            else:
                raise Unfollowed(f"$ref {ref!r} leads nowhere in the schema")
        return found

    def cost(self, node: Any, depth: int, place: str) -> _Cost:
        if not isinstance(node, dict):
            return _Cost(1)
        key = (id(node), depth)
        if key in self.known:
            return self.known[key]
        if key in self.pending:
            raise TooCostly(f"at {place or 'the top level'}, a $ref leads back to where it "
                            "is without going deeper into the record: checking would never end")
        self.pending.add(key)
        found = _Cost(min(1 + self._weight(node, place), self.limit))
        if depth > 0:
            self._below(node, depth - 1, place, found)
        for name, child in self._in_place(node, place):
            cost = self.cost(child, depth, name)
            self._spend(1 + len(cost.properties) + len(cost.items))
            found.add(cost, self.limit)
        self.pending.discard(key)
        self.known[key] = found
        return found

    def _spend(self, work: int) -> None:
        self.work += work
        if self.work > MAX_COUNT_WORK:
            raise TooCostly("it is too intricate to bound what checking a record against it "
                            f"costs (counting that took more than {MAX_COUNT_WORK:,} steps: "
                            "many properties that each lead back through a $ref to the whole?)")

    def _below(self, node: dict, depth: int, place: str, found: _Cost) -> None:
        def most(child: Any, name: str) -> int:
            cost = self.cost(child, depth, f"{place}/{name}".lstrip("/"))
            self._spend(1 + len(cost.properties) + len(cost.items))
            return cost.most()

        patterns = node.get("patternProperties")
        anywhere = sum(most(child, f"patternProperties/{name}")
                       for name, child in patterns.items()) if isinstance(patterns, dict) else 0
        anywhere += sum(most(node[name], name) for name in ANY_PROPERTY if name in node)
        properties = node.get("properties")
        if isinstance(properties, dict):
            found.properties = {name: min(most(child, f"properties/{name}") + anywhere,
                                          self.limit)
                                for name, child in properties.items()}
        found.any_property = min(anywhere, self.limit)
        any_item = sum(most(node[name], name) for name in ANY_ITEM if name in node)
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            found.items = {index: min(most(child, f"prefixItems/{index}") + any_item,
                                      self.limit)
                           for index, child in enumerate(prefix)}
        found.any_item = min(any_item, self.limit)

    def _in_place(self, node: dict, place: str) -> Iterator[tuple[str, Any]]:
        def at(name: str) -> str:
            return f"{place}/{name}".lstrip("/")

        for name in IN_PLACE_SCHEMAS:
            if name in node:
                yield at(name), node[name]
        for name in IN_PLACE_LISTS:
            if isinstance(node.get(name), list):
                yield from ((at(f"{name}/{i}"), child) for i, child in enumerate(node[name]))
        for name in IN_PLACE_MAPS:
            if isinstance(node.get(name), dict):
                yield from ((at(f"{name}/{key}"), child) for key, child in node[name].items())
        if isinstance(node.get("$ref"), str):
            yield at("$ref"), self.resolve(node["$ref"], node)
        if isinstance(node.get("$dynamicRef"), str):
            ref = node["$dynamicRef"]
            yield at("$dynamicRef"), self.resolve(ref, node)
            anchor = urldefrag(ref)[1]
            yield from ((at("$dynamicRef"), target) for target in self.dynamic.get(anchor, ()))

    def _weight(self, node: dict, place: str) -> int:
        """What a subschema costs beyond one step: its patterns, their size; an enum's values
        that are not strings (strings are looked up by hash, the rest one by one)."""
        patterns = [(f"{place}/pattern", node["pattern"])] if isinstance(
            node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += [(f"{place}/patternProperties", name)
                         for name in node["patternProperties"]]
        weight = REGEX_FORMAT_WEIGHT if node.get("format") == "regex" else 0
        for where, pattern in patterns:
            problem = regex_problem(pattern)
            if problem and (self.strict or not problem.endswith(NOT_ECMA)):
                raise TooCostly(f"at {where.lstrip('/')}, {problem}")
            weight += pattern_size(pattern)
        if isinstance(node.get("enum"), list):
            weight += sum(not isinstance(value, str) for value in node["enum"])
        return weight


def _joined(base: str, reference: str) -> str:
    try:
        return urljoin(base, reference)
    except ValueError:  # (`http://[x/`: not a URI)
        raise Unfollowed(f"{reference!r} is not a URI reference") from None


def schema_steps(schema: Any, *, depth: int = DEFAULT_DEPTH, base: str = DEFAULT_BASE,
                 limit: int = MAX_SCHEMA_STEPS, strict: bool = True) -> int:
    """The most subschemas checking a record of at most `depth` levels against `schema`
    applies at any one place of it (a pattern counts its size), up to `limit` + 1; TooCostly
    for a pattern over MAX_PATTERN_SIZE, a $ref cycle that never goes deeper, or a $ref this
    count cannot follow. `strict=False` (a version stored before the bounds): a pattern that
    is not ECMA-262 counts by its size rather than being refused."""
    counter = _Counter(schema, base, limit + 1, strict)
    try:
        return counter.cost(schema, depth, "").most()
    except RecursionError:
        raise TooCostly("its $refs lead through each other too many times over") from None


def check_schema(schema: Any, *, depth: int = DEFAULT_DEPTH, base: str = DEFAULT_BASE,
                 strict: bool = True) -> int:
    """The schema's steps (`schema_steps`), or TooCostly saying why it costs too much."""
    steps = schema_steps(schema, depth=depth, base=base, strict=strict)
    if steps > MAX_SCHEMA_STEPS:
        raise TooCostly(
            f"checking a record against it could apply more than {MAX_SCHEMA_STEPS} "
            "subschemas at one place of the record (anyOf, allOf, oneOf and $ref multiply "
            f"them; a pattern counts its length); at most {MAX_SCHEMA_STEPS}")
    return steps


# Reporting ------------------------------------------------------------------------------

def record_size(instance: Any) -> tuple[int, int, int]:
    """(values, depth, characters of its strings) of a JSON value, level by level."""
    values = depth = characters = 0
    level = [instance]
    while level:
        depth += 1
        values += len(level)
        deeper: list[Any] = []
        for item in level:
            if isinstance(item, str):
                characters += len(item)
            elif isinstance(item, dict):
                characters += sum(map(len, item))
                deeper += item.values()
            elif isinstance(item, list):
                deeper += item
        level = deeper
    return values, depth, characters


def errors(validator: Draft202012Validator, instance: Any, *, steps: int
           ) -> list[tuple[list[str | int], str]]:
    """Where `instance`, which the validator has refused, does not match: (path, why) by
    path; [] when the report could cost more than MAX_ERROR_WORK (a large record under a
    schema of many steps: `steps`, from `check_schema`)."""
    values, depth, characters = record_size(instance)
    if (values * steps <= MAX_ERROR_WORK
            and (values + characters) * depth * steps <= MAX_ERROR_TEXT):
        return sorted((error.instance_path, message(error))
                      for error in validator.iter_errors(instance))
    return []


def message(error: jsonschema_rs.ValidationError) -> str:
    """The validator's reason, but an enum's values in full (it names two and counts the
    rest: "or 3 other candidates")."""
    if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Enum):
        options = [json.dumps(option, ensure_ascii=False) for option in error.kind.options]
        value = json.dumps(error.instance, ensure_ascii=False)
        listed = " or ".join(filter(None, [", ".join(options[:-1]), options[-1]]))
        return f"{value} is not one of {listed}"
    return error.message
