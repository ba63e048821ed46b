"""The producer API under hostile or unlucky input: every refusal is a JSON 4xx (or a
JSON 503/500 when the server fails), never an HTML page."""

from __future__ import annotations

import base64
import http.client
import json
import socket
from decimal import Decimal
from functools import partial
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import RequestDataTooBig, ValidationError
from django.db import OperationalError
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from archives.api import exceptions as api_exceptions
from archives.api import views as api_views
from archives.api.pagination import RecordCursor
from archives.log import publishing
from archives.models import Entry, Feed, Record

from .factories import FeedFactory, RecordFactory, record_data, token_for
from .test_api import (
    RECORD_PERMS,
    UserFactory,
    token_client,
    url,
)

pytestmark = pytest.mark.usefixtures("fresh_throttles")


@pytest.fixture
def producer(db) -> APIClient:
    client = token_client(UserFactory(perms=RECORD_PERMS))
    client.raise_request_exception = False
    return client


@pytest.fixture
def anon(db) -> APIClient:
    return APIClient(raise_request_exception=False)


def assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert body["detail"]
    return body


def json_body(operations) -> bytes:
    return json.dumps({"operations": operations}).encode()


# 1. The API's own body limit, not Django's 2.5 MiB


def test_a_batch_of_a_thousand_puts_over_two_and_a_half_mib_is_applied(producer, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(slug="books", page_size=100)
    body = json_body([{"op": "put", "key": f"k{n}", "record": record_data(n, summary="x" * 3000)}
                      for n in range(1000)])
    assert len(body) > 3_000_000 > 2.5 * 1024 * 1024

    response = producer.generic("POST", "/api/feeds/books/batch", body,
                                content_type="application/json")

    assert response.status_code == 200, response.content[:300]
    assert response.json()["applied"] == 1000
    assert Entry.objects.filter(feed=feed).count() == 1000


def test_a_body_over_the_api_limit_is_a_json_413_even_above_djangos_limit(producer, settings):
    settings.FEEDPUB_API_MAX_BODY_BYTES = 3 * 1024 * 1024
    FeedFactory(slug="books")
    body = json_body([{"op": "put", "key": f"k{n}", "record": record_data(n, summary="x" * 4000)}
                      for n in range(1000)])

    response = producer.generic("POST", "/api/feeds/books/batch", body,
                                content_type="application/json")

    assert "FEEDPUB_API_MAX_BODY_BYTES" in assert_json_error(response, 413)["detail"]
    assert not Record.objects.exists()


def test_the_apis_policy_holds_whatever_the_projects_rest_framework_says(producer, settings):
    settings.REST_FRAMEWORK = {}  # DRF's defaults: AllowAny, any parser, no throttle
    settings.FEEDPUB_API_MAX_BODY_BYTES = 1000
    FeedFactory(slug="books")
    anonymous = Client().put("/api/feeds/books/records/k", json_body(record_data(1)),
                             content_type="application/json")
    assert assert_json_error(anonymous, 401)
    too_big = producer.put("/api/feeds/books/records/k",
                           json_body(record_data(1, summary="x" * 2000)),
                           content_type="application/json")
    assert "FEEDPUB_API_MAX_BODY_BYTES" in assert_json_error(too_big, 413)["detail"]
    assert not Record.objects.exists()


def test_a_body_django_read_past_its_own_limit_is_a_json_413_under_api():
    request = RequestFactory().post("/api/feeds/")

    response = api_exceptions.bad_request(request, RequestDataTooBig("too big"))

    assert_json_error(response, 413)


# 2. Chunked bodies: 411, through a real server


def send_chunked(live_server, method: str, path: str, token: str, body: bytes):
    """Start a chunked request and read the answer before sending the rest: the server
    must answer from the headers alone (it never reads a body it cannot frame). Sending
    all of it first would race the server closing on the unread rest (a broken pipe)."""
    server = urlsplit(live_server.url)
    with socket.create_connection((server.hostname, server.port), timeout=10) as sock:
        first = body[:5]
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: {server.netloc}\r\n"
            f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{len(first):x}\r\n".encode() + first + b"\r\n")
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, response.getheader("Content-Type"), response.read()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PATCH", "/api/feeds/books/records/k1", {"title": "Changed"}),
    ("PUT", "/api/feeds/books/records/k1", record_data(2)),
    ("POST", "/api/feeds/books/batch", {"operations": [{"op": "delete", "key": "k1"}]}),
    ("PATCH", "/api/feeds/books/", {"title": "Changed"}),
])
def test_a_chunked_body_is_refused_with_411_not_taken_for_empty(live_server, method, path, body):
    feed = FeedFactory(slug="books", title="Books")
    RecordFactory(feed=feed, key="k1", data=record_data(1))
    user = UserFactory(perms=[*RECORD_PERMS, "change_feed"])
    token = token_for(user)
    encoded = json.dumps(body).encode()

    status, content_type, answer = send_chunked(live_server, method, path, token, encoded)

    assert status == 411
    assert content_type.startswith("application/json")
    assert "Content-Length" in json.loads(answer)["detail"]
    assert Entry.objects.filter(feed=feed).count() == 1
    assert Feed.objects.get().title == "Books"


