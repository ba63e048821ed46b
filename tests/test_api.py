"""The producer API: every endpoint, status code and refusal (DRF's APIClient)."""

from __future__ import annotations

import json
import re
from io import StringIO

import factory
import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from factory.django import DjangoModelFactory
from lxml import etree, html
from rest_framework.test import APIClient

from archives.documents.records import record_json
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Entry, Feed, Record
from archives.validation import RECORD_FIELDS

from .factories import FeedFactory, RecordFactory, record_data, token_for
from .walking import NS

RECORD_PERMS = ["add_record", "change_record", "delete_record"]
FEED_PERMS = ["add_feed", "change_feed", "delete_feed"]


class UserFactory(DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"producer-{n}")

    @factory.post_generation
    def perms(self, create, codenames, **kwargs):
        if codenames:
            self.user_permissions.set(Permission.objects.filter(codename__in=codenames))


def token_client(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(user)}")
    return client


pytestmark = pytest.mark.usefixtures("fresh_throttles")


@pytest.fixture
def api(db) -> APIClient:
    """A producer allowed every write, authenticated by token."""
    return token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))


@pytest.fixture
def anon(db) -> APIClient:
    return APIClient()


def url(key: str | None = None, slug: str = "books") -> str:
    return f"/api/feeds/{slug}/records/" + (key or "")


def put(client, key, body, **headers):
    return client.put(url(key), body, format="json", headers=headers)


def put_raw(client, key, text: str):
    return client.generic("PUT", url(key), text.encode("utf-8", "surrogatepass"),
                          content_type="application/json")


def entries(feed) -> int:
    return Entry.objects.filter(feed=feed).count()


# Feeds


def test_anyone_can_list_and_read_feeds(anon, feed):
    FeedFactory(slug="films")

    listing = anon.get("/api/feeds/")
    one = anon.get("/api/feeds/books/")

    assert listing.status_code == 200
    assert [f["slug"] for f in listing.json()["results"]] == ["books", "films"]
    assert one.status_code == 200
    assert one.json()["url"] == "http://127.0.0.1:8000/feeds/books/"
    assert one.json()["atom_id"] == feed.atom_id
    assert one.json()["records"].endswith("/api/feeds/books/records/")


def test_it_creates_a_feed(api):
    response = api.post("/api/feeds/", {"slug": "films", "title": "Films", "page_size": 50},
                        format="json")

    assert response.status_code == 201
    assert response["Location"] == "/api/feeds/films/"
    assert response.json()["page_size"] == 50
    assert response.json()["entries"] == 0
    assert Feed.objects.get(slug="films").title == "Films"


@pytest.mark.parametrize(("body", "field"), [
    ({"slug": "films", "title": "Films", "last_seq": 9}, "last_seq"),
    ({"slug": "films", "title": "Films", "colour": "red"}, "colour"),
    ({"slug": "no such/slug", "title": "Films"}, "slug"),
    ({"slug": "films", "title": "Bad \x0b title"}, "title"),
    ({"slug": "films", "title": "Films", "author": "\x00"}, "author"),
    ({"slug": "films", "title": "Films", "page_size": 0}, "page_size"),
    ({"slug": "films"}, "title"),
])
def test_it_refuses_a_bad_feed_naming_the_field(api, feed, body, field):
    response = api.post("/api/feeds/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert response.json()["detail"]
    assert not Feed.objects.filter(slug="films").exists()


def test_it_changes_a_feed(api, feed):
    response = api.patch("/api/feeds/books/", {"title": "Livres", "page_size": 10},
                         format="json")

    assert response.status_code == 200
    feed.refresh_from_db()
    assert (feed.title, feed.page_size) == ("Livres", 10)


@pytest.mark.parametrize("change", [{"slug": "livres"}, {"page_size": 10}])
def test_a_sealed_feed_cannot_be_renamed_or_repaged(api, feed, change):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(3)])
    seal_feed(feed)

    response = api.patch("/api/feeds/books/", change, format="json")

    assert response.status_code == 409
    assert list(response.json()["errors"]) == list(change)
    feed.refresh_from_db()
    assert (feed.slug, feed.page_size) == ("books", 3)


