"""The metadata formats a record is disseminated in: `oai_dc`, which every OAI-PMH
repository must offer, and `feedpub`, which carries the whole record without loss (its
schema, feedpub-record.xsd, ships beside this module and is served at /oai/feedpub-record.xsd).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from archives import formats
from archives.documents.atom import record_url, url
from archives.models import Record

from .protocol import datestamp

XSI = "http://www.w3.org/2001/XMLSchema-instance"
SCHEMA_LOCATION = f"{{{XSI}}}schemaLocation"
OAI_DC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
DC = "http://purl.org/dc/elements/1.1/"
FEEDPUB = "urn:feedpub:oai-record:1"
FEEDPUB_SCHEMA_FILE = Path(__file__).with_name("feedpub-record.xsd")

# Dublin Core elements a record's metadata may name (a string, a number, or a list of
# them), in the order of the element set; title, description, date and identifier come
# from the record itself.
DC_FROM_METADATA = ("creator", "subject", "publisher", "contributor", "type", "format",
                    "source", "language", "relation", "coverage", "rights")


@dataclass(frozen=True)
class MetadataFormat:
    prefix: str
    schema: Callable[[], str]
    namespace: str
    write: Callable[[etree._Element, Record], None]  # appends the record's metadata


def write_oai_dc(parent: etree._Element, record: Record) -> None:
    dc = etree.SubElement(parent, f"{{{OAI_DC}}}dc", nsmap={"oai_dc": OAI_DC, "dc": DC})
    dc.set(SCHEMA_LOCATION, f"{OAI_DC} http://www.openarchives.org/OAI/2.0/oai_dc.xsd")
    metadata = record.metadata if isinstance(record.metadata, dict) else {}

    def add(name: str, text: str) -> None:
        etree.SubElement(dc, f"{{{DC}}}{name}").text = text

    add("title", record.title)
    for name in DC_FROM_METADATA[:2]:  # creator, subject
        for text in _texts(metadata.get(name)):
            add(name, text)
    if record.summary:
        add("description", record.summary)
    for name in DC_FROM_METADATA[2:4]:  # publisher, contributor
        for text in _texts(metadata.get(name)):
            add(name, text)
    add("date", datestamp(record.updated))
    for name in DC_FROM_METADATA[4:6]:  # type, format
        for text in _texts(metadata.get(name)):
            add(name, text)
    add("identifier", record_url(record.feed.slug, record.key))
    for link in record.links:
        add("identifier", link["href"])
    for name in DC_FROM_METADATA[6:]:  # source, language, relation, coverage, rights
        for text in _texts(metadata.get(name)):
            add(name, text)


def _texts(value) -> list[str]:
    """The texts of a metadata value: a string or a number, or a list of them (objects,
    booleans and nulls have no Dublin Core reading and are left to the feedpub format)."""
    values = value if isinstance(value, list) else [value]
    return [str(item) for item in values
            if isinstance(item, str | int | float) and not isinstance(item, bool)
            and str(item)]


def write_feedpub(parent: etree._Element, record: Record) -> None:
    root = etree.SubElement(parent, f"{{{FEEDPUB}}}record", nsmap={None: FEEDPUB})
    root.set(SCHEMA_LOCATION, f"{FEEDPUB} {feedpub_schema_url()}")

    def add(name: str, text: str) -> etree._Element:
        element = etree.SubElement(root, f"{{{FEEDPUB}}}{name}")
        element.text = text
        return element

    add("key", record.key)
    add("url", record_url(record.feed.slug, record.key))
    add("atomId", record.atom_id)
    add("title", record.title)
    add("summary", record.summary)
    for link in record.links:
        element = add("link", None)
        for name in ("href", "rel", "type", "title"):
            if link.get(name):
                element.set(name, link[name])
    add("created", formats.rfc3339(record.created))
    add("updated", formats.rfc3339(record.updated))
    # JSON text: lossless whatever the metadata holds (validation keeps it XML-safe).
    add("metadata", json.dumps(record.metadata, ensure_ascii=False))


def feedpub_schema_url() -> str:
    return url("archives:oai-feedpub-schema")


FORMATS = {
    "oai_dc": MetadataFormat("oai_dc", lambda: "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
                             OAI_DC, write_oai_dc),
    "feedpub": MetadataFormat("feedpub", feedpub_schema_url, FEEDPUB, write_feedpub),
}