def test_a_body_with_transfer_encoding_and_no_length_is_411_in_the_test_client(producer):
    FeedFactory(slug="books")
    # What Django sees of a chunked request: the header, no CONTENT_LENGTH, nothing to read.
    response = producer.generic("PATCH", "/api/feeds/books/records/k1", b"",
                                content_type="application/json",
                                HTTP_TRANSFER_ENCODING="chunked")

    assert_json_error(response, 411)


# 3. Keys and cursors that the database cannot take


@pytest.mark.parametrize("method", ["get", "patch", "put", "delete"])
def test_a_key_with_a_nul_byte_is_a_400_for_every_method(producer, method):
    FeedFactory(slug="books")

    response = getattr(producer, method)("/api/feeds/books/records/a%00", record_data(1),
                                         format="json")

    assert "key" in assert_json_error(response, 400)["errors"]


def test_a_put_of_a_nul_key_without_add_record_is_a_400(db):
    FeedFactory(slug="books")
    client = token_client(UserFactory(perms=["change_record"]))
    client.raise_request_exception = False

    response = client.put("/api/feeds/books/records/a%00", record_data(1), format="json")

    assert "key" in assert_json_error(response, 400)["errors"]


def test_an_invalid_key_is_refused_only_after_the_permission_checks(anon, db):
    FeedFactory(slug="books")

    assert anon.put("/api/feeds/books/records/a%00", record_data(1),
                    format="json").status_code == 401


