"""The metadata formats a record is disseminated in: `oai_dc`, which every OAI-PMH
repository must offer, and `feedpub`, which carries the whole record without loss (its
schema, feedpub-record.xsd, ships beside this module and is served at /oai/feedpub-record.xsd).

A list answer holds a hundred records: as lxml elements they cost four times what the
rest of the answer does, so a record is written as text here, escaped as lxml escapes
(archives/documents/atom.py's escape_text and escape_attribute), and joined into the
answer by verbs.py. Every answer of the test suite is validated against the OAI's schemas
and these formats' (tests/oai.py), which holds these strings to them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from archives import formats
from archives.documents.atom import escape_attribute, escape_text
from archives.documents.urls import record_url_prefix, schema_url, url

from . import repository
from .repository import Item

XSI = "http://www.w3.org/2001/XMLSchema-instance"
SCHEMA_LOCATION = f"{{{XSI}}}schemaLocation"
OAI_DC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
OAI_DC_SCHEMA = "http://www.openarchives.org/OAI/2.0/oai_dc.xsd"
DC = "http://purl.org/dc/elements/1.1/"
FEEDPUB = "urn:feedpub:oai-record:1"
FEEDPUB_SCHEMA_FILE = Path(__file__).with_name("feedpub-record.xsd")

# Dublin Core elements a record's metadata may name (a string, a number, or a list of
# them) when its feed's schema does not say otherwise (`x-dc`); title, description, date and
# identifier come from the record itself. Written in the order of the element set (which
# oai_dc.xsd does not require, but readers expect).
DC_FROM_METADATA = ("creator", "subject", "publisher", "contributor", "type", "format",
                    "source", "language", "relation", "coverage", "rights")
DC_ORDER = ("title", "creator", "subject", "description", "publisher", "contributor", "date",
            "type", "format", "identifier", "source", "language", "relation", "coverage",
            "rights")
# What an object stands for in Dublin Core, when a property with x-dc holds one: the first
# of these members that is a string or a number.
DC_OBJECT_NAMES = ("name", "title", "label", "value")
# The root of an oai_dc record; xsi is declared on the answer's root (verbs.py).
_DC_OPEN = (f'<oai_dc:dc xmlns:oai_dc="{OAI_DC}" xmlns:dc="{DC}" '
            f'xsi:schemaLocation="{OAI_DC} {OAI_DC_SCHEMA}">')


@dataclass(frozen=True)
class MetadataFormat:
    prefix: str
    schema: Callable[[], str]
    namespace: str
    # The record's metadata element, as text, given the record and its last change's
    # datestamp (its `updated`, which a move of the service leaves as it was).
    write: Callable[[Item, str], str]


def oai_dc(item: Item, stamp: str) -> str:
    metadata = item.metadata if isinstance(item.metadata, dict) else {}
    from_schema: tuple[tuple[str, str], ...] = ()
    mapped: Collection[str] = ()
    if item.schema_version is not None:  # else its feed had no schema: by name only
        from_schema = repository.dublin_core(item.feed_uuid, item.schema_version)
        mapped = {name for name, _ in from_schema}
    values = {name: _texts(metadata[name]) for name in DC_FROM_METADATA
              if name in metadata and name not in mapped}
    values.update(title=[item.title], description=[item.summary] if item.summary else [],
                  identifier=[_record_url(item), *(link["href"] for link in item.links)])
    if item.language:  # the record's own language first, then any its metadata names
        values["language"] = [item.language, *values.get("language", ())]
    for name, element in from_schema:  # after the record's own, in the schema's order
        if name in metadata:
            values.setdefault(element, []).extend(_schema_texts(metadata[name]))
    if not values.get("date"):  # no date property: the record's last change
        values["date"] = [stamp]
    # Each text once per element, the record's own first: a property mapped to title that
    # holds the record's title (the natural schema) is not a second dc:title, which a
    # harvester would show as an alternative title; one that differs is one.
    return "".join((_DC_OPEN, *(f"<dc:{name}>{escape_text(text)}</dc:{name}>"
                                for name in DC_ORDER for text in dict.fromkeys(
                                    values.get(name, ()))),
                    "</oai_dc:dc>"))


def _record_url(item: Item) -> str:
    return record_url_prefix(item.slug) + item.key


def _texts(value) -> list[str]:
    """The texts of a metadata value named after an element: a string or a number, or a list
    of them (objects, booleans and nulls are left to the feedpub format)."""
    values = value if isinstance(value, list) else [value]
    return [text for item in values if (text := _scalar(item))]


def _schema_texts(value) -> list[str]:
    """The texts of a property the schema maps to an element (x-dc): as _texts, and an
    object (alone or in a list) gives one text, what _object_text says."""
    values = value if isinstance(value, list) else [value]
    return [text for item in values
            if (text := _object_text(item) if isinstance(item, dict) else _scalar(item))]


def _object_text(value: dict) -> str:
    """An object as one Dublin Core text: its name (DC_OBJECT_NAMES), else its string and
    number members joined by ", " in the order of their names (PostgreSQL's jsonb keeps no
    other); "" (left out) when it has neither."""
    for name in DC_OBJECT_NAMES:
        if text := _scalar(value.get(name)):
            return text
    return ", ".join(text for _, member in sorted(value.items()) if (text := _scalar(member)))


def _scalar(value) -> str:
    """A string or a number as text; "" for anything else (no Dublin Core reading)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def feedpub(item: Item, stamp: str) -> str:  # (its updated is RFC 3339, to the microsecond)
    def element(name: str, text: str) -> str:
        return f"<{name}>{escape_text(text)}</{name}>" if text else f"<{name}/>"

    links = "".join(
        "<link" + "".join(f' {name}="{escape_attribute(link[name])}"'
                          for name in ("href", "rel", "type", "title") if link.get(name))
        + "/>" for link in item.links)
    return "".join((
        f'<record xmlns="{FEEDPUB}" xsi:schemaLocation="{FEEDPUB} '
        f'{escape_attribute(feedpub_schema_url())}">',
        element("key", item.key),
        element("url", _record_url(item)),
        element("atomId", formats.record_atom_id(item.feed_uuid, item.key)),
        element("title", item.title),
        element("summary", item.summary),
        links,
        element("created", formats.rfc3339(item.created)),
        element("updated", formats.rfc3339(item.updated)),
        # JSON text: lossless whatever the metadata holds (validation keeps it XML-safe).
        element("metadata", json.dumps(item.metadata, ensure_ascii=False)),
        # The version of its feed's record schema it was checked under (none: no element).
        "" if item.schema_version is None
        else element("schema", schema_url(item.slug, item.schema_version)),
        element("language", item.language) if item.language else "",
        "</record>",
    ))


def feedpub_schema_url() -> str:
    return url("archives:oai-feedpub-schema")


FORMATS = {
    "oai_dc": MetadataFormat("oai_dc", lambda: OAI_DC_SCHEMA, OAI_DC, oai_dc),
    "feedpub": MetadataFormat("feedpub", feedpub_schema_url, FEEDPUB, feedpub),
}
