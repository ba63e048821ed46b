"""The API keeps its published contract: what /api/schema/ says of each operation is what
the API does. Reads need no token (but the list of one's own tokens) and the schema says so;
bodies and query parameters of another type or form than the schema's are refused with a 400
naming them, not taken as something else; the schema's patterns are archives.validation's
rules. (.ci/contract runs schemathesis against a served API for the rest.)"""

from __future__ import annotations

import json
import random
import re

import jsonschema_rs
import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from archives import validation
from archives.log import publishing
from archives.models import Feed

from .factories import FeedFactory, record_data
from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client, url

READS = {"get", "head"}
# Reads that are not public: who may write a feed is for its maintainers to see, who
# changed a record for its feed's producers.
STAFF_READS = {("/api/feeds/{slug}/members/", "get"),
               ("/api/feeds/{slug}/records/{key}/history", "get")}


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


# The reads that need credentials: a user's own tokens.
PRIVATE_READS = {"/api/tokens/"}


def test_the_schema_says_reads_need_no_token_and_writes_do(schema):
    for path, method, operation in operations(schema):
        security = operation["security"]
        assert {"tokenAuth": []} in security, (path, method)
        if method in READS and path not in PRIVATE_READS and (path, method) not in STAFF_READS:
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


def test_the_private_reads_answer_401_without_a_token_and_the_schema_says_so(schema):
    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    for path, method in [*STAFF_READS, *((path, "get") for path in PRIVATE_READS)]:
        operation = schema["paths"][path][method]
        assert "401" in operation["responses"]
        address = path.replace("{slug}", "books").replace("{key}", "k1")

        assert getattr(APIClient(), method)(address).status_code == 401, (path, method)


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


# What the schema allows, the API takes: schemathesis (.ci/contract) sends values the
# published schema allows and calls a 400 for one of them a broken contract. Here the
# published schema is read by jsonschema-rs, the engine schemathesis checks its generated
# values with (ECMA-262 regexes, as OpenAPI means), and held to the write path's rules.


