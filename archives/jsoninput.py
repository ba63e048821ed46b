"""JSON as feedpub reads it from producers: the API's bodies, import files, the admin's boxes.

`json.loads` settles what JSON leaves open in ways that change data without a word: of two
members with one name the last wins (RFC 8259 section 4 leaves it to the reader), every
number with a fraction or exponent becomes a float (`1e-400` is 0.0,
`12345678901234567890.5` loses its last digits, `1e999` is infinity), `-0` is 0, and
deep nesting ends in a bare RecursionError. `loads` refuses each of these with
JSONInputError, naming the member or the number, so what is stored is what was sent.

Numbers are kept as json reads them (int, or float when the float gives back the same
decimal value; a whole number past 2**53 written with an exponent, as an int): what the
database keeps (PostgreSQL's jsonb keeps decimals exactly, but has no negative zero) and
every document shows (`json.dumps`, the shortest decimal that reads back as the float)
is then the value that was sent, on SQLite and PostgreSQL alike. A number that needs
more precision than a float has, or a negative zero, is refused: send it as a string.
"""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from typing import Any

from archives.validation import MAX_METADATA_DEPTH

# The deepest JSON anyone sends: a batch body's metadata starts 4 levels down (body,
# operations, operation, record), and validation holds metadata to its own limit. Deeper
# JSON is refused whole, by one rule, whether or not Python's recursion limit ends its
# parsing first.
MAX_DEPTH = MAX_METADATA_DEPTH + 4
TOO_DEEP = (f"nested too deeply: more than {MAX_DEPTH} levels of objects and lists (a "
            f"record's metadata may have at most {MAX_METADATA_DEPTH})")
# Past this every float is a whole number (2**53: its 53 bits of mantissa are all used).
FLOAT_WHOLE = 2.0 ** 53
# Longer numbers are shown shortened in messages.
SHOWN_NUMBER_LENGTH = 40


class JSONInputError(ValueError):
    """JSON that is well formed but would not be stored as it was sent. `path` is where
    (`("metadata", "a", 0)`; empty for the whole text), `msg` says where and why."""

    def __init__(self, why: str, path: tuple[str | int, ...] = ()):
        self.why, self.path = why, path
        self.msg = f"at {path_text(path)}: {why}" if path else why
        super().__init__(self.msg)


def loads(text: str) -> Any:
    """`text` as JSON; raises json.JSONDecodeError when it is not JSON, JSONInputError
    when it would be stored other than it was sent (see the module's docstring), or
    holds NaN or Infinity, which json reads but JSON does not have."""
    try:
        value = _decoder.decode(text)
    except RecursionError:  # (deeper than Python's recursion limit, far past MAX_DEPTH)
        raise JSONInputError(TOO_DEEP) from None
    except JSONInputError:
        _locate(text)  # raises it again, saying where: the decoder's hooks cannot know
        raise
    if _too_deep(value):
        raise JSONInputError(TOO_DEEP)
    return value


def path_text(path: tuple[str | int, ...]) -> str:
    """A path as a person reads it: `metadata.a[0]`, `links[2].href`."""
    parts = []
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif step.isidentifier():
            parts.append(f".{step}" if parts else step)
        else:
            parts.append(f"[{json.dumps(step, ensure_ascii=False)}]")
    return "".join(parts)


class _Refused:
    """What a hook of the second reading leaves where the first one raised."""

    def __init__(self, error: JSONInputError):
        self.error = error


def _marking(hook):
    def marked(argument):
        try:
            return hook(argument)
        except JSONInputError as error:
            return _Refused(error)
    return marked


def _locate(text: str) -> None:
    """Read `text` again with hooks that leave a mark instead of raising, and raise the
    first mark's error with its path (only after a refusal: reading twice costs)."""
    decoder = json.JSONDecoder(
        object_pairs_hook=_marking(_unique_members), parse_float=_marking(_exact_number),
        parse_int=_marking(_exact_int), parse_constant=_marking(_not_json))
    try:
        value = decoder.decode(text)
    except RecursionError:
        raise JSONInputError(TOO_DEEP) from None
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:  # depth first, in the text's order
        path, item = stack.pop()
        if isinstance(item, _Refused):
            raise JSONInputError(item.error.why, path + item.error.path) from None
        if isinstance(item, dict):
            stack.extend(((*path, name), child) for name, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*path, index), child) for index, child in reversed(
                list(enumerate(item))))


def _too_deep(value: Any) -> bool:
    """Whether objects and lists nest more than MAX_DEPTH levels in `value`, walked level
    by level (not by recursion, which is what deep input would break)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_DEPTH):  # the containers one level further down, each time
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, dict | list)]
    return bool(level)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen = set()
        for name, _ in pairs:
            if name in seen:
                raise JSONInputError(f"the name {json.dumps(name, ensure_ascii=False)} "
                                     "appears twice in one object; give each member once",
                                     (name,))
            seen.add(name)
    return value


def _shown(literal: str) -> str:
    if len(literal) <= SHOWN_NUMBER_LENGTH:
        return literal
    return f"{literal[:SHOWN_NUMBER_LENGTH]}... ({len(literal)} characters)"


def _exact_number(literal: str) -> float | int:
    """A JSON number with a fraction or exponent: its float when that is the same number,
    an int when it is a whole number too large for a float to hold every digit of."""
    value = float(literal)
    if value == 0 and literal.startswith("-"):
        raise JSONInputError(f"the number {_shown(literal)} is a negative zero, which is "
                             "stored as 0; send 0, or a string")
    # repr is the shortest decimal that reads back as `value`: what json.dumps writes.
    # (Decimal compares values: 1.50 and 1.5 are the same number.)
    exact = Decimal(literal)
    if math.isinf(value) or Decimal(repr(value)) != exact:
        raise JSONInputError(
            f"the number {_shown(literal)} cannot be stored exactly (it would become "
            f"{value!r}); send it as a string, or with no more digits than a float keeps "
            "(15 significant ones always fit)")
    if abs(value) >= FLOAT_WHOLE:
        # jsonb keeps 6.022e23 as its decimal digits and gives back an integer, not the
        # float (binary: 602200000000000027262976) json makes of it: as that integer on
        # every database, it reads back equal, and a put of it again changes nothing.
        return int(exact)
    return value


def _exact_int(literal: str) -> int:
    if literal == "-0":
        raise JSONInputError("the number -0 is a negative zero, which is stored as 0; send "
                             "0, or a string")
    try:
        return int(literal)
    except ValueError:  # past sys.get_int_max_str_digits()
        raise JSONInputError(
            f"the number {_shown(literal)} has more than {sys.get_int_max_str_digits()} "
            "digits; send it as a string") from None


def _not_json(name: str) -> None:
    raise JSONInputError(f"{name} is not a JSON number; send it as a string")


_decoder = json.JSONDecoder(object_pairs_hook=_unique_members, parse_float=_exact_number,
                            parse_int=_exact_int, parse_constant=_not_json)
