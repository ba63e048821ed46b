"""OAI-PMH for feeds whose records have a schema: oai_dc takes its Dublin Core elements from
the properties the schema maps to them (`x-dc`), by the version each record was checked
under, and the feedpub format names that version. Feeds without a schema are as they were.
Every answer is checked against OAI-PMH.xsd and its formats' schemas (tests/oai.py)."""

from __future__ import annotations

import copy
import json

import pytest
from lxml import etree

from archives.log import publishing
from archives.models import Record
from archives.oai.metadata import FEEDPUB_SCHEMA_FILE

from .factories import FeedFactory
from .oai import CATALOGUE_DC, CATALOGUE_RECORD, CATALOGUE_SCHEMA, NS, ask, dublin_core, settle

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settled(monkeypatch):
    settle(monkeypatch)


@pytest.fixture
def data(db):
    return publishing.create_feed(slug="data", title="Research data",
                                  record_schema=CATALOGUE_SCHEMA)


def oai_id(feed, key):
    return f"oai:feedpub.localhost:{feed.uuid}/{key}"


def get_record(client, feed, key, prefix="oai_dc"):
    return ask(client, verb="GetRecord", metadataPrefix=prefix, identifier=oai_id(feed, key))


def expected_dc(settings, slug, key):
    record_url = f"{settings.FEEDPUB_BASE_URL}/feeds/{slug}/records/{key}"
    return [(name, text.format(record_url=record_url)) for name, text in CATALOGUE_DC]


def datestamp(feed, key):
    return Record.objects.get(feed=feed, key=key).updated.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_oai_dc_takes_each_element_from_the_property_the_schema_maps_to_it(client, data,
                                                                           settings):
    publishing.put_record(feed=data, key="polonium", data=CATALOGUE_RECORD)
    expected = expected_dc(settings, "data", "polonium")
    # Creators (objects, by name) and keywords one element each, in order; the publication
    # date as dc:date; the licence (an object without a name: its members) as dc:rights; the
    # DOI after the record's own identifiers; `subject` where its x-dc says; `language` by
    # its name; `size` nowhere. Elements in Dublin Core order.
    assert dublin_core(get_record(client, data, "polonium")) == expected
    # A list reads the same (fastsql's rows, not the ORM's).
    listed = ask(client, verb="ListRecords", metadataPrefix="oai_dc", set="data")
    assert dublin_core(listed) == expected


def test_a_record_without_its_date_property_keeps_its_last_change_as_dc_date(client, data):
    record = copy.deepcopy(CATALOGUE_RECORD)
    del record["metadata"]["published"]
    publishing.put_record(feed=data, key="undated", data=record)
    dc = dublin_core(get_record(client, data, "undated"))
    assert [text for name, text in dc if name == "date"] == [datestamp(data, "undated")]


def test_objects_give_their_name_or_their_members_and_what_has_no_text_is_left_out(client, db):
    people = publishing.create_feed(slug="people", title="People", record_schema={
        "properties": {"contributors": {"x-dc": "contributor"}, "when": {"x-dc": "date"}}})
    publishing.put_record(feed=people, key="p", data={"title": "P", "metadata": {
        "contributors": [{"title": "Dr", "name": "Curie"}, {"title": "Title only"},
                         {"label": "Labelled"}, {"value": 3.5},
                         {"given": "Marie", "family": "Curie", "born": 1867, "alive": False},
                         {"nested": {"name": "too deep"}}, {}, True, None, "", 0, ["inner"],
                         "Plain text"],
        "when": None}})
    dc = dublin_core(get_record(client, people, "p"))
    # An object's name (name, title, label or value), else its texts by member name (born,
    # family, given: whatever the order sent); booleans, nulls, "" and nested values have none.
    assert [text for name, text in dc if name == "contributor"] == [
        "Curie", "Title only", "Labelled", "3.5", "1867, Curie, Marie", "0", "Plain text"]
    # A date property without a text: the record's last change, as without a schema.
    assert [text for name, text in dc if name == "date"] == [datestamp(people, "p")]


