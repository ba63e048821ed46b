"""Helpers for the OAI-PMH tests: ask /oai as a harvester does, and check every answer the
way a harvester's validator would (HTTP 200, text/xml, OAI-PMH.xsd with each format's own
schema, tests/schema/oai-pmh/)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from urllib.parse import urlencode

from lxml import etree

from archives.oai import repository

SCHEMA = Path(__file__).parent / "schema" / "oai-pmh" / "responses.xsd"
NS = {"o": "http://www.openarchives.org/OAI/2.0/",
      "oai_dc": "http://www.openarchives.org/OAI/2.0/oai_dc/",
      "dc": "http://purl.org/dc/elements/1.1/",
      "fp": "urn:feedpub:oai-record:1",
      "id": "http://www.openarchives.org/OAI/2.0/oai-identifier"}


@cache
def schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(SCHEMA)))


def valid(response) -> etree._Element:
    """The answer's document, once it is checked as every OAI-PMH answer must be."""
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "text/xml; charset=utf-8"
    document = etree.fromstring(response.content)
    schema().assertValid(document)
    return document


def ask(client, method: str = "get", **params) -> etree._Element:
    """An OAI-PMH request (from_ for `from`), its answer checked and parsed."""
    params = {name.rstrip("_"): value for name, value in params.items()}
    if method == "post":  # as OAI-PMH 3.1.1.2 says: the arguments as a form, urlencoded
        return valid(client.post("/oai", urlencode(params, doseq=True),
                                 content_type="application/x-www-form-urlencoded"))
    return valid(client.get("/oai", params))


def error_codes(document: etree._Element) -> list[str]:
    return document.xpath("o:error/@code", namespaces=NS)


def token_of(document: etree._Element) -> etree._Element | None:
    found = document.xpath("//o:resumptionToken", namespaces=NS)
    return found[0] if found else None


def walk(client, verb: str, **params) -> tuple[list[etree._Element], list[etree._Element]]:
    """Every answer of a list, following its resumption tokens; and the items listed."""
    item = {"ListRecords": "o:ListRecords/o:record", "ListSets": "o:ListSets/o:set",
            "ListIdentifiers": "o:ListIdentifiers/o:header"}[verb]
    documents = [ask(client, verb=verb, **params)]
    while (token := token_of(documents[-1])) is not None and token.text:
        documents.append(ask(client, verb=verb, resumptionToken=token.text))
    return documents, [found for document in documents
                       for found in document.xpath(item, namespaces=NS)]


def identifiers(items: list[etree._Element]) -> list[str]:
    return [item.findtext(".//o:identifier", namespaces=NS) for item in items]


def response_date(document: etree._Element) -> str:
    return document.findtext("o:responseDate", namespaces=NS)


def settle(monkeypatch, seconds: float = 60) -> None:
    """The OAI clock `seconds` ahead, so that every change so far lies before the horizon
    (archives/oai/repository.py), whatever the test's pace. Its responseDates are then in
    the future: incremental harvests are tested on the real clock."""
    monkeypatch.setattr(repository, "now",
                        lambda: datetime.now(tz=UTC) + timedelta(seconds=seconds))


# A research-data catalogue's record schema, whose properties say where oai_dc takes its
# Dublin Core elements from (x-dc), and a record of it.
CATALOGUE_SCHEMA = {
    "type": "object",
    "properties": {
        "creators": {"type": "array", "x-dc": "creator", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "orcid": {"type": "string"}}}},
        "keywords": {"type": "array", "items": {"type": "string"}, "x-dc": "subject"},
        "published": {"type": "string", "format": "date", "x-dc": "date"},
        "licence": {"type": "object", "x-dc": "rights", "properties": {
            "id": {"type": "string"}, "url": {"type": "string", "format": "uri"}}},
        "doi": {"type": "string", "x-dc": "identifier"},
        # Named after an element, mapped to another: x-dc wins.
        "subject": {"type": "string", "x-dc": "coverage"},
        "language": {"type": "string"},  # no x-dc: by its name, as for feeds without a schema
        "size": {"type": "integer"},  # neither: not in oai_dc
    },
}
CATALOGUE_RECORD = {
    "title": "Polonium measurements",
    "summary": "Activity of pitchblende fractions.",
    "links": [{"href": "https://example.org/landing/polonium"}],
    "metadata": {
        "size": 2048,
        "licence": {"id": "CC-BY-4.0", "url": "https://creativecommons.org/licenses/by/4.0/"},
        "language": "fr",
        "creators": [{"name": "Curie, Marie", "orcid": "0000-0000-0000-0001"},
                     {"name": "Curie, Pierre"}],
        "published": "1898-07-18",
        "subject": "Paris",
        "doi": "https://doi.org/10.1234/polonium",
        "keywords": ["Radioactivity", "Polonium"],
    },
}
# Its oai_dc: elements in Dublin Core order, each element's values in the schema's order.
CATALOGUE_DC = [
    ("title", "Polonium measurements"),
    ("creator", "Curie, Marie"), ("creator", "Curie, Pierre"),
    ("subject", "Radioactivity"), ("subject", "Polonium"),
    ("description", "Activity of pitchblende fractions."),
    ("date", "1898-07-18"),
    ("identifier", "{record_url}"), ("identifier", "https://example.org/landing/polonium"),
    ("identifier", "https://doi.org/10.1234/polonium"),
    ("language", "fr"),
    ("coverage", "Paris"),
    ("rights", "CC-BY-4.0, https://creativecommons.org/licenses/by/4.0/"),
]


def dublin_core(document: etree._Element) -> list[tuple[str, str]]:
    """The (element, text) pairs of the first oai_dc record of an answer, in its order."""
    dc = document.find(".//oai_dc:dc", NS)
    return [(etree.QName(element).localname, element.text) for element in dc]