def test_a_sealed_feed_takes_its_own_page_size_and_a_new_title(api, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(3)])
    seal_feed(feed)

    response = api.patch("/api/feeds/books/", {"page_size": 3, "title": "New"}, format="json")

    assert response.status_code == 200
    assert response.json()["title"] == "New"


def test_it_deletes_a_feed_without_entries(api, feed):
    response = api.delete("/api/feeds/books/")

    assert response.status_code == 204
    assert not Feed.objects.filter(slug="books").exists()


def test_it_refuses_to_delete_a_feed_with_entries(api, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(3)])
    seal_feed(feed)

    response = api.delete("/api/feeds/books/")

    assert response.status_code == 409
    assert response.json() == {"detail": publishing.UNDELETABLE}
    assert Feed.objects.filter(slug="books").exists()


def test_an_unknown_feed_is_a_404(api, db):
    assert api.get("/api/feeds/nope/").status_code == 404
    assert api.get(url(slug="nope")).status_code == 404
    assert api.put(url("k1", slug="nope"), record_data(1), format="json").status_code == 404
    assert api.post("/api/feeds/nope/batch", {"operations": []}, format="json").status_code == 404
    assert api.delete(url("k1", slug="nope")).status_code == 404
    assert api.put(url("k1", slug="nope"), {"title": ""}, format="json").status_code == 400


def test_feeds_cannot_be_put(api, feed):
    assert api.put("/api/feeds/books/", {"title": "x"}, format="json").status_code == 405


# Records: PUT


def test_a_put_creates_a_record(api, feed):
    response = put(api, "k1", record_data(1))

    record = Record.objects.get(feed=feed, key="k1")
    assert response.status_code == 201
    assert response["Location"] == "/api/feeds/books/records/k1"
    assert response["ETag"] == publishing.record_etag(record)
    assert response.json() == record_json(record)
    assert set(response.json()) == {"key", "atom_id", "title", "summary", "metadata", "links",
                                    "created", "updated", "deleted", "url"}
    assert entries(feed) == 1


def test_an_identical_put_answers_200_and_appends_nothing(api, feed):
    first = put(api, "k1", record_data(1))

    again = put(api, "k1", record_data(1))

    assert again.status_code == 200
    assert again["ETag"] == first["ETag"]
    assert again.json() == first.json()
    assert entries(feed) == 1


def test_a_changed_put_replaces_the_record_with_one_entry(api, feed):
    put(api, "k1", record_data(1))

    response = put(api, "k1", {"title": "Only a title"})

    assert response.status_code == 200
    assert response.json()["summary"] == ""
    assert response.json()["links"] == []
    assert list(Entry.objects.filter(feed=feed).values_list("kind", flat=True)) == [
        "create", "update"]


def test_a_put_restores_a_deleted_record(api, feed):
    put(api, "k1", record_data(1))
    api.delete(url("k1"))

    response = put(api, "k1", record_data(1))

    assert response.status_code == 200
    assert response.json()["deleted"] is False
    assert entries(feed) == 3


@pytest.mark.parametrize(("key", "why"), [
    ("x" * 201, "at most 200"),
    ("a%20b", "URL-safe"),
    ("caf%C3%A9", "URL-safe"),
    ("a~b!", "URL-safe"),
    ("..", "URL-safe"),
])
def test_it_refuses_a_bad_key(api, feed, key, why):
    response = put(api, key, record_data(1))

    assert response.status_code == 400
    assert why in response.json()["errors"]["key"][0]
    assert entries(feed) == 0


def test_a_key_with_a_slash_has_no_url_to_put_to(api, feed):
    assert put(api, "a%2Fb", record_data(1)).status_code == 404
    assert entries(feed) == 0


