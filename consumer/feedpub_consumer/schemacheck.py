"""A record checked against its record schema, as feedpub's server and checkfeed both say it:
one implementation, so that the two agree on every record and name a mismatch alike.

A record schema is a JSON Schema, draft 2020-12 (its `$schema` names that dialect, or is left
out), compiled by `schemabounds.compile_validator`; a mismatch is named by its place under
`metadata` (`metadata.creators[0].name: why`), each message cut to MAX_MESSAGE characters.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema_rs import Draft202012Validator

from . import schemabounds

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_MESSAGE = 300  # a message quotes the value it refuses, which may be a whole object
# A metadata name written as `.name` in a place; others as `["na me"]`.
PLAIN_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*", re.ASCII)


def is_draft_2020_12(schema: dict[str, Any]) -> bool:
    """Whether a schema's `$schema` names draft 2020-12 (with or without its `#`), or is left
    out (which means it here)."""
    dialect = schema.get("$schema", SCHEMA_DIALECT)
    return isinstance(dialect, str) and dialect.rstrip("#") == SCHEMA_DIALECT


def metadata_path(path: Any) -> str:
    """A place in a record's metadata as a person reads it: `metadata.creators[0].name`."""
    text = "metadata"
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        elif PLAIN_NAME_RE.fullmatch(step):
            text += f".{step}"
        else:
            text += f"[{json.dumps(step, ensure_ascii=False)}]"
    return text


def shorter(message: str) -> str:
    return schemabounds.shorter(message, MAX_MESSAGE)


def mismatches(validator: Draft202012Validator, metadata: Any, *,
               steps: int = schemabounds.MAX_SCHEMA_STEPS) -> list[str]:
    """Where `metadata` does not match, each as `metadata.path: why`, by path; [] when it
    matches. (`steps`: the schema's, schemabounds.check_schema: what a report of its errors
    costs; past that, the one UNREPORTED_MISMATCH.)"""
    if validator.is_valid(metadata):  # the common case, without collecting errors
        return []
    found = schemabounds.errors(validator, metadata, steps=steps)
    if not found:
        return [schemabounds.UNREPORTED_MISMATCH]
    return [f"{metadata_path(path)}: {shorter(message)}" for path, message in found]
