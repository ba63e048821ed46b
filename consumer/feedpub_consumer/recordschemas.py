"""Records checked against the schema their feed links, for checkfeed
(docs/consuming/checkfeed.md#records-and-their-schema). A feedpub record names the version of
its feed's record schema (a JSON Schema, draft 2020-12, for its `metadata`) it was checked
under: `"schema"` in its JSON (a linked-pages entity's body, the record's own URL),
`<schema>` in the OAI-PMH `feedpub` format; a subscription document links the schema in
force with `rel="describedby"`.

`RecordSchemas` fetches each schema URL once a run, and reports by rule:

- `schema.unresolved`: a schema URL that does not answer 200 (or cannot be fetched).
- `schema.invalid`: an answer that is not JSON, or not a JSON Schema draft 2020-12: its
  `$schema` names another dialect, the draft's meta-schema refuses it, or a `$ref` leads
  outside it (checkfeed fetches nothing but the schema URLs a feed links).
- `schema.record`: a record whose metadata does not match its schema, each place named by
  its path under `metadata`, as feedpub's write path names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema_rs
from jsonschema_rs import Draft202012Validator

from . import schemabounds
from .http import FetchError, HttpClient, RunLimitReached
from .progress import counted
from .schemacheck import SCHEMA_DIALECT, is_draft_2020_12, mismatches, shorter

ACCEPT_SCHEMA = "application/schema+json, application/json;q=0.9, */*;q=0.1"
SCHEMA_TYPE = "application/schema+json"  # the type a describedby link to one names
MAX_RECORD_ERRORS = 5  # places named per record: one problem line each record


class NotASchema(Exception):
    """A document that is not a JSON Schema draft 2020-12 checkfeed can use."""


def compile_schema(schema: Any, url: str) -> Draft202012Validator:
    """The validator of `schema` (read from `url`); NotASchema saying why it is not one.
    Compiled as feedpub's server compiles a record schema (schemabounds.compile_validator),
    and its records' mismatches named as the server names them (schemacheck.mismatches), so
    that the two agree on every record: the same validator, every draft 2020-12 format
    checked, and nothing fetched (a $ref must resolve inside it)."""
    if isinstance(schema, dict):
        if not is_draft_2020_12(schema):
            raise NotASchema(f"its $schema is {schema['$schema']!r}, not {SCHEMA_DIALECT}")
    elif not isinstance(schema, bool):
        raise NotASchema(f"a JSON {type(schema).__name__}, not a schema (an object)")
    try:
        return schemabounds.compile_validator(schema, base_uri=url)
    except jsonschema_rs.ValidationError as error:
        where = "/".join(map(str, error.instance_path)) or "the top level"
        raise NotASchema(f"at {where}: {shorter(error.message.splitlines()[0])}") from None
    except (jsonschema_rs.ReferencingError, ValueError, RecursionError) as error:
        raise NotASchema(shorter(str(error).splitlines()[0])) from None


class RecordSchemas:
    """The schemas a run meets, each fetched once (`client`), and the records checked against
    them; `problem(url, code, message)` reports."""

    def __init__(self, client: HttpClient, problem: Callable[[str, str, str], None]):
        self.client = client
        self.problem = problem
        self.validators: dict[str, Draft202012Validator | None] = {}  # None: unusable
        self.steps: dict[str, int] = {}  # each usable schema's (schemabounds.check_schema)
        self.records_checked = 0

    def validator(self, url: str, *, referrer: str, rel: str = "schema"
                  ) -> Draft202012Validator | None:
        """The schema at `url` compiled, or None when it is not one (said once, at the
        `referrer` that first linked it, naming the link by `rel`). RunLimitReached goes to
        the caller: the walk stops."""
        if url in self.validators:
            return self.validators[url]
        self.validators[url] = None
        try:
            response = self.client.fetch(url, headers={"Accept": ACCEPT_SCHEMA})
        except RunLimitReached:
            del self.validators[url]  # not known: the run stops before it is needed again
            raise
        except FetchError as error:
            self.problem(referrer, "schema.unresolved", f"{rel} {url}: {error}")
            return None
        if response.status != 200:
            self.problem(referrer, "schema.unresolved",
                         f"{rel} {url} answered HTTP {response.status}")
            return None
        try:
            schema = json.loads(response.body)
        except (ValueError, RecursionError) as error:
            self.problem(referrer, "schema.invalid", f"{rel} {url} is not JSON ({error})")
            return None
        try:
            validator = compile_schema(schema, url)
        except NotASchema as error:
            self.problem(referrer, "schema.invalid",
                         f"{rel} {url} is not a JSON Schema (draft 2020-12): {error}")
            return None
        try:  # a hostile server's schema must not stall the run
            self.steps[url] = schemabounds.check_schema(schema, base=url)
        except schemabounds.TooCostly as error:
            self.problem(referrer, "schema.invalid",
                         f"could not check records against {url}: {error}")
            return None
        self.validators[url] = validator
        return validator

    def check_record(self, metadata: Any, schema: Any, *, where: str, record: str) -> None:
        """Check a record's `metadata` against the schema it names (`schema`, a URL as the
        record gives it, absolute); `where`: the URL it was read from; `record`: how a
        person finds it ("record k1 (https://...)")."""
        if not isinstance(schema, str) or not schema:
            self.problem(where, "schema.record",
                         f"{record}: its schema {schema!r} is not a URL")
            return
        validator = self.validator(schema, referrer=where)
        if validator is None:
            return  # said once, where the schema was first met
        depth = schemabounds.record_size(metadata)[1] - 1
        size = len(json.dumps(metadata, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        too_large = (  # (the records the schema's bounds hold for)
            f"{depth} levels deep, more than {schemabounds.DEFAULT_DEPTH}"
            if depth > schemabounds.DEFAULT_DEPTH else
            f"{size:,} bytes of JSON, more than {schemabounds.MAX_RECORD_BYTES:,}"
            if size > schemabounds.MAX_RECORD_BYTES else None)
        if too_large:
            self.problem(where, "schema.record", f"{record} could not be checked against "
                                                 f"{schema}: its metadata is {too_large}")
            return
        self.records_checked += 1
        try:
            found = mismatches(validator, metadata, steps=self.steps[schema])
        except (ValueError, RecursionError) as error:  # (what it cannot convert)
            self.problem(where, "schema.record",
                         f"{record} could not be checked against {schema}: {error!r}")
            return
        if found:
            more = len(found) - MAX_RECORD_ERRORS
            self.problem(where, "schema.record",
                         f"{record} does not match its schema {schema}: "
                         + "; ".join(found[:MAX_RECORD_ERRORS])
                         + (f"; and {counted(more, 'place')} more" if more > 0 else ""))

    def note(self, records_read: str | None = None) -> str | None:
        """What the run did with schemas, for the summary (None when it met none);
        `records_read`: which records the run read whole, when not every one it met."""
        if not self.validators:
            return None
        usable = sum(validator is not None for validator in self.validators.values())
        return (f"{counted(self.records_checked, 'record')} checked against "
                f"{counted(usable, 'record schema')}"
                + (f" ({len(self.validators) - usable} unusable)"
                   if usable < len(self.validators) else "")
                + (f" ({records_read})" if records_read else ""))