@pytest.mark.parametrize(("body", "field"), [
    (record_data(1, title="nul \x00 here"), "title"),
    (record_data(1, title="   "), "title"),
    (record_data(1, summary="vertical \x0b tab"), "summary"),
    (record_data(1, summary="x" * 10_001), "summary"),
    (record_data(1, metadata={"nested": ["form \x0c feed"]}), "metadata"),
    (record_data(1, metadata={"bad\x01key": 1}), "metadata"),
    (record_data(1, metadata=["not", "an", "object"]), "metadata"),
    (record_data(1, metadata="text"), "metadata"),
    (record_data(1, links=[{"href": "/relative"}]), "links"),
    (record_data(1, links=[{"href": "ftp://example.org/x"}]), "links"),
    (record_data(1, links=[{"href": "javascript:alert(1)"}]), "links"),
    (record_data(1, links=[{"href": "https://example.org/ x"}]), "links"),
    (record_data(1, links=[{"href": "https://example.org/", "type": "html"}]), "links"),
    (record_data(1, links=[{"href": "https://example.org/", "colour": "red"}]), "links"),
    (record_data(1, links="https://example.org/"), "links"),
    (record_data(1, atom_id="urn:x"), "atom_id"),
    (record_data(1, key="k1"), "key"),
    ({"summary": "no title"}, "title"),
])
def test_it_refuses_a_bad_record_naming_the_field_and_writes_nothing(api, feed, body, field):
    response = put(api, "k1", body)

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert all(isinstance(m, str) and m for m in response.json()["errors"][field])
    assert entries(feed) == 0
    assert not Record.objects.exists()


@pytest.mark.parametrize(("text", "field"), [
    ('{"title": "lone \\ud800 surrogate"}', "title"),
    ('{"title": "ok", "metadata": {"x": "\\udc00"}}', "metadata"),
    ('{"title": "ok", "summary": "\\u0000"}', "summary"),
])
def test_it_refuses_characters_xml_cannot_carry_written_as_json_escapes(api, feed, text, field):
    response = put_raw(api, "k1", text)

    assert response.status_code == 400
    assert "not allowed in XML" in response.json()["errors"][field][0]
    assert entries(feed) == 0


