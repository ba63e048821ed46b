"""A record's metadata as people read it, by the version of its feed's record schema it was
checked under: each property labelled by its schema's `title` (else its name), its
`description` on hover, in the schema's order and then any others; lists as lists, objects
as nested definition lists, dates (`format` date, date-time) written out in the feed's
language, http(s) URLs as links. A record without a schema is shown the same way, its
names for labels.

Rendered here rather than by a recursive template include: each level of an include
costs Django about ten Python frames, and metadata may nest validation.MAX_METADATA_DEPTH
(64) levels deep, close to where includes exhaust Python's stack (100 levels do). Every
producer's string goes through format_html (escaped), and a link is made only of an
http(s) URL (never javascript:).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.utils import formats, translation
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

if TYPE_CHECKING:
    from referencing._core import Resolver

# Where a schema's own references resolve (validation checks that they all do, inside it).
BASE = "urn:feedpub:record-schema"
MAX_REFERENCES = 32  # followed in a row at one place (a schema may refer to itself)
FULL_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)  # RFC 3339's full-date
NOTHING = format_html('<span class="muted">{}</span>', "none")
# A date-time as RFC 3339 writes it (what the draft's date-time format checks).
RFC3339_DATE_TIME_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def html_link(href: str) -> str | None:
    """A producer's href, if a browser may follow it: only http(s) (no javascript:)."""
    try:
        return href if urlsplit(href).scheme.lower() in {"http", "https"} else None
    except ValueError:
        return None


class Schema:
    """The part of a record schema that describes one value: its keywords, those of what
    its `$ref`s lead to (its own first), and the resolver of its own references."""

    def __init__(self, contents: Any, resolver: Resolver | None):
        self.keywords: dict[str, Any] = {}
        self.resolver = resolver
        for _ in range(MAX_REFERENCES):
            if not isinstance(contents, dict) or resolver is None:
                return  # true, false, or no schema at all
            resolver = self.resolver = resolver.in_subresource(
                DRAFT202012.create_resource(contents))
            for name, value in contents.items():
                self.keywords.setdefault(name, value)
            reference = contents.get("$ref")
            if not isinstance(reference, str):
                return
            try:
                resolved = resolver.lookup(reference)
            except Unresolvable:
                return
            contents, resolver = resolved.contents, resolved.resolver

    @classmethod
    def of(cls, schema: dict[str, Any] | None) -> Schema:
        """The schema of a whole record's metadata (None: its feed had no schema)."""
        if schema is None:
            return cls(None, None)
        resource = DRAFT202012.create_resource(schema)
        return cls(schema, Registry().with_resource(BASE, resource).resolver(BASE))

    def text(self, keyword: str) -> str:
        value = self.keywords.get(keyword)
        return value.strip() if isinstance(value, str) else ""

    @cached_property
    def properties(self) -> dict[str, tuple[Any, Resolver | None]]:
        """Its properties by name, in its order, then those its allOf adds."""
        found: dict[str, tuple[Any, Resolver | None]] = {}
        for schema in self._all_of():
            properties = schema.keywords.get("properties")
            if isinstance(properties, dict):
                for name, sub in properties.items():
                    found.setdefault(name, (sub, schema.resolver))
        return found

    def _all_of(self, depth: int = 0) -> Iterator[Schema]:
        yield self
        parts = self.keywords.get("allOf")
        if isinstance(parts, list) and depth < MAX_REFERENCES:
            for part in parts:
                yield from Schema(part, self.resolver)._all_of(depth + 1)

    def order(self, names: Iterable[str]) -> list[str]:
        """`names` (an object's) in the schema's order, then the others as they come."""
        names = list(names)
        present = set(names)
        listed = [name for name in self.properties if name in present]
        shown = set(listed)
        return listed + [name for name in names if name not in shown]

    def property(self, name: str) -> Schema:
        """The schema of property `name` of an object it describes."""
        found = self.properties.get(name)
        if found is not None:
            return Schema(*found)
        patterns = self.keywords.get("patternProperties")
        if isinstance(patterns, dict):
            for pattern, sub in patterns.items():
                try:
                    if re.search(pattern, name):
                        return Schema(sub, self.resolver)
                except re.error:  # ECMA-262 syntax Python does not read: no match here
                    continue
        extra = self.keywords.get("additionalProperties")
        return Schema(extra if isinstance(extra, dict) else None, self.resolver)

    def item(self, index: int) -> Schema:
        """The schema of item `index` of an array it describes."""
        prefix = self.keywords.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return Schema(prefix[index], self.resolver)
        return self._items

    @cached_property
    def _items(self) -> Schema:
        """The schema of the items after prefixItems': one for all of a long list."""
        items = self.keywords.get("items")
        return Schema(items if isinstance(items, dict) else None, self.resolver)


