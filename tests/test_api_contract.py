"""The API keeps its published contract: what /api/schema/ says of each operation is what
the API does. Reads need no token and the schema says so; bodies and query parameters of
another type or form than the schema's are refused with a 400 naming them, not taken as
something else; the schema's patterns are archives.validation's rules. (.ci/contract runs
schemathesis against a served API for the rest.)"""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from archives import validation
from archives.log import publishing

from .factories import FeedFactory, record_data
from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client, url

READS = {"get", "head"}


@pytest.fixture
def schema(db) -> dict:
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.fixture
def api(db) -> APIClient:
    return token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))


@pytest.fixture
def anon(db) -> APIClient:
    return APIClient()


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def refused(response, field: str) -> list[str]:
    """The reasons a 400 gives for `field` (it must name it)."""
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["errors"][field]


# Who may call what


def test_the_schema_says_reads_need_no_token_and_writes_do(schema):
    for path, method, operation in operations(schema):
        security = operation["security"]
        assert {"tokenAuth": []} in security, (path, method)
        if method in READS:
            assert {} in security, (path, method)  # OpenAPI's "or no credentials at all"
        else:
            assert {} not in security, (path, method)


def test_every_read_the_schema_calls_public_answers_without_a_token(schema):
    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    client = APIClient()
    for path, method, operation in operations(schema):
        if {} not in operation["security"]:
            continue
        address = path.replace("{slug}", "books").replace("{key}", "k1")

        assert getattr(client, method)(address).status_code == 200, (path, method)


# Bodies: the type the schema declares, or a 400


@pytest.mark.parametrize("author", [0, 1.5, True, ["Team"], {"name": "Team"}])
def test_a_feed_author_that_is_not_a_string_is_refused(api, author):
    body = {"slug": "books", "title": "Books", "author": author}

    assert refused(api.post("/api/feeds/", body, format="json"), "author") == [
        "Must be a string."]
    assert api.get("/api/feeds/books/").status_code == 404


def test_a_feed_change_of_another_type_than_the_schemas_is_refused(api):
    FeedFactory(slug="books", title="Books")

    assert refused(api.patch("/api/feeds/books/", {"author": 42}, format="json"),
                   "author") == ["Must be a string."]
    assert refused(api.patch("/api/feeds/books/", {"page_size": "50"}, format="json"),
                   "page_size") == ["Must be an integer."]
    assert refused(api.patch("/api/feeds/books/", {"page_size": 50.0}, format="json"),
                   "page_size") == ["Must be an integer."]
    assert api.get("/api/feeds/books/").json()["title"] == "Books"


def test_a_slug_that_is_a_number_is_refused_not_stored_as_text(api):
    response = api.post("/api/feeds/", {"slug": 0, "title": "Zero"}, format="json")

    assert refused(response, "slug") == ["Must be a string."]
    assert api.get("/api/feeds/0/").status_code == 404


def test_a_batch_puts_summary_must_be_a_string_or_null(api):
    FeedFactory(slug="books")

    def batch(summary):
        return api.post("/api/feeds/books/batch", {"operations": [
            {"op": "put", "key": "k1", "record": {"title": "One", "summary": summary}}]},
            format="json")

    errors = refused(batch(42), "operations")
    assert errors == {"0": {"summary": ["Must be a string."]}}
    assert batch(None).status_code == 200  # as the schema says: nullable
    assert api.get(url("k1")).json()["summary"] == ""


def test_the_schema_declares_summary_and_link_texts_nullable_as_validation_takes_them(schema):
    components = schema["components"]["schemas"]
    assert components["RecordBodyRequest"]["properties"]["summary"]["nullable"] is True
    for name in ("rel", "type", "title"):
        assert components["LinkRequest"]["properties"][name]["nullable"] is True


def test_every_request_body_is_closed_and_an_unknown_member_is_refused(schema, api):
    FeedFactory(slug="books")
    for name, component in schema["components"]["schemas"].items():
        if name.endswith("Request") and "properties" in component:
            assert component["additionalProperties"] is False, name

    assert refused(api.post("/api/feeds/", {"slug": "x", "title": "X", "colour": "red"},
                            format="json"), "colour")
    assert refused(api.put(url("k1"), {"title": "T", "colour": "red"}, format="json"),
                   "colour")
    assert refused(api.post("/api/feeds/books/batch", {"operations": [], "colour": 1},
                            format="json"), "colour")


def test_an_empty_batch_is_refused_and_the_schema_says_one_at_least(schema, api):
    FeedFactory(slug="books")
    operations_schema = schema["components"]["schemas"]["BatchRequest"]["properties"][
        "operations"]

    assert operations_schema["minItems"] == 1
    assert operations_schema["maxItems"] == publishing.MAX_BATCH_OPERATIONS
    assert refused(api.post("/api/feeds/books/batch", {"operations": []}, format="json"),
                   "operations")


# Query parameters: as the schema declares them, or a 400