@pytest.mark.parametrize("body", [
    b'{"title": ',
    b'{"title": NaN}',
    b'{"title": "\xff\xfe"}',
    b"[" * 100_000 + b"]" * 100_000,
])
def test_it_refuses_a_body_that_is_not_json(api, feed, body):
    response = api.generic("PUT", url("k1"), body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["detail"]
    assert entries(feed) == 0


@pytest.mark.parametrize("depth", [64, 500, 930, 5000])
def test_it_refuses_metadata_nested_too_deeply(api, feed, depth):
    nested = "[" * depth + "]" * depth
    response = put_raw(api, "k1", '{"title": "deep", "metadata": {"x": ' + nested + "}}")

    # Past Python's recursion limit the parser refuses it, below it the record rules do.
    assert response.status_code == 400
    assert "too deeply" in response.json()["detail"] or "levels" in str(
        response.json()["errors"]["metadata"])
    assert entries(feed) == 0


def test_it_refuses_a_body_that_is_not_a_record_object(api, feed):
    response = put(api, "k1", ["title"])

    assert response.status_code == 400
    assert "record" in response.json()["errors"]


def test_it_refuses_a_body_that_is_not_json_at_all(api, feed):
    response = api.generic("PUT", url("k1"), b"title=x",
                           content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415


def test_it_refuses_a_body_over_the_limit_with_413(api, feed, settings):
    settings.FEEDPUB_API_MAX_BODY_BYTES = 1000

    response = put(api, "k1", record_data(1, summary="x" * 1000))

    assert response.status_code == 413
    assert "1000 bytes" in response.json()["detail"]
    assert entries(feed) == 0


# Records: If-Match


def test_if_match_with_the_current_etag_lets_a_write_through(api, feed):
    etag = put(api, "k1", record_data(1))["ETag"]

    response = put(api, "k1", record_data(2), **{"If-Match": etag})

    assert response.status_code == 200
    assert response["ETag"] != etag


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_if_match_with_a_stale_etag_answers_412_and_writes_nothing(api, feed, method):
    stale = put(api, "k1", record_data(1))["ETag"]
    put(api, "k1", record_data(2))

    body = {"put": record_data(3), "patch": {"title": "Late"}, "delete": None}[method]
    response = getattr(api, method)(url("k1"), body, format="json", headers={"If-Match": stale})

    assert response.status_code == 412
    assert "If-Match" in response.json()["detail"]
    assert entries(feed) == 2
    assert Record.objects.get(key="k1").title == "Record 2"


def test_if_match_on_a_record_that_does_not_exist_answers_412(api, feed):
    response = put(api, "k1", record_data(1), **{"If-Match": "*"})

    assert response.status_code == 412
    assert entries(feed) == 0


# Records: PATCH


def test_a_patch_replaces_only_the_fields_it_names(api, feed):
    put(api, "k1", record_data(1))

    response = api.patch(url("k1"), {"title": "New title", "metadata": {"n": 9}}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert (body["title"], body["metadata"]) == ("New title", {"n": 9})
    assert body["summary"] == "Summary of record 1"
    assert body["links"] == record_data(1)["links"]
    assert entries(feed) == 2


def test_a_patch_that_changes_nothing_appends_nothing(api, feed):
    put(api, "k1", record_data(1))

    response = api.patch(url("k1"), {"title": "Record 1"}, format="json")

    assert response.status_code == 200
    assert entries(feed) == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"title": ""}, "title"),
    ({"links": [{"href": "mailto:x@example.org"}]}, "links"),
    ({"key": "other"}, "key"),
])
def test_a_patch_is_checked_whole(api, feed, body, field):
    put(api, "k1", record_data(1))

    response = api.patch(url("k1"), body, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert entries(feed) == 1


def test_a_patch_of_a_deleted_record_is_a_conflict(api, feed):
    put(api, "k1", record_data(1))
    api.delete(url("k1"))

    response = api.patch(url("k1"), {"title": "Back"}, format="json")

    assert response.status_code == 409
    assert entries(feed) == 2


def test_a_patch_of_an_unknown_record_is_a_404(api, feed):
    assert api.patch(url("nope"), {"title": "x"}, format="json").status_code == 404


# Records: DELETE and GET


def test_a_delete_appends_a_deletion_entry_once(api, feed):
    put(api, "k1", record_data(1))

    first = api.delete(url("k1"))
    again = api.delete(url("k1"))

    assert (first.status_code, again.status_code) == (204, 204)
    assert list(Entry.objects.filter(feed=feed).values_list("kind", flat=True)) == [
        "create", "delete"]
    assert api.get(url("k1")).json()["deleted"] is True


def test_deleting_an_unknown_record_is_a_404(api, feed):
    response = api.delete(url("nope"))

    assert response.status_code == 404
    assert response.json()["detail"]


def test_anyone_can_read_a_record_with_its_etag(anon, feed):
    record = RecordFactory(feed=feed, key="k1")

    response = anon.get(url("k1"))

    assert response.status_code == 200
    assert response["ETag"] == publishing.record_etag(record)
    assert response.json() == record_json(record)


def test_a_read_with_the_current_etag_answers_304(anon, feed):
    record = RecordFactory(feed=feed, key="k1")

    response = anon.get(url("k1"), headers={"If-None-Match": publishing.record_etag(record)})

    assert response.status_code == 304


def test_an_unknown_record_is_a_404(anon, feed):
    assert anon.get(url("nope")).status_code == 404


# Records: list


def test_the_list_walks_every_record_by_cursor(anon, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(7)])

    keys, page = [], url() + "?page_size=3"
    while page:
        response = anon.get(page)
        assert response.status_code == 200
        keys += [record["key"] for record in response.json()["results"]]
        page = response.json()["next"]

    assert keys == [f"k{n}" for n in range(7)]


def test_the_list_filters_by_deleted_and_updated_since(anon, feed):
    for n in range(4):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.delete_record(feed=feed, key="k1")
    since = record_json(Record.objects.get(key="k2"))["updated"]

    def keys(query):
        response = anon.get(url() + query)
        assert response.status_code == 200
        return [record["key"] for record in response.json()["results"]]

    assert keys("?deleted=true") == ["k1"]
    assert keys("?deleted=false") == ["k0", "k2", "k3"]
    assert keys(f"?updated_since={since}") == ["k2", "k3", "k1"]
    assert keys(f"?updated_since={since}&deleted=false") == ["k2", "k3"]