def render(metadata: dict[str, Any], schema: dict[str, Any] | None, *,
           language: str) -> SafeString:
    """A record's metadata as HTML: a definition list, or "" when it has none. Dates are
    written as people of the feed's `language` write them."""
    if not metadata:
        return SafeString()
    with translation.override(language):
        return _object(metadata, Schema.of(schema))


def _object(value: dict[str, Any], schema: Schema) -> SafeString:
    if not value:
        return NOTHING
    return format_html('<dl class="metadata">{}</dl>', format_html_join(
        "", "{}<dd>{}</dd>", (_pair(name, value[name], schema.property(name))
                              for name in schema.order(value))))


def _pair(name: str, value: Any, schema: Schema) -> tuple[SafeString, SafeString]:
    return _label(name, schema), _value(value, schema)


def _label(name: str, schema: Schema) -> SafeString:
    label = schema.text("title") or name
    description = schema.text("description")
    if description:
        return format_html('<dt title="{}">{}</dt>', description, label)
    return format_html("<dt>{}</dt>", label)


def _value(value: Any, schema: Schema) -> SafeString:
    if isinstance(value, dict):
        return _object(value, schema)
    if isinstance(value, list):
        if not value:
            return NOTHING
        return format_html('<ul class="values">{}</ul>', format_html_join(
            "", "<li>{}</li>", ((_value(item, schema.item(index)),)
                                for index, item in enumerate(value))))
    if value is None:
        return NOTHING
    if isinstance(value, str):
        return _text(value, schema.text("format"))
    return format_html("{}", json.dumps(value))  # a number, true or false


def _text(value: str, kind: str) -> SafeString:
    if kind in ("date", "date-time") and (moment := _moment(value, kind)) is not None:
        machine, shown = moment
        return format_html('<time datetime="{}">{}</time>', machine, shown)
    href = html_link(value)
    if href is not None:
        return format_html('<a href="{}" rel="nofollow noopener">{}</a>', href, value)
    return format_html("{}", value)


def _moment(value: str, kind: str) -> tuple[str, str] | None:
    """A date's or date-time's (HTML's datetime attribute, what people read), or None
    for a string that is not one (shown as it is)."""
    try:
        if kind == "date":
            if not FULL_DATE_RE.fullmatch(value):
                return None
            day = date.fromisoformat(value)
            return day.isoformat(), formats.date_format(day, "DATE_FORMAT")
        if not RFC3339_DATE_TIME_RE.fullmatch(value):
            return None
        moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:  # no such day, or a leap second
        return None
    clock = moment.strftime("%H:%M:%S" if moment.second or moment.microsecond else "%H:%M")
    offset = moment.strftime("%z")  # as written: +0200
    zone = "UTC" if offset == "+0000" else f"UTC{offset[:3]}:{offset[3:]}"
    machine = moment.isoformat(timespec="milliseconds" if moment.microsecond else "seconds")
    return machine, f"{formats.date_format(moment.date(), 'DATE_FORMAT')}, {clock} {zone}"
