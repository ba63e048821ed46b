"""A record's metadata edited as a form drawn from its feed's record schema (django-jsonform's
widget), and the write path's messages about it shown at the inputs they are about."""

from __future__ import annotations

import json
import re

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import format_html
from django_jsonform.utils import ErrorMap
from django_jsonform.widgets import JSONFormWidget

from archives.documents import urls
from archives.models import Feed

from .fields import PrettyJSONField

GROUP_TYPES = {"object", "array"}
DRAWN_UNTYPED = {"$ref", "const"}
# Choices between schemas: drawn by django-jsonform in its own way, not the standard's.
COMBINATORS = {"allOf", "anyOf", "oneOf"}
# Its time picker writes 10:30, which `time` refuses (10:30:00): a text input instead.
TEXT_FORMATS = {"time"}


class _Undrawable(Exception):  # (not an error: the metadata stays a JSON box)
    pass


def form_schema(schema: dict) -> dict | None:
    """A feed's record schema (JSON Schema 2020-12) in django-jsonform's dialect, to draw the
    metadata form with. Only what the widget reads differently is said again (a type where
    the standard infers one, help texts, a text input for times); this draws and checks
    nothing: the write path checks each record against the schema itself. None when the
    widget cannot draw the schema (no properties, an untyped one, allOf/anyOf/oneOf): the
    metadata is then a JSON box, as for a feed without a schema."""
    if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        return None
    try:
        return _drawn({**schema, "type": "object"})
    except _Undrawable:
        return None


