"""The rules a record must satisfy before it may enter a feed: one set, for every caller.

A string that XML 1.0 cannot carry would make a page unrenderable the moment it is
sealed, and a sealed page can never be fixed; so every string is checked here, before
the write path appends anything. Errors name the field, as `{"field": ["why"]}`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

from django.core.exceptions import ValidationError

MAX_KEY_LENGTH = 200
MAX_TITLE_LENGTH = 1000
MAX_SUMMARY_LENGTH = 10_000
MAX_LINKS = 20
MAX_HREF_LENGTH = 2000
MAX_METADATA_BYTES = 100_000
# Deeper JSON exhausts Python's recursion limit on its way to the database (a 500).
MAX_METADATA_DEPTH = 64
MAX_LANGUAGE_LENGTH = 35
MAX_NOTE_LENGTH = 500  # a change's note (why it was made), kept with its entry

LINK_FIELDS = ("href", "rel", "type", "title")
LINK_FIELD_SET = frozenset(LINK_FIELDS)
LINK_SCHEMES = ("http", "https", "urn", "tag")
RECORD_ENTRY_TYPE = "application/atom+xml"
RECORD_PAGE_TYPE = "text/html"
# The alternate links feedpub gives every active entry itself, by type: a producer's
# alternate of one of these types would be a second of its type (RFC 4287 4.1.2).
FEEDPUB_ALTERNATES = {RECORD_ENTRY_TYPE: "the record's own URL",
                      RECORD_PAGE_TYPE: "the record's page for people"}
IANA_RELATIONS = "http://www.iana.org/assignments/relation/"

# A language tag (BCP 47) as xml:lang and HTML's lang carry it: a primary subtag, then
# subtags of letters and digits (a feed's language follows the same rule).
LANGUAGE_RE = re.compile(r"^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*\Z")
LANGUAGE_PATTERN = LANGUAGE_RE.pattern.replace(r"\Z", "$")  # (the OpenAPI schema's)
LANGUAGE_MESSAGE = "Enter a language tag (BCP 47) such as en, de or pt-BR."

# RFC 3986 "unreserved": a key is one path segment that needs no escaping anywhere.
KEY_RE = re.compile(r"[A-Za-z0-9._~-]+")
# clean_key's rule as one pattern, for the OpenAPI schema: those characters, but neither
# "." nor ".." (no lookahead: not every tool that reads the schema has it).
KEY_PATTERN = (r"^([A-Za-z0-9_~-][A-Za-z0-9._~-]*|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
               r"|\.\.[A-Za-z0-9._~-]+)$")
# The complement of XML 1.0's Char production (section 2.2); lone surrogates included.
# Written with escapes only, so that the OpenAPI schema's patterns (XML_TEXT_PATTERN,
# NON_BLANK_XML_TEXT_PATTERN) carry it as it is: ECMA-262 regexes read it the same. They
# leave the surrogates out: a lone one is no Unicode character, so no JSON Schema string
# (and Rust's regexes, which some validators use, refuse to name them).
XML_ILLEGAL_CLASS = r"\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff"
XML_ILLEGAL_RE = re.compile(f"[{XML_ILLEGAL_CLASS}\ud800-\udfff]")
XML_TEXT_PATTERN = f"^[^{XML_ILLEGAL_CLASS}]*$"
# What str.isspace() (and so str.strip()) calls whitespace, spelt out: `\\s` differs
# between Python and the ECMA-262 regexes of the OpenAPI schema (U+0085, U+FEFF).
WHITESPACE_CLASS = (r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
                    r"\u205f\u3000")
NON_BLANK_XML_TEXT_PATTERN = (
    f"^[^{XML_ILLEGAL_CLASS}]*[^{XML_ILLEGAL_CLASS}{WHITESPACE_CLASS}][^{XML_ILLEGAL_CLASS}]*$")
# The rules of a link's href, rel and type, each one pattern: the write path matches it
# whole, and the OpenAPI schema publishes it as it is (escapes and classes both dialects
# read alike), so that what the schema allows is what is taken. An absolute http or https
# URI has a host part (RFC 3986's authority: no [IPv6] literal), a urn or tag URI
# something after its colon; no whitespace, nothing XML cannot carry. urlsplit reads every
# such URI (tests/test_publishing.py): the host part holds none of the characters whose
# compatibility form is one of / ? # @ :, which urlsplit refuses there.
NETLOC_UNSAFE_CLASS = (r"\u2047-\u2049\u2100\u2101\u2105\u2106\u2a74\ufe13\ufe16\ufe55"
                       r"\ufe56\ufe5f\ufe6b\uff03\uff0f\uff1a\uff1f\uff20")
_URI_CHAR = f"[^{XML_ILLEGAL_CLASS}{WHITESPACE_CLASS}]"
_HOST_CHAR = f"[^/?#\\[\\]{XML_ILLEGAL_CLASS}{WHITESPACE_CLASS}{NETLOC_UNSAFE_CLASS}]"
_ABSOLUTE_URI = (f"[Hh][Tt][Tt][Pp][Ss]?://{_HOST_CHAR}+([/?#]{_URI_CHAR}*)?"
                 f"|([Uu][Rr][Nn]|[Tt][Aa][Gg]):[^/?#{XML_ILLEGAL_CLASS}{WHITESPACE_CLASS}]"
                 f"{_URI_CHAR}*")
ABSOLUTE_URI_PATTERN = f"^({_ABSOLUTE_URI})$"
# A registered relation name (RFC 8288 reg-rel-type) or else an absolute URI; empty for
# the default, alternate.
_REL_NAME = "[a-z][a-z0-9.-]*"
REL_PATTERN = f"^({_REL_NAME}|{_ABSOLUTE_URI})?$"
# RFC 6838 type/subtype (restricted-name), optionally followed by parameters (RFC 9110
# 5.6.6: spaces and tabs around the semicolons); empty for none.
_MEDIA_NAME_CHAR = "[A-Za-z0-9!#$&^_.+-]"
MEDIA_TYPE_PATTERN = (
    f"^([A-Za-z0-9]{_MEDIA_NAME_CHAR}{{0,126}}/[A-Za-z0-9]{_MEDIA_NAME_CHAR}{{0,126}}"
    f'([ \\t]*;[ \\t]*{_MEDIA_NAME_CHAR}+=("[^"{XML_ILLEGAL_CLASS}]*"|{_MEDIA_NAME_CHAR}+))*)?$')
ABSOLUTE_URI_RE = re.compile(ABSOLUTE_URI_PATTERN)
REL_RE = re.compile(REL_PATTERN)
REL_NAME_RE = re.compile(_REL_NAME)
MEDIA_TYPE_RE = re.compile(MEDIA_TYPE_PATTERN)

# What a person is told before they write a record (the admin's help texts), from the
# rules below; the examples pass clean_record as they are (tests/test_admin_ux.py).
KEY_CHARACTERS = "ASCII letters, digits and . _ ~ -"
KEY_HELP = (f"The record's name in its URL, for ever: 1 to {MAX_KEY_LENGTH} {KEY_CHARACTERS} "
            "(not '.' or '..'). It cannot change once the record exists.")
KEY_EXAMPLE = "isbn-9780141439518"
METADATA_HELP = (f"A JSON object of any fields, at most {MAX_METADATA_BYTES:,} bytes and "
                 f"{MAX_METADATA_DEPTH} levels deep; its strings (keys included) may hold "
                 "only what XML 1.0 allows: no control characters other than tab, newline "
                 "and carriage return.")
METADATA_EXAMPLE = {"creator": "Austen, Jane", "year": 1813, "subjects": ["Courtship", "England"]}
LINKS_HELP = (f"A JSON list of at most {MAX_LINKS} links, each an object with "
              f"{', '.join(LINK_FIELDS)}: href an absolute {'/'.join(LINK_SCHEMES)} URI "
              "(required); rel a relation name or URI (alternate when left out); type a media "
              "type such as text/html; title any text. At most one alternate link per type, "
              f"none of type {' or '.join(FEEDPUB_ALTERNATES)}: feedpub links the record's "
              "own URL and its page for people with those (give a catalogue page rel "
              "related).")
LINKS_EXAMPLE = [
    {"href": "https://example.org/books/pride-and-prejudice", "rel": "related",
     "type": "text/html", "title": "Catalogue page"},
    {"href": "https://example.org/covers/pride.jpg", "rel": "enclosure", "type": "image/jpeg",
     "title": "Cover"},
]


@dataclass(frozen=True)
class Link:
    href: str
    rel: str = "alternate"
    type: str = ""
    title: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"href": self.href, "rel": self.rel, "type": self.type, "title": self.title}


@dataclass(frozen=True)
class RecordData:
    """A record's content as a producer sets it: what a put stores and compares."""

    title: str
    summary: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    links: tuple[Link, ...] = ()
    language: str = ""  # of its title and summary, when not the feed's
    # The metadata as JSON text, when validation encoded it: the write path stores it.
    metadata_json: str = field(default="", compare=False, repr=False)

    def link_dicts(self) -> list[dict[str, str]]:
        return [link.as_dict() for link in self.links]

    def stored(self) -> tuple[Any, ...]:
        """Its fields in RECORD_FIELDS' order, as a record stores them (links as dicts)."""
        values = list(_record_fields(self))
        values[_LINKS] = self.link_dicts()
        return tuple(values)