def cursor(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize("path", ["/api/feeds/", "/api/feeds/books/records/"])
@pytest.mark.parametrize("value", [
    "bz0xJnA9eA==",  # o=1&p=x, from the issue
    "garbage",
    cursor("o=0&p=1%00"),
    cursor("o=0&p=99999999999999999999999"),  # an integer no database column holds
    cursor("o=0&r=1&p=2024-13-45"),
])
def test_a_malformed_cursor_is_a_400_on_every_list(anon, path, value):
    RecordFactory(feed=FeedFactory(slug="books"), key="k1")

    response = anon.get(path, {"cursor": value})

    body = assert_json_error(response, 400)
    assert body["detail"] == "Invalid cursor."
    assert "cursor" in body["errors"]


# 4. Feed text: refused, not trimmed


@pytest.mark.parametrize("field", ["title", "subtitle", "author"])
def test_a_feed_field_ending_in_a_control_character_is_refused_not_trimmed(db, field):
    feed = FeedFactory(slug="books", title="Books", subtitle="Sub", author="Ann")
    client = token_client(UserFactory(perms=["add_feed", "change_feed"]))
    before = {name: getattr(feed, name) for name in ("title", "subtitle", "author")}

    patch = client.patch("/api/feeds/books/", {field: "a\u000b"}, format="json")
    post = client.post("/api/feeds/", {"slug": "films", "title": "Films", field: "b\u000c"},
                       format="json")

    assert "U+000B" in assert_json_error(patch, 400)["errors"][field][0]
    assert "U+000C" in assert_json_error(post, 400)["errors"][field][0]
    feed.refresh_from_db()
    assert {name: getattr(feed, name) for name in before} == before
    assert not Feed.objects.filter(slug="films").exists()


def test_a_feed_field_of_ordinary_spaces_is_still_trimmed(db):
    FeedFactory(slug="books")
    client = token_client(UserFactory(perms=["change_feed"]))

    response = client.patch("/api/feeds/books/", {"title": "  Books  "}, format="json")

    assert response.json()["title"] == "Books"


# 5. Deleted records: a tombstone unless one may view records


TOMBSTONE = {"key", "atom_id", "updated", "deleted"}


@pytest.fixture
def deleted(db):
    feed = FeedFactory(slug="books")
    RecordFactory(feed=feed, key="live", data=record_data(1))
    RecordFactory(feed=feed, key="gone", data=record_data(2, metadata={"secret": "yes"}))
    publishing.delete_record(feed=feed, key="gone")
    return Record.objects.get(key="gone")


@pytest.mark.parametrize("perms", [None, RECORD_PERMS])  # anonymous; writers without view
def test_a_deleted_record_is_a_tombstone_to_those_who_may_not_view_records(deleted, perms):
    client = APIClient() if perms is None else token_client(UserFactory(perms=perms))
    viewer = token_client(UserFactory(perms=["view_record"]))

    one = client.get(url("gone"))
    listed = client.get(url() + "?deleted=true")
    full = viewer.get(url("gone")).json()

    assert one.status_code == 200
    assert one.json() == {"key": "gone", "atom_id": deleted.atom_id,
                          "updated": full["updated"], "deleted": True}
    assert [set(item) for item in listed.json()["results"]] == [TOMBSTONE]
    assert "secret" not in one.content.decode() + listed.content.decode()
    assert one["ETag"] == publishing.record_etag(deleted)


def test_users_who_may_view_records_see_deleted_ones_whole(deleted):
    viewer = token_client(UserFactory(perms=["view_record"]))

    one = viewer.get(url("gone")).json()
    listed = viewer.get(url()).json()["results"]

    assert one["deleted"] is True
    assert one["metadata"] == {"secret": "yes"}
    assert {item["key"]: "metadata" in item for item in listed} == {"live": True, "gone": True}


def test_live_records_are_shown_whole_to_anyone(deleted, anon):
    listed = anon.get(url()).json()["results"]

    assert {item["key"]: set(item) > TOMBSTONE for item in listed} == {"live": True,
                                                                      "gone": False}


# 6. Batches: permissions first, never empty, no lock for nothing


def test_an_anonymous_batch_is_refused_before_it_is_read(anon):
    anon.raise_request_exception = False
    FeedFactory(slug="books")

    empty = anon.post("/api/feeds/books/batch", {"operations": []}, format="json")
    unknown_feed = anon.post("/api/feeds/nope/batch", {"operations": []}, format="json")
    not_json = anon.generic("POST", "/api/feeds/books/batch", b"{",
                            content_type="application/json")

    assert_json_error(empty, 401)
    assert_json_error(unknown_feed, 401)
    assert_json_error(not_json, 401)


def test_a_batch_by_a_user_without_a_role_on_the_feed_is_refused(db):
    client = token_client(UserFactory(perms=["view_record"]))
    feed = FeedFactory(slug="books")

    response = client.post("/api/feeds/books/batch", {"operations": [
        {"op": "put", "key": "k1", "record": record_data(1)}]}, format="json")

    assert "producer role" in assert_json_error(response, 403)["detail"]
    assert Feed.objects.get(pk=feed.pk).last_seq == 0


def test_an_empty_batch_is_a_400(producer):
    feed = FeedFactory(slug="books")

    response = producer.post("/api/feeds/books/batch", {"operations": []}, format="json")

    assert "operations" in assert_json_error(response, 400)["errors"]
    assert Feed.objects.get(pk=feed.pk).last_seq == 0


def test_apply_batch_refuses_an_empty_batch_without_a_query(db, django_assert_num_queries):
    feed = FeedFactory(slug="books")

    with django_assert_num_queries(0), pytest.raises(ValidationError) as refused:
        publishing.apply_batch(feed=feed, operations=[])

    assert "operations" in refused.value.message_dict


# 7. Throttles and a page's byte budget


def test_anonymous_clients_are_throttled_with_a_json_429(anon, settings):
    settings.FEEDPUB_API_ANON_RATE = "2/minute"
    FeedFactory(slug="books")

    answers = [anon.get("/api/feeds/") for _ in range(3)]

    assert [r.status_code for r in answers[:2]] == [200, 200]
    assert_json_error(answers[2], 429)
    assert int(answers[2]["Retry-After"]) > 0


def test_each_user_has_their_own_rate(db, settings):
    settings.FEEDPUB_API_USER_RATE = "2/minute"
    settings.FEEDPUB_API_ANON_RATE = "1/minute"
    FeedFactory(slug="books")
    alice, bob = token_client(UserFactory()), token_client(UserFactory())

    codes = [alice.get("/api/feeds/").status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert bob.get("/api/feeds/").status_code == 200
    assert APIClient().get("/api/feeds/").status_code == 200  # anonymous: its own count


def test_throttles_can_be_turned_off(anon, settings):
    settings.FEEDPUB_API_ANON_RATE = None
    FeedFactory(slug="books")

    assert {anon.get("/api/feeds/").status_code for _ in range(30)} == {200}


def walk(client, link_name: str, start: str) -> list[list[str]]:
    pages, link = [], start
    while link:
        response = client.get(link)
        assert response.status_code == 200
        pages.append([item["key"] for item in response.json()["results"]])
        link = response.json()[link_name]
        assert len(pages) < 50, "the walk does not end"
    return pages


def test_a_records_page_ends_early_at_its_byte_budget_without_skipping_or_repeating(
        anon, monkeypatch):
    feed = FeedFactory(slug="books", page_size=100)
    sizes = [1, 1, 1, 6, 1, 1, 1, 1, 1]  # kB of metadata; one record over the budget alone
    for n, size in enumerate(sizes):
        metadata = {"x": "y" * 1000 * size}
        RecordFactory(feed=feed, key=f"k{n}", data=record_data(n, metadata=metadata))
    monkeypatch.setattr(RecordCursor, "max_page_bytes", 3000)
    keys = [f"k{n}" for n in range(len(sizes))]

    forward = walk(anon, "next", url() + "?page_size=100")

    assert [key for page in forward for key in page] == keys
    assert forward == [["k0", "k1"], ["k2"], ["k3"], ["k4", "k5"], ["k6", "k7"], ["k8"]]

    last = anon.get(url() + "?page_size=100")
    for _ in forward[1:]:
        last = anon.get(last.json()["next"])
    backward = walk(anon, "previous", last.json()["previous"])

    assert [key for page in reversed(backward) for key in page] == keys[:-1]
    assert all(len(page) <= 2 for page in backward)


def test_a_records_page_still_ends_at_its_count(anon):
    feed = FeedFactory(slug="books", page_size=100)
    for n in range(5):
        RecordFactory(feed=feed, key=f"k{n}", data=record_data(n))

    assert walk(anon, "next", url() + "?page_size=2") == [["k0", "k1"], ["k2", "k3"], ["k4"]]


def test_the_schema_documents_411_413_429_and_503(anon, db):
    response = anon.get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})

    paths = json.loads(response.content)["paths"]
    for path, method in [("/api/feeds/", "post"), ("/api/feeds/{slug}/", "patch"),
                         ("/api/feeds/{slug}/records/{key}", "put"),
                         ("/api/feeds/{slug}/records/{key}", "patch"),
                         ("/api/feeds/{slug}/batch", "post")]:
        assert {"411", "413", "429", "503"} <= set(paths[path][method]["responses"])
    for path in ["/api/feeds/", "/api/feeds/{slug}/records/", "/api/feeds/{slug}/records/{key}"]:
        assert {"429", "503"} <= set(paths[path]["get"]["responses"])