def _drawn(node):
    """One subschema as the widget draws it (the schema's data, such as enum, const and
    default, is copied as it is)."""
    if not isinstance(node, dict) or COMBINATORS & node.keys():
        raise _Undrawable
    drawn = dict(node)
    for name in ("properties", "$defs"):
        if name in node:
            if not isinstance(node[name], dict):
                raise _Undrawable
            drawn[name] = {key: _drawn(sub) for key, sub in node[name].items()}
    if "items" in node:
        drawn["items"] = _drawn(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        drawn["additionalProperties"] = _drawn(node["additionalProperties"])
    if "type" not in node:
        if "properties" in node:
            drawn["type"] = "object"
        elif "items" in node:
            drawn["type"] = "array"
        elif not DRAWN_UNTYPED & node.keys():
            raise _Undrawable
    kinds = set(drawn["type"]) if isinstance(drawn.get("type"), list) else {drawn.get("type")}
    if "array" in kinds and "items" not in node:
        raise _Undrawable
    if "object" in kinds and "properties" not in node:
        if node.get("additionalProperties") in (None, False):
            raise _Undrawable  # an object of anything: nothing to draw
        drawn["properties"] = {}  # a map: the widget adds a key per "+"
    if node.get("format") in TEXT_FORMATS:
        del drawn["format"]
    if isinstance(node.get("description"), str) and not kinds & GROUP_TYPES:
        drawn.setdefault("help_text", node["description"])
    return drawn


_BLANK = object()


def _filled(value):
    """`value` without what was left empty in the form (the widget sends null or "" for an
    input left empty, and a group of them for a group), or _BLANK if nothing is left."""
    if value is None or (isinstance(value, str) and not value):
        return _BLANK
    if isinstance(value, dict):
        kept = {name: filled for name, item in value.items()
                if (filled := _filled(item)) is not _BLANK}
        return _BLANK if value and not kept else kept
    if isinstance(value, list):
        items = [filled for item in value if (filled := _filled(item)) is not _BLANK]
        return _BLANK if value and not items else items
    return value


# A place in an error of the write path, after "metadata": .name, [0] or ["a name"]
# (feedpub_consumer.schemacheck.metadata_path writes them).
ERROR_STEP_RE = re.compile(r'\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


# What the write path says of a property left out: it names the property's JSON name.
REQUIRED_RE = re.compile(r'("(?:[^"\\]|\\.)*") is a required property')
REQUIRED = "this field is required."


def placed(message: str) -> tuple[list[str | int], str]:
    """Where in the metadata the write path's "metadata.creators[0].name: why" is about (its
    steps; a property left out, at that property) and the why; a message about the whole
    record, or not of that form, at [] as it is."""
    steps: list[str | int] = []
    at = len("metadata")
    while message.startswith("metadata") and (step := ERROR_STEP_RE.match(message, at)):
        name, index, quoted = step.groups()
        steps.append(name if name else int(index) if index else json.loads(quoted))
        at = step.end()
    if not (message.startswith("metadata") and message.startswith(": ", at)):
        return [], message
    why = message[at + 2:]
    if required := REQUIRED_RE.fullmatch(why):
        return [*steps, json.loads(required[1])], REQUIRED
    return steps, why


def input_errors(messages: list[str]) -> ErrorMap:
    """The write path's messages by the input of the form each is about (django-jsonform's
    error map): a property left out at its own input; a message about the whole record, or
    one not of that form, at the top of the form."""
    found = ErrorMap()
    for message in messages:
        found.append(*placed(message))
    return found


def input_label(schema: dict, steps: list[str | int]) -> str:
    """The labels the drawn form shows on the way to an input, as django-jsonform writes
    them: a property's title, else its name with _ as spaces, capitalised (a map's key as it
    is); an item by its number, counted from 1. `Creators › item 1 › Name`."""
    labels, node = [], schema
    for step in steps:
        node = _referred(schema, node)
        if isinstance(step, int):
            labels.append(f"item {step + 1}")
            node = node.get("items", {})
            continue
        properties = node.get("properties") or {}
        if step in properties:
            node = _referred(schema, properties[step])
            title = node.get("title")
            labels.append(title if isinstance(title, str) and title else
                          step.replace("_", " ").capitalize())
        else:
            labels.append(step)
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else {}
    return " › ".join(labels)


def _referred(schema: dict, node) -> dict:
    """A subschema with its local `$ref` (`#/$defs/name`) merged in, as the widget draws it."""
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = (schema.get("$defs") or {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            return {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


class SchemaMetadataField(PrettyJSONField):
    """A record's metadata edited as a form drawn from its feed's record schema (by
    django-jsonform's widget, which posts what the form holds as JSON). It draws; the write
    path checks, and its messages are shown at the inputs they are about (show_refusal)."""

    def __init__(self, feed: Feed, version: int, drawn: dict):
        """`drawn`: version `version` of the feed's record schema, as form_schema draws it."""
        self.drawn = drawn
        url = urls.schema_url(feed.slug, version)
        super().__init__(
            empty=dict, required=False, initial=dict, widget=JSONFormWidget(schema=drawn),
            help_text=format_html(
                'A form drawn from the feed\'s <a href="{}">record schema (version {})</a>: '
                "fields marked * are required; \u201cAdd item\u201d adds one to a list. The "
                "record is checked against the schema when it is saved.", url, version))

    def to_python(self, value):
        if isinstance(value, str) and not value.strip():
            # The widget posts what it holds, always: nothing means its script did not run.
            raise ValidationError("The metadata form sent nothing (did its script run? "
                                  "it needs JavaScript): nothing was saved.", code="required")
        value = super().to_python(value)
        # An input left empty is a property left out (as a form means it), not null or "".
        filled = _filled(value) if isinstance(value, dict) else value
        return {} if filled is _BLANK else filled

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return "null"  # the widget reads JSON: it starts again from an empty form
        return super().prepare_value(value)

    def show_refusal(self, messages: list[str]) -> list[str]:
        """Show the write path's messages at the inputs they are about; return them as the
        field's own list says them: by the inputs' labels, not by JSON paths."""
        self.widget.add_error(input_errors(messages))
        return [f"{input_label(self.drawn, steps)}: {why}" if steps else why
                for steps, why in map(placed, messages)]