def clean_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValidationError({"key": ["A key is a non-empty string."]})
    if len(key) > MAX_KEY_LENGTH:
        raise ValidationError({"key": [
            f"A key has at most {MAX_KEY_LENGTH} characters (it has {len(key)})."]})
    if not KEY_RE.fullmatch(key) or key in {".", ".."}:
        raise ValidationError(
            {"key": [f"A key may only hold {KEY_CHARACTERS} (URL-safe), "
                     "and may not be '.' or '..'."]}
        )
    return key


def clean_record(data: Any) -> RecordData:
    """Check a producer's record body and return it as RecordData, or raise ValidationError."""
    if isinstance(data, RecordData):
        return data
    if not isinstance(data, Mapping):
        raise ValidationError({"record": ["A record is a JSON object."]})
    errors: dict[str, list[str]] = {}
    if not RECORD_FIELD_SET.issuperset(data):
        for name in sorted(set(data) - RECORD_FIELD_SET):
            errors[str(name)] = [
                f"Unknown field; a record has only {', '.join(RECORD_FIELDS)}."]
    cleaned = {}
    for name, _, check in RECORD_CHECKS:
        if name not in data:
            if name == "title":
                errors[name] = ["This field is required."]
            continue
        try:
            cleaned[name] = check(data[name])
        except ValidationError as error:
            errors[name] = error.messages
    if errors:
        raise ValidationError(errors)
    if "metadata" in cleaned:
        cleaned["metadata"], cleaned["metadata_json"] = cleaned["metadata"]
    return RecordData(**cleaned)