@pytest.mark.parametrize("path", ["/api/feeds/", "/api/feeds/books/records/"])
@pytest.mark.parametrize("page_size", ["x", "0", "1001", "-1", "2.5", "a,1", "", "٣"])
def test_a_page_size_that_is_not_an_integer_from_1_to_1000_is_refused(anon, path, page_size):
    FeedFactory(slug="books")

    response = anon.get(path, {"page_size": page_size})

    assert refused(response, "page_size") == ["An integer from 1 to 1000."]


@pytest.mark.parametrize("path", ["/api/feeds/", "/api/feeds/books/records/"])
def test_a_page_size_given_twice_is_refused_and_one_given_once_is_used(anon, path):
    FeedFactory(slug="books")
    FeedFactory(slug="novels")
    feed = FeedFactory(slug="plays")
    for n in range(3):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    path = path.replace("books", "plays")

    assert refused(anon.get(path + "?page_size=1&page_size=2"), "page_size") == [
        "Given more than once; give it once."]
    assert len(anon.get(path + "?page_size=2").json()["results"]) == 2


def test_the_schema_bounds_page_size_as_the_api_does(schema):
    for path in ("/api/feeds/", "/api/feeds/{slug}/records/"):
        parameters = {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}
        assert parameters["page_size"]["schema"] == {
            "type": "integer", "minimum": 1, "maximum": 1000}


@pytest.mark.parametrize("since", [
    "", "yesterday", "2026-11-22", "2026-11-22T08:00:00", "2026-11-22 08:00:00Z",
    "2026-11-22T08:00Z", "2026-13-22T08:00:00Z", "2026-11-22T08:00:00+0100",
])
def test_an_updated_since_that_is_not_an_rfc3339_date_time_is_refused(anon, since):
    FeedFactory(slug="books")

    response = anon.get(url(), {"updated_since": since})

    assert refused(response, "updated_since")


@pytest.mark.parametrize("since", ["2026-11-22T08:00:00Z", "2026-11-22t08:00:00.5+01:00"])
def test_an_rfc3339_updated_since_is_taken(anon, since):
    FeedFactory(slug="books")

    assert anon.get(url(), {"updated_since": since}).status_code == 200


@pytest.mark.parametrize("deleted", ["", "1", "yes", "True"])
def test_deleted_is_true_or_false_as_the_schema_says(anon, deleted):
    FeedFactory(slug="books")

    assert refused(anon.get(url(), {"deleted": deleted}), "deleted")


# The schema's patterns are validation's rules


KEYS = ["a", "moby-dick", "isbn-9780141439518", "a.b_c~d", ".hidden", "...", "a..",
        ".", "..", "", "a b", "a/b", "ü", "a%00", "k" * 201]


def test_the_key_pattern_of_the_schema_is_clean_keys_rule(schema):
    parameter = next(p for p in schema["paths"]["/api/feeds/{slug}/records/{key}"]["get"][
        "parameters"] if p["name"] == "key")
    pattern, longest = parameter["schema"]["pattern"], parameter["schema"]["maxLength"]

    for key in KEYS:
        by_schema = bool(re.search(pattern, key)) and len(key) <= longest
        try:
            validation.clean_key(key)
            by_rule = True
        except ValidationError:
            by_rule = False
        assert by_schema == by_rule, key


TEXTS = ["Moby-Dick", "", " ", "\t\n", "a\x00", "a\x0b", "tab\there", "line\r\nbreak",
         "\ufffe", "\uffff", "漢字 🦉", "\u00a0", "\x1f"]


def test_the_text_patterns_of_the_schema_are_the_xml_rule(schema):
    body = schema["components"]["schemas"]["RecordBodyRequest"]["properties"]

    for text in TEXTS:
        assert bool(re.search(body["summary"]["pattern"], text)) == (
            validation.xml_problem(text) is None), repr(text)
        accepted_as_title = bool(re.search(body["title"]["pattern"], text))
        try:
            validation.clean_record({"title": text})
            title_rule = True
        except ValidationError:
            title_rule = False
        assert accepted_as_title == title_rule, repr(text)


# Statuses: every one an operation answers is in the schema


def test_a_body_that_is_not_json_is_a_415_and_the_schema_says_so(schema, api):
    response = api.generic("POST", "/api/feeds/", "slug=books", content_type="text/plain")

    assert response.status_code == 415
    assert "text/plain" in response.json()["detail"]
    for path, method, operation in operations(schema):
        if "requestBody" in operation:
            assert "415" in operation["responses"], (path, method)


def test_an_accept_header_we_cannot_answer_is_a_406_and_the_schema_says_so(schema, anon):
    response = anon.get("/api/feeds/", headers={"Accept": "application/xml"})

    assert response.status_code == 406
    for path, method, operation in operations(schema):
        assert "406" in operation["responses"], (path, method)


def test_the_lists_document_the_400_of_a_bad_cursor_and_if_match_the_412(schema):
    for path in ("/api/feeds/", "/api/feeds/{slug}/records/"):
        assert "400" in schema["paths"][path]["get"]["responses"]
    for method, operation in schema["paths"]["/api/feeds/{slug}/records/{key}"].items():
        if any(p["name"] == "If-Match" for p in operation.get("parameters", [])):
            assert "412" in operation["responses"], method
