"""The API under real concurrency on PostgreSQL: If-Match writers and merging PATCHes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from archives.documents.records import record_json
from archives.models import Entry, Record

from .factories import FeedFactory, RecordFactory, record_data, token_for
from .threads import run_at_once

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def token(db) -> str:
    user = User.objects.create_user("producer")
    user.user_permissions.set(Permission.objects.filter(codename__endswith="_record"))
    return token_for(user)


def client_for(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_of_writers_holding_the_same_etag_exactly_one_wins(token, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(slug="books")
    RecordFactory(feed=feed, key="k1", data=record_data(0))
    etag = client_for(token).get("/api/feeds/books/records/k1")["ETag"]
    writers = 8

    def writer(n):
        def job():
            return client_for(token).put("/api/feeds/books/records/k1", record_data(n + 1),
                                         format="json", headers={"If-Match": etag})
        return job

    responses = run_at_once([writer(n) for n in range(writers)])

    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [412] * (writers - 1)
    winner = next(r for r in responses if r.status_code == 200)
    assert Record.objects.get(key="k1").title == winner.json()["title"]
    assert list(Entry.objects.filter(feed=feed).values_list("kind", flat=True)) == [
        "create", "update"]


def test_concurrent_patches_of_different_fields_lose_none_of_them(token, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(slug="books")
    RecordFactory(feed=feed, key="k1", data=record_data(0))
    patches = [
        {"title": "New title"},
        {"summary": "New summary"},
        {"metadata": {"new": True}},
        {"links": [{"href": "https://example.org/new", "rel": "related"}]},
    ]

    def patcher(patch):
        def job():
            return client_for(token).patch("/api/feeds/books/records/k1", patch, format="json")
        return job

    responses = run_at_once([patcher(patch) for patch in patches])

    assert [r.status_code for r in responses] == [200] * len(patches)
    record = record_json(Record.objects.get(key="k1"))
    assert (record["title"], record["summary"], record["metadata"]) == (
        "New title", "New summary", {"new": True})
    assert record["links"][0]["href"] == "https://example.org/new"
    assert Entry.objects.filter(feed=feed).count() == 1 + len(patches)


def test_batches_and_single_puts_at_once_keep_the_log_gapless(token, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(slug="books", page_size=10)

    def batcher(b):
        def job():
            return client_for(token).post("/api/feeds/books/batch", {"operations": [
                {"op": "put", "key": f"b{b}-{n}", "record": record_data(n)} for n in range(50)
            ]}, format="json")
        return job

    def single(s):
        def job():
            return [client_for(token).put(f"/api/feeds/books/records/s{s}-{n}", record_data(n),
                                          format="json") for n in range(10)]
        return job

    results = run_at_once([batcher(0), batcher(1), single(0), single(1)])

    assert [r.status_code for r in results[:2]] == [200, 200]
    assert all(r.status_code == 201 for group in results[2:] for r in group)
    seqs = list(Entry.objects.filter(feed=feed).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 121))


def test_a_single_put_is_ten_round_trips_with_the_lock_held_to_commit(token, settings):
    """Each round trip of a single PUT was a large part of its cost (it made 15 for a
    producer that is not a superuser); these are the ones it needs, in this order. (The
    shared rate count's own are counted in the next test.)"""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.FEEDPUB_SEAL_ON_WRITE = False
    settings.FEEDPUB_API_USER_RATE = None
    FeedFactory(slug="books")
    client = client_for(token)
    client.put("/api/feeds/books/records/k0", record_data(0), format="json")
    for key, status in (("k1", 201), ("k0", 200)):  # a new record, then a changed one
        with CaptureQueriesContext(connection) as queries:
            response = client.put(f"/api/feeds/books/records/{key}",
                                  record_data(1, title=f"Title of {key}"), format="json")
        assert response.status_code == status
        expected = [
            'SELECT "archives_apitoken"."id"',  # the token, its scope and its user
            'SELECT DISTINCT "django_content_type"."app_label"',  # every permission
            "BEGIN",
            'SELECT "archives_feed"."id"',
            "SELECT r.* FROM",  # the record, if any
            'INSERT INTO "archives_record"' if status == 201 else 'UPDATE "archives_record"',
            'INSERT INTO "archives_entry"',
            'UPDATE "archives_feed" SET',
            "SELECT pg_notify('feedpub_changes'",
            "COMMIT",
        ]
        statements = [query["sql"] for query in queries]
        assert len(statements) == len(expected), statements
        assert all(statement.startswith(start)
                   for statement, start in zip(statements, expected, strict=True)), statements
        assert "FOR UPDATE" in queries[3]["sql"]  # the feed's lock, taken first
    assert list(Entry.objects.values_list("seq", "kind")) == [
        (1, "create"), (2, "create"), (3, "update")]


def test_the_shared_rate_count_adds_four_round_trips_outside_the_write(token, settings):
    """Without Redis a producer's requests are counted in the database cache: one short
    transaction of its own, before the write's, so the feed's lock never waits on it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.FEEDPUB_SEAL_ON_WRITE = False
    FeedFactory(slug="books")
    client = client_for(token)
    client.put("/api/feeds/books/records/k0", record_data(0), format="json")  # its window

    def statements(rate):
        settings.FEEDPUB_API_USER_RATE = rate
        with CaptureQueriesContext(connection) as queries:
            response = client.put("/api/feeds/books/records/k0",
                                  record_data(0, title=f"Rate {rate}"), format="json")
        assert response.status_code == 200
        return [query["sql"] for query in queries]

    def kinds(sqls):  # the statements without their values
        return [sql[:30] for sql in sqls]

    counted, uncounted = statements("24000/minute"), statements(None)
    begin = counted.index("BEGIN")
    throttle = counted[begin:begin + 4]
    assert kinds(counted[:begin] + counted[begin + 4:]) == kinds(uncounted)
    assert throttle[0] == "BEGIN"
    assert throttle[-1] == "COMMIT"
    assert all("feedpub_cache" in statement for statement in throttle[1:3])
    assert "FOR UPDATE" in throttle[1]


def test_a_put_by_a_producer_of_the_feed_costs_no_round_trip_more(token, settings):
    """A user whose right to write comes from a role on the feed (not a global permission)
    has it read with the feed's row, under its lock: the same statements, in the same
    order, as a PUT by a user holding the global permissions."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from archives.models import FeedRole

    settings.FEEDPUB_SEAL_ON_WRITE = False
    settings.FEEDPUB_API_USER_RATE = None
    feed = FeedFactory(slug="books")
    client = client_for(token)

    def statements(key):
        with CaptureQueriesContext(connection) as queries:
            response = client.put(f"/api/feeds/books/records/{key}", record_data(1),
                                  format="json")
        assert response.status_code == 201, response.content
        return [query["sql"] for query in queries]

    client.put("/api/feeds/books/records/k0", record_data(0), format="json")
    by_permission = statements("k1")
    user = User.objects.get(username="producer")  # the token's
    user.user_permissions.clear()
    assert client.put("/api/feeds/books/records/k2", record_data(0),
                      format="json").status_code == 403
    FeedRole.objects.create(feed=feed, user=user, role=FeedRole.Role.PRODUCER)
    by_role = statements("k3")

    assert [sql[:20] for sql in by_role] == [sql[:20] for sql in by_permission]
    (locked,) = [sql for sql in by_role if sql.startswith('SELECT "archives_feed"')]
    assert "FOR UPDATE" in locked
    assert "archives_feedrole" in locked  # the role, read with the locked row
    assert list(Entry.objects.filter(feed=feed).values_list("username", "via")) == [
        ("producer", "api")] * 3
