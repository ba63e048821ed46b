"""The API's docs work on the first try: what Swagger UI shows (the OpenAPI schema's
examples, parameters and security schemes) is sent to the API as a person would send it,
and `/api/` leads to everything."""

from __future__ import annotations

import json
from io import StringIO
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import resolve
from lxml import html
from rest_framework.test import APIClient

from archives.api.examples import MEMBER
from archives.management.commands import demo_feed
from archives.models import Feed, Record
from archives.validation import MAX_KEY_LENGTH

from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client

WRITES = ("post", "put", "patch")


@pytest.fixture
def schema(db) -> dict:
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def bodies(operation: dict):
    """(where, media content) of every request and response body of an operation."""
    if "requestBody" in operation:
        yield "request", operation["requestBody"]["content"]["application/json"]
    for code, response in operation["responses"].items():
        if "content" in response:
            yield code, response["content"]["application/json"]


def filled(path: str, operation: dict) -> str:
    """The path as Swagger UI fills it in: each path parameter with its example."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            value = next(iter(parameter["examples"].values()))["value"]
            path = path.replace("{" + parameter["name"] + "}", value)
    return path


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def quick_start() -> None:
    """The server as the Quick start leaves it: with the demo feed."""
    call_command("demo_feed", "--records", "5", "--changes", "5", stdout=StringIO())


def test_every_request_example_is_accepted_as_it_is(schema):
    quick_start()
    User.objects.create_user(MEMBER)  # the colleague the members' examples name
    api = token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))
    sent = []
    # In the schema's order, as a person trying each one top to bottom in Swagger UI
    # would: "Create a feed" and the feed's changes first, then the writes to records.
    for path, method, operation in operations(schema):
        if method not in WRITES:
            continue
        examples = operation["requestBody"]["content"]["application/json"]["examples"]
        for name, example in examples.items():
            url = filled(path, operation)
            response = getattr(api, method)(url, example["value"], format="json")
            assert response.status_code in (200, 201), (method, url, name, response.content)
            sent.append((method, url))

    assert {method for method, url in sent} == set(WRITES)
    assert ("put", "/api/feeds/demo/records/moby-dick") in sent
    assert ("post", "/api/feeds/demo/batch") in sent
    record = Record.objects.get(feed__slug="demo", key="moby-dick")
    put = schema["paths"]["/api/feeds/{slug}/records/{key}"]["put"]["requestBody"]
    body = next(iter(put["content"]["application/json"]["examples"].values()))["value"]
    assert record.title == body["title"]
    assert record.metadata == body["metadata"]
    assert [link["href"] for link in record.links] == [link["href"] for link in body["links"]]


def test_the_record_put_example_creates_the_record_with_201(schema):
    quick_start()
    api = token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))
    operation = schema["paths"]["/api/feeds/{slug}/records/{key}"]["put"]
    body = next(iter(operation["requestBody"]["content"]["application/json"]["examples"]
                     .values()))["value"]

    response = api.put(filled("/api/feeds/{slug}/records/{key}", operation), body,
                       format="json")

    assert response.status_code == 201, response.content
    shown = operation["responses"]["201"]["content"]["application/json"]["examples"]
    # The answer documented is the answer given, field for field.
    assert set(next(iter(shown.values()))["value"]) == set(response.json())
    assert {key: response.json()[key] for key in body} == body


@pytest.mark.parametrize(("path", "method"), [
    ("/api/feeds/{slug}/records/{key}", "put"), ("/api/feeds/{slug}/batch", "post"),
    ("/api/feeds/{slug}/records/", "get")])
def test_record_examples_name_the_demo_feed_or_say_to_create_one(schema, path, method):
    slug = next(p for p in schema["paths"][path][method]["parameters"] if p["name"] == "slug")
    demo_default = demo_feed.Command().create_parser("manage.py", "demo_feed").get_default(
        "slug")
    first, *others = [example["value"] for example in slug["examples"].values()]

    assert first == demo_default  # what Swagger UI fills in: the Quick start's feed
    assert "create a feed first" in slug["description"]
    created = schema["paths"]["/api/feeds/"]["post"]["requestBody"]["content"][
        "application/json"]["examples"]
    assert others == [next(iter(created.values()))["value"]["slug"]]  # or the one made


def test_every_body_has_examples_and_none_is_a_placeholder(schema):
    for path, method, operation in operations(schema):
        for where, content in bodies(operation):
            assert content.get("examples"), (path, method, where)
            for example in content["examples"].values():
                texts = list(strings(example["value"]))
                assert not [text for text in texts if text.startswith("additionalProp")
                            or text == "string"], (path, method, where)


def test_the_examples_links_are_this_apis_routes(schema, feed):
    """Every URL in an example (the lists' next and previous cursors, a record's url) is
    one of this server's routes, and the cursors are ones the API takes."""
    client = APIClient()
    seen = set()
    for _path, _method, operation in operations(schema):
        for _where, content in bodies(operation):
            for example in content["examples"].values():
                for text in strings(example["value"]):
                    if text.startswith(("http://", "https://")) and "gutenberg" not in text:
                        seen.add(text)
    lists = {url for url in seen if "cursor=" in url}
    assert {resolve(urlsplit(url).path).view_name for url in lists} == {
        "api:feed-list", "api:record-list"}
    for url in lists:
        parts = urlsplit(url)
        response = client.get(f"{parts.path}?{parts.query}")
        assert response.status_code == 200, (url, response.content)
        assert set(response.json()) == {"next", "previous", "results"}
    for url in seen - lists:
        assert resolve(urlsplit(url).path)  # raises Resolver404 for a made-up URL


def test_the_path_parameters_are_described(schema):
    for path, method, operation in operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                assert parameter["description"], (path, method, parameter["name"])
    record = schema["paths"]["/api/feeds/{slug}/records/{key}"]["get"]
    key = next(p for p in record["parameters"] if p["name"] == "key")
    assert f"1 to {MAX_KEY_LENGTH} " in key["description"]
    assert "letters, digits" in key["description"]


def test_token_auth_is_offered_first(schema):
    assert next(iter(schema["components"]["securitySchemes"])) == "tokenAuth"
    # HTTP bearer: Swagger UI asks for the token alone and sends `Authorization: Bearer`.
    assert schema["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"
    for path, method, operation in operations(schema):
        assert operation["security"][0] == {"tokenAuth": []}, (path, method)


def test_the_api_root_lists_its_roots_and_links_the_docs(db):
    client = APIClient()
    response = client.get("/api/", headers={"Accept": "application/json"})

    assert response.status_code == 200
    roots = response.json()
    assert set(roots) == {"feeds", "schema", "docs"}
    assert [resolve(urlsplit(url).path).view_name for url in roots.values()] == [
        "api:feed-list", "api:schema", "api:swagger-ui"]
    assert client.get(roots["feeds"]).status_code == 200
    docs = client.get(roots["docs"])
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content
    assert f'<{roots["docs"]}>; rel="service-doc"' in response["Link"]
    assert f'<{roots["schema"]}>; rel="service-desc"' in response["Link"]


def test_the_browsable_api_root_links_the_docs(db):
    response = APIClient().get("/api/", headers={"Accept": "text/html"})

    assert response.status_code == 200
    page = html.fromstring(response.content)
    assert "http://testserver/api/schema/swagger-ui/" in page.xpath("//a/@href")


def test_an_unknown_api_url_is_still_a_json_404(db):
    response = APIClient().get("/api/nothing-here/")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found: no such API endpoint."}
    assert not Feed.objects.exists()