@pytest.mark.parametrize(("query", "field"), [
    ("?updated_since=yesterday", "updated_since"),
    ("?deleted=maybe", "deleted"),
])
def test_the_list_refuses_a_bad_filter(anon, feed, query, field):
    response = anon.get(url() + query)

    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_a_bad_cursor_is_a_400_not_a_500(anon, feed):
    response = anon.get(url() + "?cursor=garbage")

    assert response.status_code == 400
    assert "cursor" in response.json()["errors"]


# Batch


def batch(client, operations, slug="books"):
    return client.post(f"/api/feeds/{slug}/batch", {"operations": operations}, format="json")


def test_a_batch_applies_puts_and_deletes_in_order(api, feed):
    RecordFactory(feed=feed, key="old", data=record_data(0))

    response = batch(api, [
        {"op": "put", "key": "k1", "record": record_data(1)},
        {"op": "put", "key": "k2", "record": record_data(2)},
        {"op": "delete", "key": "old"},
        {"op": "put", "key": "k1", "record": record_data(1)},
        {"op": "delete", "key": "k2"},
    ])

    assert response.status_code == 200
    assert response.json()["applied"] == 4
    assert [(r["index"], r["changed"], r["seq"]) for r in response.json()["results"]] == [
        (0, True, 2), (1, True, 3), (2, True, 4), (3, False, None), (4, True, 5)]
    assert set(Record.objects.filter(deleted_at__isnull=True).values_list("key", flat=True)) == {
        "k1"}


def test_a_rejected_batch_names_each_bad_operation_and_applies_nothing(api, feed):
    RecordFactory(feed=feed, key="old", data=record_data(0))

    response = batch(api, [
        {"op": "put", "key": "k1", "record": record_data(1)},
        {"op": "put", "key": "bad key", "record": record_data(2)},
        {"op": "put", "key": "k3", "record": record_data(3, title="\x00")},
        {"op": "delete", "key": "nope"},
        {"op": "delete", "key": "old"},
        {"op": "move", "key": "k4"},
        {"op": "put", "key": "k5"},
        {"op": "delete", "key": "k1", "record": record_data(1)},
        "put",
    ])

    assert response.status_code == 400
    errors = response.json()["errors"]["operations"]
    assert set(errors) == {"1", "2", "3", "5", "6", "7", "8"}
    assert "key" in errors["1"]
    assert "not allowed in XML" in errors["2"]["title"][0]
    assert "nope" in errors["3"]["key"][0]
    assert "op" in errors["5"]
    assert "record" in errors["6"]
    assert "record" in errors["7"]
    assert "7 operation(s)" in response.json()["detail"]
    assert entries(feed) == 1


def test_a_batch_over_its_limit_is_refused_whole(api, feed):
    operations = [{"op": "put", "key": f"k{n}", "record": {"title": "t"}} for n in range(1001)]

    response = batch(api, operations)

    assert response.status_code == 400
    assert "1000" in response.json()["errors"]["operations"][0]
    assert entries(feed) == 0


def test_a_batch_of_a_thousand_is_accepted(api, feed):
    operations = [{"op": "put", "key": f"k{n}", "record": {"title": "t"}} for n in range(1000)]

    response = batch(api, operations)

    assert response.status_code == 200
    assert response.json()["applied"] == 1000


def test_a_batch_body_over_the_byte_limit_is_413(api, feed, settings):
    settings.FEEDPUB_API_MAX_BODY_BYTES = 2000

    response = batch(api, [{"op": "put", "key": f"k{n}", "record": record_data(n)}
                           for n in range(20)])

    assert response.status_code == 413
    assert entries(feed) == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"operations": "all"}, "operations"),
    ({"operations": None}, "operations"),
    ({}, "operations"),
    ({"operations": [], "atomic": True}, "atomic"),
    (["put"], "body"),
])
def test_a_batch_body_must_be_an_object_of_operations(api, feed, body, field):
    response = api.post("/api/feeds/books/batch", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]