FEED_TEXT_FIELDS = ("title", "subtitle", "author")


def clean_feed_text(fields: Mapping[str, Any]) -> None:
    """A feed's title, subtitle and author go into every document of the feed, sealed
    pages included: refuse what XML 1.0 cannot carry, naming the field."""
    errors = {}
    for name in FEED_TEXT_FIELDS:
        value = fields.get(name)
        problem = xml_problem(value) if isinstance(value, str) else None
        if problem:
            errors[name] = [problem]
    if errors:
        raise ValidationError(errors)


def clean_note(value: Any) -> str:
    """A change's note, as any text is checked (never published, but shown in the admin and
    the history, and kept as long as the log)."""
    try:
        return _text(value, MAX_NOTE_LENGTH)
    except ValidationError as error:
        raise ValidationError({"note": error.messages}) from None


def xml_problem(text: str) -> str | None:
    """Why `text` cannot appear in an XML 1.0 document, or None when it can. The position
    counts from 1, as a person counts (and as a JSON error's line and column do)."""
    bad = XML_ILLEGAL_RE.search(text)
    if bad is None:
        return None
    return (f"Character U+{ord(bad.group()):04X} at position {bad.start() + 1} "
            "is not allowed in XML.")


def _text(value: Any, max_length: int, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValidationError("Must be a string.")
    if required and not value.strip():
        raise ValidationError("Must not be blank.")
    if len(value) > max_length:
        raise ValidationError(f"At most {max_length} characters.")
    problem = xml_problem(value)
    if problem:
        raise ValidationError(problem)
    return value


def _language(value: Any) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_LANGUAGE_LENGTH \
            or not LANGUAGE_RE.match(value):
        raise ValidationError(f"{LANGUAGE_MESSAGE} Leave it empty for the feed's language.")
    return value


def check_metadata(value: Any) -> tuple[dict[str, Any], str]:
    """The metadata and its JSON text (ensure_ascii off), or ValidationError."""
    if not isinstance(value, dict):
        raise ValidationError("Must be a JSON object.")
    depth, strings = _walk(value)
    if depth > MAX_METADATA_DEPTH:
        raise ValidationError(f"At most {MAX_METADATA_DEPTH} levels of nested objects and lists.")
    try:
        encoded = _encode_strict_json(value)
    except (TypeError, ValueError) as error:  # e.g. 1e999 parses to inf: not JSON
        raise ValidationError(f"Must be plain JSON: {error}.") from None
    # PostgreSQL's jsonb has no negative zero: it would read back as 0 there, -0.0 on
    # SQLite. (JSON text is refused it earlier, by archives.jsoninput; this is for
    # Python callers.) Only text that shows one is walked for it.
    if "-0.0" in encoded and _has_negative_zero(value):
        raise ValidationError("Must not hold a negative zero (-0.0): it is stored as 0; "
                              "send 0, or a string.")
    # json.dumps escapes control characters, so check the strings themselves: all at once
    # (one search of their join, which no separator can fool: a newline is allowed), and
    # one by one only to name the first bad one.
    if XML_ILLEGAL_RE.search("\n".join(strings)):
        for text in strings:
            problem = xml_problem(text)
            if problem:
                raise ValidationError(f"{problem} (in {text[:40]!r})")
    if len(encoded.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES:
        raise ValidationError(f"At most {MAX_METADATA_BYTES} bytes of JSON.")
    return value, encoded


# json.dumps(value, ensure_ascii=False, allow_nan=False), its encoder made once.
_encode_strict_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def _walk(value: Any) -> tuple[int, list[str]]:
    """How deeply objects and lists nest in `value`, and its strings (keys included, as
    str), found level by level (not by recursion, which is what deep input would break);
    the walk stops past the depth limit."""
    depth, level, strings = 0, [value], []
    while depth <= MAX_METADATA_DEPTH:
        containers: list[dict[Any, Any] | list[Any]] = []
        for item in level:
            if isinstance(item, str):
                strings.append(item)
            elif isinstance(item, dict):
                containers.append(item)
                strings.extend(map(str, item))
            elif isinstance(item, list):
                containers.append(item)
        if not containers:
            break
        depth += 1
        level = [child for container in containers
                 for child in (container.values() if isinstance(container, dict) else container)]
    return depth, strings


def _has_negative_zero(value: Any) -> bool:
    level = [value]
    while level:  # level by level, as _walk (the depth is checked already)
        if any(isinstance(item, float) and item == 0 and math.copysign(1, item) < 0
               for item in level):
            return True
        level = [child for item in level if isinstance(item, dict | list)
                 for child in (item.values() if isinstance(item, dict) else item)]
    return False


def _links(value: Any) -> tuple[Link, ...]:
    if not isinstance(value, list):
        raise ValidationError("Must be a list of links.")
    if len(value) > MAX_LINKS:
        raise ValidationError(f"At most {MAX_LINKS} links.")
    links = tuple(_link(index, item) for index, item in enumerate(value))
    _check_alternates(links)
    return links


def _check_alternates(links: tuple[Link, ...]) -> None:
    """RFC 4287 4.1.2: an entry has at most one alternate link of each type and hreflang
    (links here have no hreflang), counting the two feedpub adds. Types compare without
    their parameters and case: text/html;charset=utf-8 is text/html to a reader."""
    seen: dict[str, int] = {}
    for index, link in enumerate(links):
        if link.rel != "alternate":
            continue
        kind = link.type.split(";")[0].strip().lower()
        what = f"of type {kind}" if kind else "without a type"
        if kind in FEEDPUB_ALTERNATES:
            raise ValidationError(
                f"links[{index}]: feedpub already links {FEEDPUB_ALTERNATES[kind]} as the "
                f"entry's alternate {what}, and an entry may have only one alternate link "
                "of each type (RFC 4287 4.1.2); give this link another rel, such as "
                "related.")
        if kind in seen:
            raise ValidationError(
                f"links[{index}]: a second alternate link {what} (the first is "
                f"links[{seen[kind]}]); an entry may have only one of each type (RFC 4287 "
                "4.1.2): give one of them another rel, such as related.")
        seen[kind] = index


def _link(index: int, item: Any) -> Link:
    where = f"links[{index}]"
    if not isinstance(item, Mapping):
        raise ValidationError(f"{where}: must be an object with href, rel, type, title.")
    if not LINK_FIELD_SET.issuperset(item):
        unknown = sorted(set(item) - LINK_FIELD_SET)
        raise ValidationError(f"{where}: unknown field {unknown[0]!r}.")
    href = item.get("href")
    if not isinstance(href, str) or not _is_absolute_uri(href):
        raise ValidationError(
            f"{where}.href: must be an absolute {'/'.join(LINK_SCHEMES)} URI (an http or "
            "https one with a host), without spaces."
        )
    # Left out, null or "": the default. (Not any falsy value: [] or {} is no rel at all.)
    rel = "alternate" if item.get("rel") in (None, "") else item["rel"]
    if not isinstance(rel, str) or not _matches(REL_RE, rel, MAX_HREF_LENGTH):
        raise ValidationError(f"{where}.rel: must be a relation name or an absolute URI.")
    if REL_NAME_RE.fullmatch(rel.removeprefix(IANA_RELATIONS)):
        rel = rel.removeprefix(IANA_RELATIONS)  # RFC 4287 4.2.7.2: the same relation
    media_type = "" if item.get("type") is None else item["type"]
    if not isinstance(media_type, str) or not _matches(MEDIA_TYPE_RE, media_type):
        raise ValidationError(f"{where}.type: must be a media type such as text/html.")
    try:
        title = _text(item.get("title"), MAX_TITLE_LENGTH)
    except ValidationError as error:
        raise ValidationError(f"{where}.title: {error.messages[0]}") from None
    return Link(href, rel, media_type, title)


def _is_absolute_uri(text: str) -> bool:
    return _matches(ABSOLUTE_URI_RE, text, MAX_HREF_LENGTH)


def _matches(rule: re.Pattern[str], text: str, max_length: int | None = None) -> bool:
    # (Lone surrogates too: the patterns leave them to xml_problem, as XML_TEXT_PATTERN.)
    return ((max_length is None or len(text) <= max_length)
            and rule.fullmatch(text) is not None and xml_problem(text) is None)


# A record's fields, said once: each with the JSON type a body gives it (str: text, which a
# CSV cell or a form's input holds as it is; dict or list: JSON, in a cell or a box of its
# own) and its check, in the order errors are reported. RecordData holds them; the API, the
# admin's form and `import_records` read their fields from here (RECORD_FIELDS,
# RECORD_FIELD_TYPES), so a field added here is one they take.
RECORD_CHECKS: tuple[tuple[str, type, Callable[[Any], Any]], ...] = (
    ("title", str, partial(_text, max_length=MAX_TITLE_LENGTH, required=True)),
    ("summary", str, partial(_text, max_length=MAX_SUMMARY_LENGTH)),
    ("metadata", dict, check_metadata),
    ("links", list, _links),
    ("language", str, _language),
)
RECORD_FIELDS = tuple(name for name, _, _ in RECORD_CHECKS)
RECORD_FIELD_SET = frozenset(RECORD_FIELDS)
_record_fields = attrgetter(*RECORD_FIELDS)
_LINKS = RECORD_FIELDS.index("links")
RECORD_FIELD_TYPES = {name: kind for name, kind, _ in RECORD_CHECKS}