def as_json_schema(node):
    """An OpenAPI 3.0 schema as JSON Schema: `nullable: true` becomes "or null"."""
    if isinstance(node, list):
        return [as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {name: as_json_schema(value) for name, value in node.items()
                 if name != "nullable"}
    return {"anyOf": [converted, {"type": "null"}]} if node.get("nullable") else converted


def published(schema: dict, component: str, *path: str):
    """A validator of the published schema of `component` (or of one of its properties)."""
    target: dict = {"$ref": f"#/components/schemas/{component}"}
    if path:
        target = schema["components"]["schemas"][component]
        for step in path:
            target = target["properties"][step]
    document = as_json_schema({**target, "components": schema["components"]})
    return jsonschema_rs.validator_for(document)


def taken_by_the_api(api, record: dict) -> bool:
    response = api.put(url("k1"), record, format="json")
    assert response.status_code in (200, 201, 400), response.content
    return response.status_code != 400


@pytest.mark.parametrize("record_schema", [[None, None], [], "{}", 0, True])
def test_a_record_schema_that_is_no_object_is_refused_by_the_schema_as_by_the_api(
        schema, api, record_schema):
    body = {"slug": "films", "title": "Films", "record_schema": record_schema}

    assert not published(schema, "FeedRequest").is_valid(body)
    assert refused(api.post("/api/feeds/", body, format="json"), "record_schema") == [
        "Must be a JSON object."]


@pytest.mark.parametrize("record_schema", [None, {}, {"type": "object"},
                                           {"type": ["object", "null"]},
                                           {"$schema": validation.SCHEMA_DIALECT}])
def test_a_record_schema_the_schema_allows_is_taken(schema, api, record_schema):
    body = {"slug": "films", "title": "Films", "record_schema": record_schema}

    assert published(schema, "FeedRequest").is_valid(body)
    assert api.post("/api/feeds/", body, format="json").status_code == 201


@pytest.mark.parametrize("record_schema", [
    {"type": "string"}, {"type": ["string"]}, {"type": []},
    {"$schema": "http://json-schema.org/draft-07/schema#"}, {"x": "\x0b"}])
def test_a_record_schema_the_schema_refuses_is_refused(schema, api, record_schema):
    body = {"slug": "films", "title": "Films", "record_schema": record_schema}

    assert not published(schema, "FeedRequest").is_valid(body)
    assert refused(api.post("/api/feeds/", body, format="json"), "record_schema")


@pytest.mark.parametrize("metadata", [
    {"note": "a\x0b"}, {"deep": [{"x": ["\x00"]}]}, {"n": "\ufffe"}, {"n": "\uffff"}])
def test_metadata_with_a_string_xml_cannot_carry_is_refused_by_the_schema_as_by_the_api(
        schema, api, metadata):
    FeedFactory(slug="books")
    record = {"title": "One", "metadata": metadata}

    assert not published(schema, "RecordBodyRequest").is_valid(record)
    assert not taken_by_the_api(api, record)


@pytest.mark.parametrize("metadata", [
    {"note": "tab\there", "n": None, "x": [1.5, True, {"y": "漢字 🦉"}]}, {"": ""},
    {"nel": "\x85", "bom": "\ufeff"}])
def test_metadata_the_schema_allows_is_taken(schema, api, metadata):
    FeedFactory(slug="books")
    record = {"title": "One", "metadata": metadata}

    assert published(schema, "RecordBodyRequest").is_valid(record)
    assert taken_by_the_api(api, record)


def test_the_schema_says_metadata_names_are_xml_text_too(schema, api):
    # OpenAPI 3.0 has no propertyNames: the rule is in the description (and refused).
    FeedFactory(slug="books")
    description = schema["components"]["schemas"]["RecordBodyRequest"]["properties"][
        "metadata"]["description"]

    assert "names included" in description
    assert not taken_by_the_api(api, {"title": "One", "metadata": {"a\x0b": 1}})


HREFS = [
    "https://example.org", "HTTP://Example.ORG:8443/a?b=1#c", "https://üñí.example/ä?ö#ü",
    "https://user:pw@e.org/", "https://e.org?q", "https://e.org#f", "https://e.org\\x",
    "urn:isbn:0451450523", "tag:example.org,2024:x", "URN:x", "0", "", "relative/path",
    "/absolute/path", "//e.org/x", "https://e.org/x y", " https://e.org/", "https://e.org/\t",
    "https://e.org/\n", "https://e.org/\x0b", "https://e.org/\ufffe", "https://e.org/\x85",
    "https://e.org/\u3000", "https://e.org/\ufeff", "https:///path", "https://", "http:e.org",
    "https://[::1]/x", "https://a\uff03b/", "ftp://e.org/", "mailto:a@e.org", "urn:", "urn:?x",
    "urn://x/y", "tag:#f", "https://e.org/" + "x" * 1990,
]
RELS = ["", "alternate", "related", "enclosure", "Related", "a b", "1x", "x.y-z",
        "http://www.iana.org/assignments/relation/related",
        "http://www.iana.org/assignments/relation/Foo", "https://e.org/rels/x", "urn:x:y"]
MEDIA_TYPES = ["", "text/html", "text/html; charset=utf-8", "text/html;charset=\"utf-8\"",
               "text/html ;\tq=1", "text/html;\nq=1", "text", "text/", "/html",
               "text/html; a=\"\x0b\"", "text/html; a=\"\ufffe\"", "image/svg+xml",
               "text/html;a=\"b c\""]


def test_the_link_patterns_of_the_schema_are_the_link_rules(schema):
    link = schema["components"]["schemas"]["LinkRequest"]

    def by_schema(**fields):
        return published(schema, "LinkRequest").is_valid(fields)

    def by_rule(**fields):
        try:
            validation.clean_record({"title": "t", "links": [fields]})
        except ValidationError:
            return False
        return True

    for href in HREFS:
        assert by_schema(href=href) == by_rule(href=href), repr(href)
    for rel in RELS:
        assert by_schema(href="urn:x", rel=rel) == by_rule(href="urn:x", rel=rel), repr(rel)
    for kind in MEDIA_TYPES:  # (related: an alternate of text/html is feedpub's own)
        assert by_schema(href="urn:x", rel="related", type=kind) == by_rule(
            href="urn:x", rel="related", type=kind), repr(kind)
    # The rule is the pattern: the write path reads the same constant.
    assert link["properties"]["href"]["pattern"] == validation.ABSOLUTE_URI_PATTERN.replace(
        r"\x", r"\u00")


def test_the_href_pattern_agrees_with_the_rule_on_strings_made_of_hard_characters(schema):
    # A fixed sample, as schemathesis would draw it: schemes, separators, and characters
    # on either side of each class the pattern names.
    pattern = published(schema, "LinkRequest", "href")
    pieces = ["https://", "http://", "urn:", "tag:", "HTTP://", "e.org", "/", "?", "#", "[",
              "]", ":", "@", " ", "\t", "\x0b", "\x85", "\xa0", "\u2028", "\ufeff", "\ufffe",
              "\uff03", "\u2100", "ü", "%20", "x", "1", ",", "\\"]
    draw = random.Random(30)
    for _ in range(3000):
        href = "".join(draw.choice(pieces) for _ in range(draw.randint(1, 6)))
        assert pattern.is_valid(href) == validation.records._is_absolute_uri(href), repr(href)


@pytest.mark.parametrize("text", [
    "Moby-Dick", "", " ", "\t\n", "a\x0b", "a\x00", "\ufffe", "\uffff", "a\ufffe", "\x85",
    "\ufeff", "\u3000", "\u180e", "\u200b", " \x85 ", "漢字 🦉", "\u00a0", "\x1f"])
def test_the_text_patterns_read_as_ecma_262_are_the_xml_and_blank_rules(schema, text):
    body = "RecordBodyRequest"

    assert published(schema, body, "summary").is_valid(text) == (
        validation.xml_problem(text) is None), repr(text)
    try:
        validation.clean_record({"title": text})
        title_rule = True
    except ValidationError:
        title_rule = False
    assert published(schema, body, "title").is_valid(text) == title_rule, repr(text)


def test_a_lone_surrogate_is_refused_and_no_schema_string_holds_one(schema, api):
    # JSON text may escape one ("\ud800"); it is no Unicode character, so no JSON Schema
    # string (and nothing schemathesis sends): the patterns leave it out, the rule refuses it.
    FeedFactory(slug="books")
    for text in ("\ud800", "a\udfff"):
        assert validation.xml_problem(text)
        assert not validation.records._is_absolute_uri("https://e.org/" + text)
    body = '{"title": "One", "metadata": {"x": "\\ud800"}}'
    response = api.generic("PUT", url("k1"), body, content_type="application/json")
    assert refused(response, "metadata")


# A slug another feed has: the request is valid, the data refuses it (409, not 400)


def test_a_taken_slug_is_a_409_naming_the_feed_that_has_it_and_the_schema_says_so(schema, api):
    FeedFactory(slug="books")
    FeedFactory(slug="films")

    created = api.post("/api/feeds/", {"slug": "books", "title": "Again"}, format="json")
    renamed = api.patch("/api/feeds/films/", {"slug": "BOOKS"}, format="json")

    for response in (created, renamed):
        assert response.status_code == 409, response.content
        assert "'books'" in response.json()["errors"]["slug"][0]
    for method, path in (("post", "/api/feeds/"), ("patch", "/api/feeds/{slug}/")):
        assert "409" in schema["paths"][path][method]["responses"], method
    assert sorted(Feed.objects.values_list("slug", flat=True)) == ["books", "films"]


def test_a_taken_slug_with_an_invalid_body_is_a_400_for_the_body(api):
    FeedFactory(slug="books")

    response = api.post("/api/feeds/", {"slug": "books", "title": "t", "record_schema": []},
                        format="json")

    assert refused(response, "record_schema")


@pytest.mark.parametrize(("name", "value"), [("type", {}), ("type", []), ("type", 0),
                                             ("rel", []), ("rel", {}), ("rel", False)])
def test_a_link_rel_or_type_of_another_type_than_a_string_is_refused(schema, api, name, value):
    FeedFactory(slug="books")
    record = {"title": "One", "links": [{"href": "https://e.org/", name: value}]}

    assert not published(schema, "RecordBodyRequest").is_valid(record)
    assert refused(api.put(url("k1"), record, format="json"), "links")