# Permissions


WRITES = [
    ("post", "/api/feeds/", {"slug": "films", "title": "Films"}),
    ("patch", "/api/feeds/books/", {"title": "x"}),
    ("delete", "/api/feeds/books/", None),
    ("put", url("k1"), record_data(1)),
    ("put", url("new"), record_data(1)),
    ("patch", url("k1"), {"title": "x"}),
    ("delete", url("k1"), None),
    ("post", "/api/feeds/books/batch", {"operations": [{"op": "delete", "key": "k1"}]}),
]


@pytest.fixture
def existing(feed):
    return RecordFactory(feed=feed, key="k1", data=record_data(1))


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_anonymous_clients_never_write(anon, existing, method, path, body):
    before = entries(existing.feed)

    response = getattr(anon, method)(path, body, format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert entries(existing.feed) == before
    assert Feed.objects.get().title == "Books"


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_users_without_the_model_permission_never_write(db, existing, method, path, body):
    client = token_client(UserFactory())

    response = getattr(client, method)(path, body, format="json")

    assert response.status_code == 403
    assert entries(existing.feed) == 1
    assert Feed.objects.get().title == "Books"


def test_authenticated_users_without_permissions_can_read(db, existing):
    client = token_client(UserFactory())

    assert client.get(url("k1")).status_code == 200
    assert client.get(url()).status_code == 200


def test_change_record_alone_replaces_but_cannot_create(db, existing):
    client = token_client(UserFactory(perms=["change_record"]))

    assert put(client, "k1", record_data(2)).status_code == 200
    assert put(client, "new", record_data(2)).status_code == 403
    assert not Record.objects.filter(key="new").exists()


def test_a_delete_only_batch_needs_only_delete_record(db, existing):
    client = token_client(UserFactory(perms=["delete_record"]))

    deletes = batch(client, [{"op": "delete", "key": "k1"}])
    puts = batch(client, [{"op": "put", "key": "k2", "record": record_data(2)}])

    assert deletes.status_code == 200
    assert puts.status_code == 403
    assert entries(existing.feed) == 2


def test_session_authentication_serves_the_browsable_api(db, existing):
    client = APIClient()
    client.force_login(UserFactory(perms=RECORD_PERMS))

    page = client.get(url("k1"), headers={"Accept": "text/html"})
    write = put(client, "k1", record_data(5))

    assert page.status_code == 200
    assert b"Record 1" in page.content
    assert write.status_code == 200


def test_create_token_makes_a_working_token(db, feed):
    user = UserFactory(perms=RECORD_PERMS)
    out = StringIO()

    call_command("create_token", user.username, "--name", "import", stdout=out)
    key = out.getvalue().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    assert put(client, "k1", record_data(1)).status_code == 201


def test_a_wrong_token_is_a_401(db, feed):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")

    assert client.get(url()).status_code == 401


# Schema


def test_the_schema_documents_every_endpoint_and_its_errors(anon, db):
    response = anon.get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})

    schema = json.loads(response.content)
    assert response.status_code == 200
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    expected = {
        "/api/feeds/": {"get": {"200"}, "post": {"201", "400", "401", "403", "413"}},
        "/api/feeds/{slug}/": {"get": {"200", "404"},
                               "patch": {"200", "400", "401", "403", "404", "409", "413"},
                               "delete": {"204", "401", "403", "404", "409"}},
        "/api/feeds/{slug}/records/": {"get": {"200", "400", "404"}},
        "/api/feeds/{slug}/records/{key}": {
            "get": {"200", "304", "404"},
            "put": {"200", "201", "400", "401", "403", "404", "412", "413"},
            "patch": {"200", "400", "401", "403", "404", "409", "412", "413"},
            "delete": {"204", "401", "403", "404", "412"}},
        "/api/feeds/{slug}/batch": {"post": {"200", "400", "401", "403", "404", "413"}},
    }
    for path, operations in expected.items():
        for method, codes in operations.items():
            assert codes <= set(paths[path][method]["responses"]), (path, method)
    record_body = schema["components"]["schemas"]["RecordBodyRequest"]
    # Every field a record has, published (a field added to RECORD_FIELDS must be too).
    assert set(record_body["properties"]) == set(RECORD_FIELDS)
    assert set(RECORD_FIELDS) <= set(schema["components"]["schemas"]["Record"]["properties"])
    assert "If-Match" in {p["name"] for p in paths["/api/feeds/{slug}/records/{key}"]["put"][
        "parameters"]}


