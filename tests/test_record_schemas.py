"""A feed's record schema: declared through the API, kept as immutable versions, checked by
the write path for every put whatever the door, refused while live records do not match it,
and named by every entry checked under it (docs/describing-records.md)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from archives.log import publishing
from archives.models import Entry, Feed, Record, RecordSchema

from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client
from .test_linkedpages import parts_of
from .threads import run_at_once

BOOK = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "year": {"type": "integer", "title": "Year", "x-dc": "date"},
        "creators": {"type": "array", "items": {"type": "string"}, "x-dc": "creator"},
        "form": {"enum": ["novel", "poetry"], "x-dc": "type"},
    },
    "required": ["year"],
}
STRICTER = {**BOOK, "required": ["year", "creators"]}


@pytest.fixture
def api(db):
    return token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))


@pytest.fixture
def books(api):
    answer = api.post("/api/feeds/", {"slug": "books", "title": "Books", "record_schema": BOOK},
                      format="json")
    assert answer.status_code == 201, answer.content
    return Feed.objects.get(slug="books")


def put(api, key, metadata, *, title=None, slug="books"):
    return api.put(f"/api/feeds/{slug}/records/{key}",
                   {"title": title or key.title(), "metadata": metadata}, format="json")


def public_json(client, slug, key):
    answer = client.get(f"/feeds/{slug}/records/{key}", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    return answer.json()


def schema_url(slug: str, version: int) -> str:
    return f"http://127.0.0.1:8000/feeds/{slug}/schema/{version}"


# Declaring a schema ---------------------------------------------------------------------

def test_a_feed_shows_its_schema_and_the_url_of_the_version_in_force(api, books):
    answer = api.get("/api/feeds/books/")
    assert answer.json()["record_schema"] == BOOK
    assert answer.json()["schema"] == schema_url("books", 1)
    assert answer["Link"] == (f'<{schema_url("books", 1)}>; rel="describedby"; '
                              'type="application/schema+json"')


def test_a_schema_keeps_the_order_it_was_written_in(api, books, client):
    """Forms, pages and oai_dc follow the order of its properties (PostgreSQL's jsonb would
    sort them by length)."""
    ordered = {"type": "object", "properties": {
        name: {"type": "string"} for name in ("title", "creators", "year", "a", "subjects")}}
    api.patch("/api/feeds/books/", {"record_schema": ordered}, format="json")
    served = json.loads(client.get("/feeds/books/schema/2").content)
    assert list(served) == ["type", "properties"]
    assert list(served["properties"]) == ["title", "creators", "year", "a", "subjects"]
    shown = api.get("/api/feeds/books/").json()["record_schema"]
    assert list(shown["properties"]) == ["title", "creators", "year", "a", "subjects"]


def test_a_feed_without_a_schema_says_null(api):
    api.post("/api/feeds/", {"slug": "plain", "title": "Plain"}, format="json")
    answer = api.get("/api/feeds/plain/")
    assert "Link" not in answer
    feed = answer.json()
    assert feed["record_schema"] is None
    assert feed["schema"] is None


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object", "properties": {"year": {"type": "whole number"}}},
     "at properties/year/type"),
    ({"properties": {"year": {"x-dc": "author"}}}, "'author' is not a Dublin Core element"),
    ({"properties": {"a": {"items": {"x-dc": "title"}}}}, "top-level properties"),
    ({"$ref": "https://example.org/schema.json"}, "leads outside the schema"),
    ({"$ref": "#/$defs/missing"}, "does not exist"),
    ({"type": "array"}, 'top-level "type" must be "object"'),
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "draft 2020-12"),
    (["not", "an", "object"], "Must be a JSON object"),
    ({"properties": {"a": {"pattern": "("}}}, "at properties/a/pattern"),
])
def test_a_value_that_is_not_a_schema_feedpub_takes_is_refused_naming_why(api, schema, why):
    answer = api.post("/api/feeds/", {"slug": "bad", "title": "Bad", "record_schema": schema},
                      format="json")
    assert answer.status_code == 400
    [message] = answer.json()["errors"]["record_schema"]
    assert why in message
    assert not Feed.objects.filter(slug="bad").exists()


# Every door checks records --------------------------------------------------------------

def test_a_put_that_does_not_match_is_refused_naming_each_place_and_writes_nothing(api, books):
    answer = put(api, "emma", {"year": "eighteen", "creators": ["Austen", 3], "form": "play"})
    assert answer.status_code == 400
    assert answer.json()["errors"]["metadata"] == [
        'metadata.creators[1]: 3 is not of type "string"',
        'metadata.form: "play" is not one of "novel" or "poetry"',
        'metadata.year: "eighteen" is not of type "integer"',
    ]
    assert not Record.objects.exists()
    assert not Entry.objects.exists()
    assert Feed.objects.get(slug="books").last_seq == 0


def test_a_record_that_matches_names_the_version_it_was_checked_under(api, books, client):
    answer = put(api, "emma", {"year": 1815, "creators": ["Austen, Jane"]})
    assert answer.status_code == 201
    assert answer.json()["schema"] == schema_url("books", 1)
    assert public_json(client, "books", "emma")["schema"] == schema_url("books", 1)


def test_a_patch_is_checked_as_the_record_it_makes(api, books):
    put(api, "emma", {"year": 1815})
    answer = api.patch("/api/feeds/books/records/emma", {"metadata": {"form": "novel"}},
                       format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"]["metadata"] == ['metadata: "year" is a required property']
    assert Entry.objects.count() == 1


def test_a_batch_with_one_bad_record_writes_nothing_and_names_the_operation(api, books):
    answer = api.post("/api/feeds/books/batch", {"operations": [
        {"op": "put", "key": "emma", "record": {"title": "Emma", "metadata": {"year": 1815}}},
        {"op": "put", "key": "odes", "record": {"title": "Odes", "metadata": {"year": "1819"}}},
    ]}, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"] == {"operations": {"1": {"metadata": [
        'metadata.year: "1819" is not of type "integer"']}}}
    assert not Entry.objects.exists()


def test_the_write_path_checks_what_no_serializer_saw(books):
    with pytest.raises(ValidationError) as refused:
        publishing.put_record(feed=books, key="emma", data={"title": "Emma",
                                                             "metadata": {"year": 1815.5}})
    assert refused.value.message_dict == {
        "metadata": ["metadata.year: 1815.5 is not of type \"integer\""]}


def test_formats_are_checked(api):
    schema = {"properties": {"issued": {"type": "string", "format": "date"},
                             "page": {"type": "string", "format": "uri"}}}
    api.post("/api/feeds/", {"slug": "dated", "title": "Dated", "record_schema": schema},
             format="json")
    answer = put(api, "a", {"issued": "2024-02-30", "page": "not a uri"}, slug="dated")
    assert answer.json()["errors"]["metadata"] == [
        'metadata.issued: "2024-02-30" is not a "date"',
        'metadata.page: "not a uri" is not a "uri"']
    assert put(api, "a", {"issued": "2024-02-29", "page": "https://example.org/a"},
               slug="dated").status_code == 201


def test_a_feed_without_a_schema_takes_any_metadata_and_its_records_name_none(api, client):
    api.post("/api/feeds/", {"slug": "plain", "title": "Plain"}, format="json")
    answer = put(api, "a", {"year": "eighteen", "deep": {"any": ["thing"]}}, slug="plain")
    assert answer.status_code == 201
    assert "schema" not in answer.json()
    assert "schema" not in public_json(client, "plain", "a")
    assert Entry.objects.get().schema_version is None


# Versions ---------------------------------------------------------------------------------

def test_every_change_is_a_new_version_and_old_versions_stay_as_they_were(api, books, client):
    put(api, "emma", {"year": 1815, "creators": ["Austen, Jane"]})
    assert api.patch("/api/feeds/books/", {"record_schema": STRICTER},
                     format="json").status_code == 200
    assert api.patch("/api/feeds/books/", {"record_schema": STRICTER},  # the same again
                     format="json").status_code == 200
    assert [(row.version, row.schema) for row in RecordSchema.objects.filter(feed=books)] == [
        (1, BOOK), (2, STRICTER)]
    assert json.loads(client.get("/feeds/books/schema/1").content) == BOOK
    assert json.loads(client.get("/feeds/books/schema/2").content) == STRICTER
    assert json.loads(client.get("/feeds/books/schema").content) == STRICTER
    assert api.get("/api/feeds/books/").json()["schema"] == schema_url("books", 2)


def test_each_entry_names_the_version_it_was_checked_under_in_the_linked_pages(
        api, books, client):
    put(api, "emma", {"year": 1815})
    put(api, "emma", {"year": 1815, "creators": ["Austen, Jane"]})
    api.patch("/api/feeds/books/", {"record_schema": STRICTER}, format="json")
    put(api, "emma", {"year": 1816, "creators": ["Austen, Jane"]})
    api.patch("/api/feeds/books/", {"record_schema": None}, format="json")
    put(api, "emma", {"year": "1816?"})
    api.delete("/api/feeds/books/records/emma")

    page = client.get("/feeds/books/pages/latest", follow=True)
    named = [json.loads(part.get_content()).get("schema") if part.get_content() else "deleted"
             for part in parts_of(page)]
    assert named == [schema_url("books", 1), schema_url("books", 1), schema_url("books", 2),
                     None, "deleted"]
    assert list(Entry.objects.order_by("seq").values_list("schema_version", flat=True)) == [
        1, 1, 2, None, None]


def test_the_schema_in_force_sent_again_reads_no_record(api, books):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for n in range(3):
        put(api, f"r{n}", {"year": 1800 + n})
    with CaptureQueriesContext(connection) as queries:
        answer = api.patch("/api/feeds/books/", {"title": "Books", "record_schema": BOOK},
                           format="json")
    assert answer.status_code == 200
    assert not [q["sql"] for q in queries if '"metadata"' in q["sql"]]


def test_a_schema_removed_and_declared_again_is_a_new_version(api, books):
    api.patch("/api/feeds/books/", {"record_schema": None}, format="json")
    assert api.get("/api/feeds/books/").json()["schema"] is None
    api.patch("/api/feeds/books/", {"record_schema": BOOK}, format="json")
    assert api.get("/api/feeds/books/").json()["schema"] == schema_url("books", 2)


# A schema that live records would break ------------------------------------------------

def test_a_schema_live_records_break_is_refused_naming_how_many_and_the_first(api, books):
    put(api, "odes", {"year": 1819})
    put(api, "emma", {"year": 1815})
    put(api, "poems", {"year": 1820, "creators": ["Keats, John"]})
    put(api, "gone", {"year": 1800})
    api.delete("/api/feeds/books/records/gone")  # deleted records are not checked

    answer = api.patch("/api/feeds/books/", {"record_schema": STRICTER}, format="json")
    assert answer.status_code == 409
    [message] = answer.json()["errors"]["record_schema"]
    assert message.startswith("2 live record(s) do not match this schema; the first, 'emma': "
                              'metadata: "creators" is a required property.')
    assert api.get("/api/feeds/books/").json()["record_schema"] == BOOK
    assert RecordSchema.objects.filter(feed=books).count() == 1


def test_records_corrected_in_one_batch_let_the_stricter_schema_in(api, books):
    put(api, "odes", {"year": 1819})
    put(api, "emma", {"year": 1815})
    api.post("/api/feeds/books/batch", {"operations": [
        {"op": "put", "key": "odes", "record": {"title": "Odes", "metadata": {
            "year": 1819, "creators": ["Keats, John"]}}},
        {"op": "put", "key": "emma", "record": {"title": "Emma", "metadata": {
            "year": 1815, "creators": ["Austen, Jane"]}}},
    ]}, format="json")
    assert api.patch("/api/feeds/books/", {"record_schema": STRICTER},
                     format="json").status_code == 200


def test_restoring_a_deleted_record_is_checked_under_the_schema_in_force(api, books):
    put(api, "gone", {"year": 1800})
    api.delete("/api/feeds/books/records/gone")
    api.patch("/api/feeds/books/", {"record_schema": STRICTER}, format="json")
    assert put(api, "gone", {"year": 1800}).status_code == 400
    assert put(api, "gone", {"year": 1800, "creators": ["Anon"]}).status_code == 200


def test_a_feed_with_a_schema_and_no_entry_is_deleted_with_its_versions(api, books):
    assert api.delete("/api/feeds/books/").status_code == 204
    assert not RecordSchema.objects.exists()


# Under contention (PostgreSQL) -----------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_no_record_that_breaks_a_new_schema_slips_in_while_it_is_being_declared(settings):
    """Writers put records the stricter schema refuses while it is declared: either the
    schema is refused (a breaking record is live) or every live record matches it."""
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = publishing.create_feed(slug="race", title="Race", record_schema=BOOK)
    for n in range(200):
        publishing.put_record(feed=feed, key=f"k{n}", data={
            "title": "K", "metadata": {"year": n, "creators": ["A"]}})

    def writer():
        refused = 0
        for n in range(200):
            try:
                publishing.put_record(feed=feed, key=f"new{n}",
                                      data={"title": "N", "metadata": {"year": n}})
            except ValidationError:
                refused += 1
        return refused

    def declare():
        try:
            publishing.update_feed(feed=feed, record_schema=STRICTER)
        except publishing.SchemaConflict:
            return "refused"
        return "declared"

    refused, outcome = run_at_once([writer, declare])
    feed.refresh_from_db()
    live = Record.objects.filter(feed=feed, deleted_at__isnull=True)
    breaking = [record.key for record in live if "creators" not in record.metadata]
    if outcome == "declared":
        assert feed.schema_version == 2
        assert breaking == []
        assert refused > 0  # the writes after the declaration were refused
    else:
        assert outcome == "refused"
        assert feed.schema_version == 1
        assert breaking


def test_a_property_named_like_a_records_own_field_is_taken_with_a_warning(api):
    """A warning, not a refusal: a catalogue may mean a title apart from the record's."""
    schema = {"type": "object", "required": ["title"], "properties": {
        "title": {"type": "string", "x-dc": "title"}, "year": {"type": "integer"},
        "links": {"type": "array", "items": {"type": "string"}}}}

    created = api.post("/api/feeds/", {"slug": "theses", "title": "Theses",
                                       "record_schema": schema}, format="json")
    shown = api.get("/api/feeds/theses/")
    written = put(api, "t1", {"title": "Soil carbon", "year": 2019}, slug="theses")
    changed = api.patch("/api/feeds/theses/", {"record_schema": {
        "type": "object", "properties": {"year": {"type": "integer"}}}}, format="json")

    assert created.status_code == 201, created.content
    warnings = created.json()["record_schema_warnings"]
    assert [warning.split()[2] for warning in warnings] == ["'title'", "'links'"]
    assert warnings[0] == (
        "The property 'title' is named like a record's own title, which is not part of its "
        "metadata: a record then has both, apart. Leave the property out unless it may "
        "differ from the record's title (import_records fills both from a 'title' column; a "
        "'metadata.title' column fills the property alone).")
    assert "a 'metadata.links' column fills the property" in warnings[1]
    assert shown.json()["record_schema_warnings"] == warnings
    assert changed.status_code == 200
    assert written.status_code == 201  # the schema is in force
    assert changed.json()["record_schema_warnings"] == []
