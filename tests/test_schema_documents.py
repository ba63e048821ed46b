"""What readers see of a feed's record schema, over HTTP: the schema itself (the version in
force and each version), the describedby link of every document rendered from the feed as it
is now (never a sealed page's), the feed's page for people, and a record's page, which shows
its metadata by the schema it was checked under."""

from __future__ import annotations

import json

import pytest
from feedpub_consumer.http import parse_links
from lxml import etree, html

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed
from archives.validation import MAX_METADATA_DEPTH

from .factories import record_data
from .walking import NS

BASE = "http://127.0.0.1:8000"
SCHEMA_TYPE = "application/schema+json"
IMMUTABLE = "public, max-age=31536000, immutable"

# A research-data catalogue's records, its properties in an order of its own (neither
# alphabetical nor PostgreSQL jsonb's, which sorts keys by length).
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "creators": {"type": "array", "title": "Creators",
                     "description": "Who made the data set, first author first",
                     "items": {"$ref": "#/$defs/person"}},
        "issued": {"type": "string", "format": "date", "title": "Date issued"},
        "modified": {"type": "string", "format": "date-time", "title": "Last modified"},
        "subjects": {"type": "array", "title": "Subjects", "items": {"type": "string"}},
        "licence": {"type": "string", "format": "uri", "title": "Licence"},
        "identifier": {"type": "string", "format": "uri", "title": "Identifier"},
        "version": {"type": "integer"},
        "funding": {"$ref": "#/$defs/grant"},
    },
    "required": ["creators"],
    "$defs": {
        "person": {"type": "object", "title": "Person", "required": ["name"], "properties": {
            "name": {"type": "string", "title": "Name"},
            "orcid": {"type": "string", "format": "uri", "title": "ORCID iD"}}},
        "grant": {"type": "object", "title": "Funding",
                  "description": "The grant that paid for it", "properties": {
                      "funder": {"type": "string", "title": "Funder"},
                      "award": {"type": "string", "title": "Award number"}}},
    },
}
METADATA = {
    "version": 2,
    "subjects": ["oceanography", "salinity"],
    "creators": [{"name": "Ada Lovelace", "orcid": "https://orcid.org/0000-0002-1825-0097"},
                 {"name": "Mary Somerville"}],
    "issued": "2021-03-04",
    "modified": "2021-03-04T10:05:00+02:00",
    "licence": "https://creativecommons.org/licenses/by/4.0/",
    "identifier": "urn:nbn:de:0000-12345",
    "funding": {"funder": "Royal Society", "award": "RS-42"},
    # Not in the schema (it allows others): after its properties, by name.
    "note": "Collected at sea",
    "homepage": "https://example.org/data/1",
}


def schema_v2() -> dict:
    """The next version: the same properties, relabelled."""
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["issued"]["title"] = "Published"
    return schema


@pytest.fixture
def data(db):
    """A feed with a schema, and a record checked under it."""
    feed = publishing.create_feed(slug="data", title="Research data", record_schema=SCHEMA,
                                  page_size=3, language="en")
    publishing.put_record(feed=feed, key="sea", data=record_data(
        1, title="Salinity of the North Sea", metadata=METADATA))
    return Feed.objects.get(pk=feed.pk)


def fresh(feed: Feed) -> Feed:
    return Feed.objects.get(pk=feed.pk)


def version_url(number: int, slug: str = "data") -> str:
    return f"{BASE}/feeds/{slug}/schema/{number}"


def body_of(response) -> bytes:
    """The body of a response, streamed (the complete feed) or not."""
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


def header_links(response, rel: str) -> list[tuple[str, str | None]]:
    return [(link.href, link.attribute("type"))
            for link in parse_links(response.get("Link"), BASE) if link.rel == rel]


def body_links(body: bytes, rel: str, *, rss: bool = False) -> list[tuple[str, str | None]]:
    root = etree.fromstring(body)
    parent = root.find("channel") if rss else root
    return [(link.get("href"), link.get("type"))
            for link in parent.findall(f"{{{NS['a']}}}link") if link.get("rel") == rel]


# The schema, as consumers read it ---------------------------------------------------------