def test_the_schema_ui_loads_nothing_from_another_host(anon, db):
    response = anon.get("/api/schema/swagger-ui/")

    assert response.status_code == 200
    page = html.fromstring(response.content)
    assets = page.xpath("//script/@src | //link/@href")
    assert assets
    assert all(asset.startswith("/static/") for asset in assets), assets
    # (Without the page's CSRF token: 64 random letters, which may spell "cdn".)
    page_text = re.sub(rb'"X-CSRFTOKEN"\] = "\w+"', b"", response.content)
    assert b"cdn" not in page_text.lower()


# Round trip


TRICKY = {
    "title": "Ünïcødé «title» & <tags> \"quoted\" 'single' — 漢字 عربى 🦉 e\u0301",
    "summary": "Line one\r\nLine two\rthree\twith tab  and  spaces \u2028 sep \ufeff bom ]]> end",
    "metadata": {"emoji": "🦉", "nested": {"list": ["a", 1, None, True, 2.5]}, "ü": "\u00a0"},
    "links": [{"href": "https://example.org/a?b=c&d=%C3%A9#frag", "rel": "related",
               "type": "text/html; charset=utf-8", "title": "Página & <more>"},
              {"href": "urn:isbn:9780131103627", "rel": "http://example.org/rel/isbn",
               "type": "", "title": ""},
              {"href": "tag:example.org,2026:x", "rel": "via", "type": "", "title": "tag"}],
}


def test_strings_come_out_of_the_documents_exactly_as_they_went_in(
        api, anon, feed, atom_validators):
    assert put(api, "tricky", TRICKY).status_code == 201
    assert batch(api, [{"op": "put", "key": f"pad{n}", "record": {"title": "p"}}
                       for n in range(2)]).status_code == 200

    # The record URL, in JSON and in Atom.
    as_json = json.loads(anon.get("/feeds/books/records/tricky?format=json").content)
    assert {name: as_json[name] for name in TRICKY} == TRICKY
    entry_doc = etree.fromstring(anon.get("/feeds/books/records/tricky").content)
    assert entry_doc.findtext("a:title", namespaces=NS) == TRICKY["title"]
    assert entry_doc.findtext("a:summary", namespaces=NS) == TRICKY["summary"]

    # The sealed archive page (3 entries = page 1), and after an update the subscription.
    seal_feed(feed)
    archive = atom_validators(anon.get("/feeds/books/archives/1/").content)
    assert_entry_carries(archive, TRICKY)
    changed = {**TRICKY, "title": TRICKY["title"] + " v2"}
    assert put(api, "tricky", changed).status_code == 200
    subscription = atom_validators(anon.get("/feeds/books/").content)
    assert_entry_carries(subscription, changed)


def assert_entry_carries(document, record):
    entry = next(e for e in document.findall("a:entry", NS)
                 if e.findtext("a:title", namespaces=NS).startswith(record["title"][:5]))
    assert entry.findtext("a:title", namespaces=NS) == record["title"]
    assert entry.findtext("a:summary", namespaces=NS) == record["summary"]
    produced = [
        {"href": link.get("href"), "rel": link.get("rel"), "type": link.get("type", ""),
         "title": link.get("title", "")}
        for link in entry.findall("a:link", NS)
        if "/feeds/books/records/" not in link.get("href")  # feedpub's own
    ]
    assert produced == record["links"]


@pytest.mark.parametrize(("method", "url"), [("post", "/api/feeds"),
                                             ("patch", "/api/feeds/books")])