def test_a_property_mapped_to_title_gives_a_second_dc_title_only_when_it_differs(client, db):
    theses = publishing.create_feed(slug="theses", title="Theses", record_schema={
        "properties": {"title": {"type": "string", "x-dc": "title"},
                       "abstract": {"type": "string", "x-dc": "description"},
                       "authors": {"type": "array", "x-dc": "creator"}}})
    same = {"title": "Reef fishes", "summary": "Counts, 2019.",
            "metadata": {"title": "Reef fishes", "abstract": "Counts, 2019.",
                         "authors": ["Ng, A.", "Ng, A."]}}
    publishing.put_record(feed=theses, key="same", data=same)
    publishing.put_record(feed=theses, key="other", data={
        **same, "metadata": {**same["metadata"], "title": "Reef fishes of the Kermadecs"}})

    dc = dublin_core(get_record(client, theses, "same"))  # (checked against oai_dc.xsd)
    assert [(name, text) for name, text in dc if name in ("title", "description", "creator")] == [
        ("title", "Reef fishes"), ("creator", "Ng, A."), ("description", "Counts, 2019.")]
    other = dublin_core(get_record(client, theses, "other"))
    assert [text for name, text in other if name == "title"] == [  # the record's own first
        "Reef fishes", "Reef fishes of the Kermadecs"]


def test_each_record_follows_the_schema_version_it_was_checked_under(client, data, settings):
    publishing.put_record(feed=data, key="old", data=CATALOGUE_RECORD)
    second = copy.deepcopy(CATALOGUE_SCHEMA)
    second["properties"]["keywords"]["x-dc"] = "relation"
    publishing.update_feed(feed=data, record_schema=second)
    publishing.put_record(feed=data, key="new", data=CATALOGUE_RECORD)
    old = dublin_core(get_record(client, data, "old"))
    new = dublin_core(get_record(client, data, "new"))
    assert old == expected_dc(settings, "data", "old")  # still version 1's reading
    assert [text for name, text in new if name == "subject"] == []
    assert [text for name, text in new if name == "relation"] == ["Radioactivity", "Polonium"]
    assert new.index(("relation", "Radioactivity")) > new.index(("language", "fr"))


def test_a_record_of_a_feed_without_a_schema_is_written_as_before(client, data, settings):
    plain = FeedFactory(slug="plain")
    record = copy.deepcopy(CATALOGUE_RECORD)
    record["metadata"].update(creator=["Curie, Marie", {"name": "an object"}], rights="CC0")
    publishing.put_record(feed=plain, key="polonium", data=record)
    publishing.put_record(feed=data, key="polonium", data=CATALOGUE_RECORD)  # beside it
    assert dublin_core(get_record(client, plain, "polonium")) == [
        ("title", "Polonium measurements"),
        ("creator", "Curie, Marie"),  # by name only: objects have no reading without x-dc
        ("subject", "Paris"),
        ("description", "Activity of pitchblende fractions."),
        ("date", datestamp(plain, "polonium")),
        ("identifier", f"{settings.FEEDPUB_BASE_URL}/feeds/plain/records/polonium"),
        ("identifier", "https://example.org/landing/polonium"),
        ("language", "fr"),
        ("rights", "CC0"),
    ]
    found = get_record(client, plain, "polonium", "feedpub").find(".//fp:record", NS)
    assert found.find("fp:schema", NS) is None
    assert etree.QName(found[-1]).localname == "metadata"


def test_the_feedpub_format_names_the_schema_version_the_record_was_checked_under(
        client, data, settings):
    publishing.put_record(feed=data, key="polonium", data=CATALOGUE_RECORD)
    found = get_record(client, data, "polonium", "feedpub").find(".//fp:record", NS)
    url = found.findtext("fp:schema", namespaces=NS)
    assert url == f"{settings.FEEDPUB_BASE_URL}/feeds/data/schema/1"
    assert etree.QName(found[-1]).localname == "schema"  # right after <metadata>
    assert etree.QName(found[-2]).localname == "metadata"
    # The record alone validates against the format's own schema, as a harvester checks it.
    etree.XMLSchema(etree.parse(str(FEEDPUB_SCHEMA_FILE))).assertValid(found)
    served = client.get(url.removeprefix(settings.FEEDPUB_BASE_URL))
    assert served.status_code == 200
    assert json.loads(served.content)["properties"]["keywords"]["x-dc"] == "subject"
    # Changed under a second version, it names that one; in lists too.
    second = copy.deepcopy(CATALOGUE_SCHEMA)
    second["properties"]["size"]["minimum"] = 0
    publishing.update_feed(feed=data, record_schema=second)
    publishing.put_record(feed=data, key="polonium", data={**CATALOGUE_RECORD, "title": "New"})
    listed = ask(client, verb="ListRecords", metadataPrefix="feedpub", set="data")
    assert listed.findtext(".//fp:record/fp:schema", namespaces=NS) == (
        f"{settings.FEEDPUB_BASE_URL}/feeds/data/schema/2")