# 9. Server failures: JSON under /api/, whatever raised


def lost_database(*args, **kwargs):
    raise OperationalError("terminating connection due to administrator command")


def test_a_lost_database_in_an_api_view_is_a_json_503_with_retry_after(anon, monkeypatch):
    monkeypatch.setattr(api_views.FeedList, "get_queryset", lost_database)

    response = anon.get("/api/feeds/")

    assert_json_error(response, 503)
    assert response["Retry-After"] == str(api_exceptions.RETRY_AFTER_SECONDS)


def test_a_lost_database_outside_the_api_view_is_a_json_503_too(anon, monkeypatch, settings):
    settings.DEBUG = False
    monkeypatch.setattr(api_views.FeedList, "initialize_request", lost_database)

    response = anon.get("/api/feeds/")

    assert_json_error(response, 503)
    assert response["Retry-After"] == str(api_exceptions.RETRY_AFTER_SECONDS)


def test_any_other_failure_under_api_is_a_json_500(anon, monkeypatch, settings):
    settings.DEBUG = False

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(api_views.FeedList, "get_queryset", broken)

    response = anon.get("/api/feeds/")

    assert "a bug" not in assert_json_error(response, 500)["detail"]


def test_an_unknown_api_url_is_a_json_404(anon):
    assert_json_error(anon.get("/api/nothing/here"), 404)
    assert_json_error(anon.get("/api/feeds/books/records/a/b"), 404)