def test_the_current_schema_is_served_with_its_version_named(client, data):
    response = client.get("/feeds/data/schema")

    assert response.status_code == 200
    assert response["Content-Type"] == SCHEMA_TYPE
    assert response["Content-Location"] == version_url(1)
    assert response["ETag"]
    assert response["Cache-Control"] != IMMUTABLE  # it moves with the feed's schema
    assert json.loads(response.content) == SCHEMA
    assert header_links(response, "latest-version") == [(version_url(1), SCHEMA_TYPE)]
    assert header_links(response, "up") == [(f"{BASE}/feeds/data/",
                                            "application/atom+xml")]


def test_the_schema_keeps_the_order_its_producer_wrote_it_in(client, data):
    for path in ("/feeds/data/schema", "/feeds/data/schema/1"):
        served = json.loads(client.get(path).content)
        assert list(served["properties"]) == list(SCHEMA["properties"]), path
        assert list(served) == list(SCHEMA), path


def test_a_version_is_immutable_and_answers_304(client, data):
    response = client.get("/feeds/data/schema/1")

    assert response.status_code == 200
    assert response["Content-Type"] == SCHEMA_TYPE
    assert response["Cache-Control"] == IMMUTABLE
    assert json.loads(response.content) == SCHEMA
    again = client.get("/feeds/data/schema/1", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304
    assert again.content == b""


def test_the_current_schema_answers_304_until_the_schema_changes(client, data):
    etag = client.get("/feeds/data/schema")["ETag"]
    assert client.get("/feeds/data/schema", HTTP_IF_NONE_MATCH=etag).status_code == 304

    publishing.update_feed(feed=data, record_schema=schema_v2())
    response = client.get("/feeds/data/schema", HTTP_IF_NONE_MATCH=etag)

    assert response.status_code == 200
    assert response["ETag"] != etag
    assert response["Content-Location"] == version_url(2)
    assert json.loads(response.content) == schema_v2()
    # Version 1 stays what it was, and version 2 names it as its predecessor.
    assert json.loads(client.get("/feeds/data/schema/1").content) == SCHEMA
    assert header_links(client.get("/feeds/data/schema/2"), "predecessor-version") == [
        (version_url(1), SCHEMA_TYPE)]


@pytest.mark.parametrize("path", [
    "/feeds/books/schema", "/feeds/books/schema/1",  # a feed without a schema
    "/feeds/data/schema/2", "/feeds/data/schema/0", "/feeds/nothing/schema",
    "/feeds/nothing/schema/1",
])
def test_a_schema_that_does_not_exist_is_a_404(client, data, feed, path):
    response = client.get(path)
    assert response.status_code == 404


def test_a_dropped_schema_is_a_404_but_its_versions_stay(client, data):
    publishing.update_feed(feed=data, record_schema=None)

    assert client.get("/feeds/data/schema").status_code == 404
    assert client.get("/feeds/data/schema/1").status_code == 200


# The describedby link --------------------------------------------------------------------

def test_the_subscription_document_links_the_schema_in_force(client, data, atom_validators):
    response = client.get("/feeds/data/")

    atom_validators(response.content)
    expected = [(version_url(1), SCHEMA_TYPE)]
    assert body_links(response.content, "describedby") == expected
    assert header_links(response, "describedby") == expected
    assert header_links(client.head("/feeds/data/"), "describedby") == expected


def test_a_new_schema_version_changes_the_subscription_document_and_its_etag(client, data):
    before = client.get("/feeds/data/")

    publishing.update_feed(feed=data, record_schema=schema_v2())
    after = client.get("/feeds/data/", HTTP_IF_NONE_MATCH=before["ETag"])

    assert after.status_code == 200
    assert after["ETag"] != before["ETag"]
    assert body_links(after.content, "describedby") == [(version_url(2), SCHEMA_TYPE)]
    assert header_links(after, "describedby") == [(version_url(2), SCHEMA_TYPE)]


def test_the_same_schema_again_changes_nothing(client, data):
    before = client.get("/feeds/data/")

    publishing.update_feed(feed=data, record_schema=json.loads(json.dumps(SCHEMA)))

    assert client.get("/feeds/data/", HTTP_IF_NONE_MATCH=before["ETag"]).status_code == 304


def test_the_rss_twin_links_the_schema_in_its_channel(client, data):
    response = client.get("/feeds/data/rss/")

    expected = [(version_url(1), SCHEMA_TYPE)]
    assert body_links(response.content, "describedby", rss=True) == expected
    assert header_links(response, "describedby") == expected


@pytest.mark.parametrize("path", ["/feeds/data/complete/", "/feeds/data/paged/"])
def test_the_complete_and_paged_feeds_link_the_schema_too(client, data, atom_validators, path):
    response = client.get(path)
    body = body_of(response)

    atom_validators(body)
    expected = [(version_url(1), SCHEMA_TYPE)]
    assert body_links(body, "describedby") == expected
    assert header_links(response, "describedby") == expected


def test_the_linked_pages_entry_point_links_the_schema(client, data):
    response = client.get("/feeds/data/pages/latest")

    assert response.status_code == 302
    assert header_links(response, "describedby") == [(version_url(1), SCHEMA_TYPE)]
    assert header_links(response, "self") == [(f"{BASE}/feeds/data/pages/latest", None)]


def test_a_record_s_atom_entry_links_the_version_it_was_checked_under(client, data):
    publishing.update_feed(feed=data, record_schema=schema_v2())
    publishing.put_record(feed=data, key="new", data=record_data(2, metadata=METADATA))

    for key, version in (("sea", 1), ("new", 2)):
        response = client.get(f"/feeds/data/records/{key}")
        expected = [(version_url(version), SCHEMA_TYPE)]
        assert body_links(response.content, "describedby") == expected, key
        assert header_links(response, "describedby") == expected, key
        assert json.loads(client.get(f"/feeds/data/records/{key}?format=json").content)[
            "schema"] == version_url(version)


def test_sealed_pages_are_not_touched(client, data):
    for n in range(2, 4):
        publishing.put_record(feed=data, key=f"r{n}", data=record_data(n, metadata=METADATA))
    seal_feed(fresh(data))
    page = client.get("/feeds/data/archives/1/")
    twin = client.get("/feeds/data/archives/1/rss/")

    publishing.update_feed(feed=data, record_schema=schema_v2())

    for path, before in (("/feeds/data/archives/1/", page),
                         ("/feeds/data/archives/1/rss/", twin)):
        after = client.get(path)
        assert after.content == before.content, path
        assert after["ETag"] == before["ETag"], path
        assert header_links(after, "describedby") == [], path
    assert body_links(page.content, "describedby") == []
    assert header_links(client.get("/feeds/data/paged/1/"), "describedby") == []


FEED_DOCUMENTS = ["/feeds/books/", "/feeds/books/rss/", "/feeds/books/complete/",
                  "/feeds/books/paged/", "/feeds/books/records/k1"]


def test_a_feed_without_a_schema_links_none(client, sealed_feed):
    for path in [*FEED_DOCUMENTS, "/feeds/books/pages/latest"]:
        response = client.get(path)
        assert "describedby" not in response["Link"], path
        assert b"describedby" not in body_of(response), path
    atom = etree.fromstring(client.get("/feeds/books/").content)
    assert [link.get("rel") for link in atom.findall("a:link", NS)] == [
        "self", "current", "prev-archive", "hub", "alternate"]


def test_a_feed_whose_schema_is_dropped_serves_what_it_served_before_it_had_one(
        client, sealed_feed):
    before = {path: body_of(client.get(path)) for path in FEED_DOCUMENTS}

    publishing.update_feed(feed=fresh(sealed_feed), record_schema={"type": "object"})
    assert b"describedby" in client.get("/feeds/books/").content
    publishing.update_feed(feed=fresh(sealed_feed), record_schema=None)

    assert {path: body_of(client.get(path)) for path in FEED_DOCUMENTS} == before


# The feed's page for people ----------------------------------------------------------------

def test_the_feeds_page_links_the_schema(client, data):
    response = client.get("/feeds/data/?format=html")
    root = html.fromstring(response.content)

    assert root.xpath("//head/link[@rel='describedby']/@href") == [version_url(1)]
    assert root.xpath("//head/link[@rel='describedby']/@type") == [SCHEMA_TYPE]
    visible = root.xpath("//main//a[@href=$href]", href=version_url(1))
    assert [link.text_content() for link in visible] == [
        "record schema (JSON Schema, version 1)"]
    assert header_links(response, "describedby") == [(version_url(1), SCHEMA_TYPE)]
    # Among the formats for programs.
    row = root.xpath("//h2[.='Formats']/following-sibling::table[1]//tr[th='Record schema']")
    assert row[0].xpath("td/code/text()") == [f"{BASE}/feeds/data/schema"]


def test_the_feeds_page_follows_the_schema_in_force(client, data):
    before = client.get("/feeds/data/?format=html")

    publishing.update_feed(feed=data, record_schema=schema_v2())
    after = client.get("/feeds/data/?format=html", HTTP_IF_NONE_MATCH=before["ETag"])

    assert after.status_code == 200
    root = html.fromstring(after.content)
    assert root.xpath("//head/link[@rel='describedby']/@href") == [version_url(2)]


def test_a_feed_without_a_schema_has_no_schema_link_on_its_page(client, sealed_feed):
    root = html.fromstring(client.get("/feeds/books/?format=html").content)

    assert root.xpath("//link[@rel='describedby']") == []
    assert "schema" not in root.text_content().lower()


# A record's page for people ----------------------------------------------------------------

def record_page(client, key: str = "sea", slug: str = "data"):
    response = client.get(f"/feeds/{slug}/records/{key}?format=html")
    assert response.status_code == 200
    root = html.fromstring(response.content)
    assert root.xpath("//pre") == []  # never a JSON dump
    return root


def metadata_list(root):
    """The record's metadata: the definition list after the Metadata heading."""
    found = root.xpath("//h2[.='Metadata']/following-sibling::*[1]")[0]
    assert found.tag == "dl"
    return found


def pairs(dl) -> list[tuple[str, object]]:
    return list(zip(dl.xpath("dt"), dl.xpath("dd"), strict=True))


def test_a_record_s_page_labels_its_metadata_by_its_schema_in_the_schema_s_order(client, data):
    dl = metadata_list(record_page(client))

    assert [dt.text_content() for dt in dl.xpath("dt")] == [
        "Creators", "Date issued", "Last modified", "Subjects", "Licence", "Identifier",
        "version",  # no title: its name
        "Funding",  # its title from #/$defs/grant
        "note", "homepage"]  # not in the schema: their names, after it


def test_descriptions_show_on_hover(client, data):
    labels = {dt.text_content(): dt.get("title") for dt in metadata_list(record_page(client))
              .xpath("dt")}

    assert labels["Creators"] == "Who made the data set, first author first"
    assert labels["Funding"] == "The grant that paid for it"
    assert labels["Subjects"] is None


def test_lists_are_lists_and_objects_nested_lists(client, data):
    shown = dict((dt.text_content(), dd) for dt, dd in pairs(metadata_list(record_page(client))))

    assert shown["Subjects"].xpath("ul/li/text()") == ["oceanography", "salinity"]
    creators = shown["Creators"].xpath("ul/li")
    assert len(creators) == 2
    ada = dict((dt.text_content(), dd) for dt, dd in pairs(creators[0].xpath("dl")[0]))
    assert list(ada) == ["Name", "ORCID iD"]  # the items' $ref'd schema labels them
    assert ada["Name"].text == "Ada Lovelace"
    assert ada["ORCID iD"].xpath("a/@href") == ["https://orcid.org/0000-0002-1825-0097"]
    funding = dict((dt.text_content(), dd.text_content())
                   for dt, dd in pairs(shown["Funding"].xpath("dl")[0]))
    assert funding == {"Funder": "Royal Society", "Award number": "RS-42"}


def test_dates_are_written_for_people(client, data):
    shown = dict((dt.text_content(), dd) for dt, dd in pairs(metadata_list(record_page(client))))

    issued = shown["Date issued"].xpath("time")[0]
    assert (issued.get("datetime"), issued.text) == ("2021-03-04", "March 4, 2021")
    modified = shown["Last modified"].xpath("time")[0]
    assert (modified.get("datetime"), modified.text) == (
        "2021-03-04T10:05:00+02:00", "March 4, 2021, 10:05 UTC+02:00")


def test_dates_are_written_in_the_feed_s_language(client, db):
    feed = publishing.create_feed(slug="donnees", title="Données", record_schema=SCHEMA,
                                  language="fr")
    publishing.put_record(feed=feed, key="mer", data=record_data(1, metadata={
        "creators": [{"name": "Marie Curie"}], "issued": "2021-03-04",
        "modified": "2021-03-04T08:05:09Z"}))
    shown = dict((dt.text_content(), dd.text_content())
                 for dt, dd in pairs(metadata_list(record_page(client, "mer", "donnees"))))

    assert shown["Date issued"] == "4 mars 2021"
    assert shown["Last modified"] == "4 mars 2021, 08:05:09 UTC"


def test_urls_are_links_only_when_a_browser_may_follow_them(client, data):
    shown = dict((dt.text_content(), dd) for dt, dd in pairs(metadata_list(record_page(client))))

    assert shown["Licence"].xpath("a/@href") == ["https://creativecommons.org/licenses/by/4.0/"]
    assert shown["homepage"].xpath("a/@href") == ["https://example.org/data/1"]
    assert shown["homepage"].xpath("a/@rel") == ["nofollow noopener"]
    assert shown["Identifier"].xpath("a") == []  # a URN: shown, not followed
    assert shown["Identifier"].text == "urn:nbn:de:0000-12345"
    assert shown["version"].text == "2"


def test_a_record_is_shown_by_the_version_it_was_checked_under(client, data):
    publishing.update_feed(feed=data, record_schema=schema_v2())
    publishing.put_record(feed=data, key="new", data=record_data(2, metadata=METADATA))

    old, new = record_page(client, "sea"), record_page(client, "new")
    assert "Date issued" in [dt.text_content() for dt in metadata_list(old).xpath("dt")]
    assert "Published" in [dt.text_content() for dt in metadata_list(new).xpath("dt")]
    assert old.xpath("//head/link[@rel='describedby']/@href") == [version_url(1)]
    assert new.xpath("//main//a[@href=$href]/text()", href=version_url(2)) == [
        "record schema, version 2"]


def test_a_record_without_a_schema_is_shown_by_its_names_as_lists_and_nested_lists(
        client, feed):
    publishing.put_record(feed=feed, key="free", data=record_data(1, metadata={
        "tags": ["a", "b"], "place": {"city": "Kiel", "links": ["https://example.org/kiel"]},
        "empty": [], "nothing": None, "year": 1999}))
    root = record_page(client, "free", "books")
    shown = dict((dt.text_content(), dd) for dt, dd in pairs(metadata_list(root)))

    # In the order the database keeps (PostgreSQL's jsonb sorts keys, SQLite keeps them).
    assert sorted(shown) == ["empty", "nothing", "place", "tags", "year"]
    assert shown["tags"].xpath("ul/li/text()") == ["a", "b"]
    place = dict((dt.text_content(), dd) for dt, dd in pairs(shown["place"].xpath("dl")[0]))
    assert place["city"].text == "Kiel"
    assert place["links"].xpath("ul/li/a/@href") == ["https://example.org/kiel"]
    assert shown["empty"].text_content() == shown["nothing"].text_content() == "none"
    assert shown["year"].text == "1999"
    assert root.xpath("//link[@rel='describedby']") == []


def test_schema_text_is_shown_as_text(client, db):
    evil = "<script>alert(1)</script>"
    schema = {"type": "object", "properties": {
        "x": {"type": "string", "title": evil, "description": f'" onmouseover="alert(1) {evil}'}}}
    feed = publishing.create_feed(slug="evil", title="Evil", record_schema=schema)
    publishing.put_record(feed=feed, key="k", data=record_data(1, metadata={
        "x": "javascript:alert(1)", evil: evil}))
    root = record_page(client, "k", "evil")
    dl = metadata_list(root)

    assert root.xpath("//script | //*[@onmouseover]") == []
    assert [dt.text_content() for dt in dl.xpath("dt")] == [evil, evil]
    assert dl.xpath("dt[1]/@title") == [f'" onmouseover="alert(1) {evil}']
    assert dl.xpath(".//a") == []  # javascript: is never a link


def test_metadata_nested_as_deeply_as_a_record_may_be_is_shown(client, feed):
    deep: dict | list = {"leaf": "bottom"}
    for level in range(1, MAX_METADATA_DEPTH):  # objects in lists in objects...
        deep = {f"level{level}": deep} if level % 2 else [deep]
    publishing.put_record(feed=feed, key="deep", data=record_data(1, metadata=deep))

    root = record_page(client, "deep", "books")
    assert root.xpath("//dd[.='bottom']")
