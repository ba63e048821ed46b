"""The one shape of a harvested record, whatever format it came in (Atom, linked pages,
OAI-PMH): `id` (what the format names the record by), `updated`, `source` (the document it
was read from), and the record's own fields, each always present, empty (null) when the
format does not carry it:

- Atom: `atom_id` (the entry's id), `title`, `summary`, `links`, `alternate` (its first
  alternate link), `language` (the entry's own xml:lang: "" when it has none, and the
  feed's language is the record's); `key` and `metadata` when the records are fetched
  (the command lines' default; not with `--no-fetch-records`): an Atom entry does not
  carry them, they are read from the JSON at its alternate link;
- linked pages: every field from the entity's JSON body when it is feedpub's record JSON
  (`alternate`: the record's `url`, else the entity's Content-Location);
- OAI-PMH `feedpub`: every field; `oai_dc`: `title`, `summary`, `links`, `alternate`
  (its first http(s) identifier) and `language` (its first) from DC, `metadata` the DC
  elements, no `key` nor `atom_id`.

Each format adds what is its own: `content_id` and the entity's body as `record` (linked
pages), `sets` (OAI-PMH), `metadata_xml` (an OAI format read as is).
"""

from __future__ import annotations

from typing import Any

# The fields every harvested record has besides id, updated and source, empty by default.
SHARED: dict[str, Any] = {"key": None, "atom_id": None, "title": "", "summary": "",
                          "metadata": None, "links": [], "alternate": None, "language": ""}
# The fields of feedpub's record JSON (the API's, a linked-pages entity's body) kept as is.
FEEDPUB_FIELDS = ("key", "atom_id", "title", "summary", "metadata", "links", "language")


def shaped(record: dict[str, Any], **known: Any) -> dict[str, Any]:
    """`record` with every shared field, `known` filling those it lacks."""
    return {**SHARED, **known, **record}


def from_feedpub_json(body: Any) -> dict[str, Any]:
    """The shared fields that a record in feedpub's JSON shape carries (none when `body` is
    not a JSON object: a linked-pages feed of another server may send anything)."""
    if not isinstance(body, dict):
        return {}
    fields = {name: body[name] for name in FEEDPUB_FIELDS if name in body}
    if isinstance(body.get("url"), str):
        fields["alternate"] = body["url"]
    return fields