def test_a_write_without_the_trailing_slash_is_answered_not_redirected(api, feed, method, url):
    body = {"slug": "films", "title": "Films"} if method == "post" else {"title": "Renamed"}
    response = getattr(api, method)(url, body, format="json")
    assert response.status_code in (200, 201), response.content


def test_a_batch_operation_with_a_malformed_op_is_named_not_a_500(api, feed):
    response = batch(api, [{"op": ["put"], "key": "a"}, {"op": {"x": 1}, "key": "b"}])
    assert response.status_code == 400
    assert set(response.json()["errors"]["operations"]) == {"0", "1"}


def test_metadata_with_a_number_json_cannot_carry_is_refused(api, feed):
    response = api.put(url("k1"), b'{"title": "x", "metadata": {"a": 1e999}}',
                       content_type="application/json")
    assert response.status_code == 400
    assert "metadata" in response.json()["errors"]
    assert entries(feed) == 0


def test_a_put_with_a_second_text_html_alternate_is_a_400_naming_the_link(api, feed):
    body = record_data(1, links=[{"href": "https://example.org/books/1", "rel": "alternate",
                                  "type": "text/html", "title": "Catalogue page"}])
    response = put(api, "k1", body)

    assert response.status_code == 400
    (message,) = response.json()["errors"]["links"]
    assert "links[0]" in message
    assert "text/html" in message
    assert "RFC 4287" in message
    assert entries(feed) == 0


def test_a_put_that_fills_a_page_answers_before_it_seals_the_page(
        db, feed, django_capture_on_commit_callbacks):
    """Seal on write runs once the answer is written (WSGI close()), not before it."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections
    from django.test import RequestFactory

    user = UserFactory(perms=RECORD_PERMS)
    token = token_for(user)
    for n in range(2):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    request = RequestFactory().put(url("k2"), json.dumps(record_data(2)),
                                   content_type="application/json",
                                   HTTP_AUTHORIZATION=f"Token {token}")
    answered = []
    # As Django's test client does: the test's transaction must outlive the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = WSGIHandler()(request.environ, lambda status, headers: answered.append(
                status))
        assert answered == ["201 Created"]
        assert json.loads(b"".join(response))["key"] == "k2"
        assert Feed.objects.get(pk=feed.pk).sealed_pages == 0
        response.close()  # the server has written the answer
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 1
    # Outside a request (a command, the shell) the write seals as it commits.
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(3, 6):
            publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 2


def test_token_authentication_reads_the_permissions_modelbackend_would_in_one_query(db):
    from django.contrib.auth.backends import ModelBackend
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIRequestFactory

    from archives.api.authentication import TokenAuthentication

    user = UserFactory(perms=["add_record"])
    group = Group.objects.create(name="editors")
    group.permissions.set(Permission.objects.filter(codename__in=["change_record",
                                                                  "add_record"]))
    user.groups.add(group)
    Group.objects.create(name="others").permissions.set(
        Permission.objects.filter(codename="delete_feed"))
    token = token_for(user)
    request = APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Token {token}")
    TokenAuthentication().authenticate(request)  # its first use of the minute: last_used

    with CaptureQueriesContext(connection) as queries:
        authenticated, _ = TokenAuthentication().authenticate(request)
        answers = {perm: authenticated.has_perm(perm) for perm in (
            "archives.add_record", "archives.change_record", "archives.delete_record",
            "archives.delete_feed")}
    assert len(queries) == 2  # the token and its user, then the permissions
    assert answers == {"archives.add_record": True, "archives.change_record": True,
                       "archives.delete_record": False, "archives.delete_feed": False}
    assert authenticated._perm_cache == ModelBackend().get_all_permissions(
        User.objects.get(pk=user.pk))


def test_a_put_by_a_producer_whose_permissions_come_from_a_group(db, feed):
    from django.contrib.auth.models import Group

    user = UserFactory()
    group = Group.objects.get(name="producers")  # every install has it (migration 0020)
    user.groups.add(group)
    client = token_client(user)
    assert put(client, "k1", record_data(1)).status_code == 201
    group.permissions.remove(Permission.objects.get(codename="change_record"))
    assert put(client, "k1", record_data(2)).status_code == 403  # read again each request
