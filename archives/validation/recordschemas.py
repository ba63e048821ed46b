"""Record schemas: a feed may declare a JSON Schema (draft 2020-12) for its records' metadata
(docs/describing-records.md). `check_record_schema` says whether a value is one feedpub
takes, `RecordChecker` is one compiled (once per version: archives.db.schemas), and the
write path asks it about every record it is given, beside the record's own rules (`records`).

The validator is jsonschema-rs (the Python `jsonschema` took ~90 us a record of ten
properties, halving batch ingest; this one takes ~1 us: bench/schema_cost.py). It checks
every format draft 2020-12 defines (date, date-time, email, uri, ...), and fetches nothing:
a $ref must resolve inside the schema. Compiling a schema, bounding its cost and naming a
record's mismatches are the consumer tools' too (feedpub_consumer.schemabounds and
schemacheck): checkfeed and the server agree on every record.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
from django.core.exceptions import ValidationError
from feedpub_consumer import schemabounds, schemacheck
from feedpub_consumer.schemacheck import SCHEMA_DIALECT

from .records import MAX_METADATA_DEPTH, RECORD_FIELD_TYPES, RECORD_FIELDS, check_metadata

# The 15 elements of the Dublin Core Metadata Element Set, which `x-dc` on a property names
# (OAI-PMH's oai_dc takes that element from the property).
DUBLIN_CORE_ELEMENTS = ("title", "creator", "subject", "description", "publisher",
                        "contributor", "date", "type", "format", "identifier", "source",
                        "language", "relation", "coverage", "rights")
DC_KEYWORD = "x-dc"
# A refusal names at most this many places in one record (the first, by path).
MAX_SCHEMA_ERRORS = 20
SCHEMA_HELP = ("A JSON Schema (draft 2020-12) for the records' metadata, or empty for none. "
               f"A property may name the Dublin Core element OAI-PMH fills from it with "
               f'"{DC_KEYWORD}": "creator" (or title, subject, date, ...). A change is kept as '
               "a new version, and is refused while live records do not match it.")
# What jsonschema-rs says of a $ref it would have to fetch (it fetches nothing: offline).
OUTSIDE_REF_RE = re.compile(r"Resource '([^']*)' is not present in a registry")


class SchemaOverBounds(ValidationError):
    """A record was to be checked against a stored version of its feed's schema that is over
    the bounds (stored before feedpub set them): it is never run, and the write is refused (a
    409 at the API: the feed's state decides, not the request)."""


class RecordChecker:
    """One version of a feed's record schema, compiled: `errors(metadata)` says where a
    record's metadata does not match it. A version over the bounds (`over_bounds` says why)
    is not compiled: it is read (`schema`, `dublin_core`), never run."""

    def __init__(self, schema: dict[str, Any], version: int | None = None, feed: str = ""):
        self.schema = schema
        self.version = version
        self.feed = feed  # its slug, which the refusal of a version over the bounds names
        self.over_bounds: str | None = None
        self._validator: jsonschema_rs.Draft202012Validator | None = None
        try:  # (check_record_schema refuses a new schema over them: only a stored one is;
            # a stored pattern that is not ECMA-262, `(?i)...`, runs as before, by its size)
            self.steps = schemabounds.check_schema(schema, depth=MAX_METADATA_DEPTH,
                                                   strict=False)
        except schemabounds.TooCostly as error:
            self.over_bounds = str(error)
        else:
            self._validator = schemabounds.compile_validator(schema)

    def errors(self, metadata: Any) -> list[str]:
        """What is wrong with `metadata`, each as `metadata.path: why`; [] when it matches.
        SchemaOverBounds, before anything is checked, for a version over the bounds."""
        if self._validator is None:
            raise SchemaOverBounds(
                f"The record schema in force for the feed {self.feed!r} (version "
                f"{self.version}) was stored before feedpub bounded what checking a record "
                f"may cost, and is over those bounds: {self.over_bounds}. It is never run "
                "against a record, so no record can be put into this feed until its "
                "maintainer sets a new schema (checked against the live records as usual); "
                "deleting records still works. (docs/describing-records.md, What feedpub "
                "takes.)")
        return schemacheck.mismatches(self._validator, metadata,
                                      steps=self.steps)[:MAX_SCHEMA_ERRORS]

    def dublin_core(self) -> dict[str, str]:
        """{property: Dublin Core element} for the properties that carry `x-dc`, in the
        schema's order."""
        properties = self.schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {name: sub[DC_KEYWORD] for name, sub in properties.items()
                if isinstance(sub, dict) and DC_KEYWORD in sub}


def check_record_schema(value: Any) -> RecordChecker:
    """A record schema feedpub takes, compiled; else ValidationError on "record_schema"
    saying why."""
    try:
        schema, _ = check_metadata(value)  # a JSON object, XML-safe, of bounded size and depth
        _check_dialect(schema)
        _check_dublin_core(schema)
        try:  # before it is compiled: the validator's refusal of a long pattern says less
            schemabounds.check_schema(schema, depth=MAX_METADATA_DEPTH)
        except schemabounds.Unfollowed:
            # The validator says why, for a $ref it cannot follow either.
            schemabounds.compile_validator(schema)
            raise
        return RecordChecker(schema)
    except schemabounds.TooCostly as error:
        raise ValidationError({"record_schema": [
            f"Refused: {error}. (feedpub bounds what checking a record may cost: "
            "docs/describing-records.md, What feedpub takes.)"]}) from None
    except jsonschema_rs.ValidationError as error:
        where = "/".join(map(str, error.instance_path))
        problem = error.message.splitlines()[0]
        outside = OUTSIDE_REF_RE.match(problem)  # (offline: what it would have fetched)
        if outside:
            raise ValidationError({"record_schema": [
                f"$ref {outside[1]!r} leads outside the schema: feedpub follows references "
                "within the schema only (#/$defs/...), and fetches nothing."]}) from None
        raise ValidationError({"record_schema": [
            f"Not a valid JSON Schema (draft 2020-12){f' at {where}' if where else ''}: "
            f"{schemacheck.shorter(problem)}."]}) from None
    except ValidationError as error:
        raise ValidationError({"record_schema": error.messages}) from None


def _check_dialect(schema: dict[str, Any]) -> None:
    if not schemacheck.is_draft_2020_12(schema):
        raise ValidationError(f"$schema must be {SCHEMA_DIALECT} (JSON Schema draft 2020-12), "
                              "or left out.")
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise ValidationError("A record's metadata is a JSON object: the schema's top-level "
                              '"type" must be "object", or left out.')


def _check_dublin_core(schema: dict[str, Any]) -> None:
    properties = schema.get("properties")
    top = {id(sub) for sub in properties.values()} if isinstance(properties, dict) else set()
    for place, sub in _subschemas(schema):
        if DC_KEYWORD not in sub:
            continue
        if id(sub) not in top:
            raise ValidationError(f"{DC_KEYWORD} at {place}: it is read only on the schema's "
                                  "top-level properties (properties.<name>).")
        if sub[DC_KEYWORD] not in DUBLIN_CORE_ELEMENTS:
            raise ValidationError(f"{DC_KEYWORD} at {place}: {sub[DC_KEYWORD]!r} is not a Dublin "
                                  f"Core element; one of {', '.join(DUBLIN_CORE_ELEMENTS)}.")


def _subschemas(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every object in the schema with its place (`properties/year`), level by level."""
    found, level = [], [("", schema)]
    while level:
        found += [(place, item) for place, item in level if isinstance(item, dict)]
        level = [(f"{place}/{name}".lstrip("/"), child)
                 for place, item in level if isinstance(item, dict | list)
                 for name, child in (item.items() if isinstance(item, dict) else enumerate(item))]
    return found


# A record's own fields, apart from its metadata, by the names a PUT, a line of JSON and a
# CSV column of `import_records` give them (`deleted`: in a file, whether to delete it). A
# top-level property of one of these names is a second value, which its writers may take
# for the record's own: the API and the admin warn of it when the schema is set (a warning,
# not a refusal: a catalogue may mean a property apart, and schemas set before stay valid).
RECORD_OWN_NAMES = ("key", *RECORD_FIELDS, "deleted")
# Of those, the text ones, which an import's column fills into a property of the same name
# too (archives.management.csvcolumns.SHARED_COLUMNS): the natural CSV of such a schema works.
RECORD_TEXT_NAMES = ("key", *(name for name, kind in RECORD_FIELD_TYPES.items() if kind is str))


def schema_warnings(schema: Any) -> list[str]:
    """What the API and the admin say of a record schema they take: each top-level property
    named like a record's own field, and how an import's CSV fills it."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    warnings = []
    for name in RECORD_OWN_NAMES:
        if name not in properties:
            continue
        where = (f"The property {name!r} is named like a record's own {name}, which is not "
                 "part of its metadata: a record then has both, apart")
        if name in RECORD_TEXT_NAMES:
            warnings.append(
                f"{where}. Leave the property out unless it may differ from the record's "
                f"{name} (import_records fills both from a {name!r} column; a "
                f"'metadata.{name}' column fills the property alone).")
        else:
            warnings.append(
                f"{where} (import_records reads a {name!r} column as the record's; a "
                f"'metadata.{name}' column fills the property).")
    return warnings