def test_pages_outside_the_api_keep_djangos_error_pages(db):
    request = RequestFactory().get("/feeds/books/")

    assert api_exceptions.server_error(request)["Content-Type"].startswith("text/html")
    assert api_exceptions.page_not_found(request, None)["Content-Type"].startswith("text/html")


# JSON read strictly (archives.jsoninput): nothing settled silently, nothing stored bent

def send(client, path: str, text: str, method: str = "PUT"):
    return client.generic(method, path, text.encode(), content_type="application/json")


@pytest.mark.parametrize(("path", "method", "text", "where", "name"), [
    (url("k1"), "PUT", '{"title": "t", "title": "u"}', "title", '"title"'),
    (url("k1"), "PUT", '{"title": "t", "metadata": {"a": [{"b": 1, "b": 2}]}}',
     "metadata.a[0].b", '"b"'),
    ("/api/feeds/books/batch", "POST",
     '{"operations": [{"op": "put", "key": "f3", "key": "f4", "record": {"title": "t"}}]}',
     "operations[0].key", '"key"'),
])
def test_a_name_twice_in_one_object_is_a_400_naming_it(producer, path, method, text, where,
                                                       name):
    FeedFactory(slug="books")

    response = send(producer, path, text, method)

    why = f"at {where}: the name {name} appears twice in one object; give each member once."
    body = assert_json_error(response, 400)
    assert body["detail"] == f"JSON refused: {why}"
    assert body["errors"] == {where.split(".")[0].split("[")[0]: [why]}
    assert not Record.objects.exists()


@pytest.mark.parametrize(("number", "why"), [
    ("1e-400", "cannot be stored exactly (it would become 0.0)"),
    ("12345678901234567890.5", "cannot be stored exactly (it would become 1.2345678901234567e+19)"),
    ("-0.0", "is a negative zero, which is stored as 0"),
    ("-0", "is a negative zero, which is stored as 0"),
    ("1e999", "cannot be stored exactly (it would become inf)"),
])
def test_a_number_that_would_be_stored_bent_is_a_400_naming_it(producer, number, why):
    FeedFactory(slug="books")

    response = send(producer, url("k1"), '{"title": "t", "metadata": {"x": ' + number + "}}")

    body = assert_json_error(response, 400)
    assert body["detail"].startswith(f"JSON refused: at metadata.x: the number {number} ")
    assert why in body["detail"]
    assert body["errors"] == {"metadata": [body["detail"].removeprefix("JSON refused: ")]}
    assert not Record.objects.exists()


def test_numbers_are_given_back_as_they_were_sent(producer):
    """What is accepted reads back as the same value, digits and all: on SQLite and on
    PostgreSQL (run with DATABASE_URL), whose jsonb keeps numbers as decimals."""
    FeedFactory(slug="books")
    sent = ('{"big": 12345678901234567890, "tenth": 0.1, "tiny": 1e-300, "huge": 1.5e300, '
            '"trailing": 2.50, "max": 1.7976931348623157e308, "zero": 0, "fzero": 0.0, '
            '"ints": [-1, 9007199254740993], "avogadro": 6.022e23}')
    body = '{"title": "t", "metadata": ' + sent + "}"

    assert send(producer, url("k1"), body).status_code == 201

    as_decimals = partial(json.loads, parse_float=Decimal, parse_int=Decimal)
    given_back = as_decimals(producer.get(url("k1")).content)["metadata"]
    assert given_back == as_decimals(sent)
    # The same again is no change (jsonb gives 1.5e300 back as the integer it is).
    assert send(producer, url("k1"), body).status_code == 200
    assert Entry.objects.count() == 1


def test_a_negative_zero_from_python_is_refused_by_the_record_rules(db):
    """jsonb would store it as 0: the write path refuses what it cannot give back."""
    feed = FeedFactory(slug="books")

    with pytest.raises(ValidationError, match="negative zero"):
        publishing.put_record(feed=feed, key="k1",
                              data={"title": "t", "metadata": {"x": [1, {"y": -0.0}]}})
    publishing.put_record(feed=feed, key="k1", data={"title": "t", "metadata": {"x": "-0.0"}})
