"""API tokens fit to hand out: sent as Bearer or Token, scoped to feeds or to reading,
expiring, revocable, last used to the minute, stored only as digests (a database dump holds
no secret, nor does an error page), made by `/api/tokens/` and `manage.py create_token`, and
DRF's tokens of before still working after the upgrade."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from archives.api import tokens as tokens_api
from archives.models import ApiToken, FeedRole, Record
from archives.models.access import TOKEN_PREFIX, TOKEN_RE, is_well_formed, token_digest

from .factories import FeedFactory, record_data, token_for

ROOT = Path(__file__).resolve().parent.parent
RECORD = record_data(1)


@pytest.fixture
def user(db) -> User:
    """A producer of every feed (the `producers` group)."""
    producer = User.objects.create_user("pat")
    producer.groups.add(Group.objects.get(name="producers"))
    return producer


@pytest.fixture
def feeds(db):
    return FeedFactory(slug="books"), FeedFactory(slug="films")


def client(secret: str = "", scheme: str = "Bearer") -> APIClient:
    api = APIClient()
    if secret:
        api.credentials(HTTP_AUTHORIZATION=f"{scheme} {secret}")
    return api


def put(api: APIClient, slug: str, key: str = "k1"):
    return api.put(f"/api/feeds/{slug}/records/{key}", RECORD, format="json")


def detail(response) -> str:
    return response.json()["detail"]


# Authentication: either scheme, and clear refusals


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "bearer", "TOKEN"])
def test_a_token_writes_sent_by_either_scheme_in_any_case(user, feeds, scheme):
    secret = token_for(user)

    assert put(client(secret, scheme), "books").status_code == 201


def test_a_secret_has_the_prefix_and_checksum_scanners_are_taught(user):
    secret = token_for(user)

    assert secret.startswith(TOKEN_PREFIX)
    assert re.fullmatch(TOKEN_RE, secret)
    assert is_well_formed(secret)
    assert not is_well_formed(secret[:-1] + ("A" if secret[-1] != "A" else "B"))


def test_an_unknown_secret_is_a_401_with_a_bearer_challenge(feeds):
    response = put(client(TOKEN_PREFIX + "x" * 46), "books")

    assert response.status_code == 401
    assert detail(response) == "Invalid token."
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Record.objects.exists()


def test_a_header_with_more_than_the_token_is_a_401_saying_how_to_send_it(user, feeds):
    response = put(client(f"{token_for(user)} extra"), "books")

    assert response.status_code == 401
    assert "Bearer <token>" in detail(response)


def test_an_expired_token_is_a_401_saying_when_it_expired(user, feeds):
    expired = timezone.now() - timedelta(minutes=1)
    secret = token_for(user, expires=expired)

    response = put(client(secret), "books")

    assert response.status_code == 401
    assert detail(response) == f"This token expired at {expired.isoformat()}."
    assert client(secret).get("/api/feeds/").status_code == 401
    assert put(client(token_for(user, expires=expired + timedelta(hours=1))),
               "books").status_code == 201


def test_an_inactive_users_token_is_a_401(user, feeds):
    secret = token_for(user)
    User.objects.filter(pk=user.pk).update(is_active=False)

    response = put(client(secret), "books")

    assert response.status_code == 401
    assert "inactive" in detail(response)


def test_a_revoked_token_is_a_401_at_once(user, feeds):
    secret = token_for(user)
    other = client(token_for(user))
    token_id = ApiToken.objects.get(digest=token_digest(secret)).pk

    assert other.delete(f"/api/tokens/{token_id}").status_code == 204
    assert put(client(secret), "books").status_code == 401
    assert put(other, "books").status_code == 201


def test_the_token_is_the_requests_auth_and_its_entry_names_it(user, feeds):
    from rest_framework.test import APIRequestFactory

    from archives.api.authentication import TokenAuthentication

    secret = token_for(user, name="nightly import")
    request = APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Bearer {secret}")

    authenticated, token = TokenAuthentication().authenticate(request)

    assert authenticated == user
    assert isinstance(token, ApiToken)
    assert token.name == "nightly import"


# Last used: written at most once a minute


def token_updates(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith('UPDATE "archives_apitoken"')]


def test_last_used_is_written_on_use_and_not_again_within_the_minute(user, feeds):
    secret = token_for(user)
    api = client(secret)
    token = ApiToken.objects.get(digest=token_digest(secret))
    assert token.last_used is None

    with CaptureQueriesContext(connection) as first:
        api.get("/api/feeds/")
    used = ApiToken.objects.get(pk=token.pk).last_used
    with CaptureQueriesContext(connection) as again:
        for _ in range(3):
            assert api.get("/api/feeds/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(last_used=used - timedelta(seconds=61))
    with CaptureQueriesContext(connection) as later:
        api.get("/api/feeds/")

    assert len(token_updates(first)) == 1
    assert used is not None
    assert timezone.now() - used < timedelta(seconds=5)
    assert token_updates(again) == []
    assert len(token_updates(later)) == 1
    assert ApiToken.objects.get(pk=token.pk).last_used > used


def test_the_token_its_user_and_its_scope_are_one_query(user, feeds):
    secret = token_for(user, feeds=[feeds[0]])
    api = client(secret)
    api.get("/api/feeds/")  # last_used written

    with CaptureQueriesContext(connection) as queries:
        api.get("/api/feeds/")

    reads = [q["sql"] for q in queries if "archives_apitoken" in q["sql"]]
    assert len(reads) == 1
    assert '"auth_user"' in reads[0]
    # Whether it is scoped is its own column: not even a subquery of its feeds.
    assert "archives_apitoken_feeds" not in reads[0]


# Scope and read-only: a token never does more than its user, nor more than it says


def test_a_scoped_token_writes_its_feeds_only_and_names_the_feed_it_may_not(user, feeds):
    api = client(token_for(user, name="books import", feeds=[feeds[0]]))

    refused = put(api, "films")
    batch = api.post("/api/feeds/films/batch", {"operations": [
        {"op": "put", "key": "k1", "record": RECORD}]}, format="json")

    assert put(api, "books").status_code == 201
    assert refused.status_code == 403
    assert "'films'" in detail(refused)
    assert "books import" in detail(refused)
    assert batch.status_code == 403
    assert list(Record.objects.values_list("feed__slug", flat=True)) == ["books"]


def test_a_token_scoped_to_a_feed_its_user_cannot_write_writes_nothing(db, feeds):
    books, films = feeds
    user = User.objects.create_user("sam")
    FeedRole.objects.create(feed=books, user=user, role=FeedRole.Role.PRODUCER)
    api = client(token_for(user, feeds=[films]))

    assert put(api, "films").status_code == 403
    assert put(api, "books").status_code == 403
    assert not Record.objects.exists()


def test_a_token_scoped_to_feeds_since_deleted_reaches_none(user, feeds):
    """Deleting the only feed of a token's scope (possible while it has no entries) leaves
    the token scoped to nothing, not to everything."""
    doomed = FeedFactory(slug="doomed")
    api = client(token_for(user, name="doomed only", feeds=[doomed]))
    client(token_for(User.objects.create_superuser("root"))).delete("/api/feeds/doomed/")

    refused = put(api, "books")

    assert refused.status_code == 403
    assert "not scoped to feed 'books'" in detail(refused)
    assert not Record.objects.exists()


def test_a_read_only_token_reads_and_writes_nothing(user, feeds):
    superuser = User.objects.create_superuser("root")
    put(client(token_for(superuser)), "books")
    api = client(token_for(superuser, read_only=True))

    said_read_only = [
        put(api, "books", "k2"),
        api.patch("/api/feeds/books/records/k1", {"title": "Changed"}, format="json"),
        api.delete("/api/feeds/books/records/k1"),
        api.post("/api/feeds/books/batch", {"operations": [{"op": "delete", "key": "k1"}]},
                 format="json"),
        api.post("/api/tokens/", {"name": "more"}, format="json"),
    ]
    feed_writes = [
        api.patch("/api/feeds/books/", {"title": "Changed"}, format="json"),
        api.post("/api/feeds/", {"slug": "plays", "title": "Plays"}, format="json"),
    ]

    writes = said_read_only + feed_writes
    assert [response.status_code for response in writes] == [403] * len(writes)
    assert all("read-only" in detail(response) for response in said_read_only)
    assert api.get("/api/feeds/books/records/k1").json()["title"] == RECORD["title"]
    assert api.get("/api/tokens/").status_code == 200
    assert Record.objects.get().title == RECORD["title"]


# The tokens API


def test_creating_a_token_answers_its_secret_once_and_the_list_never_does(user, feeds):
    api = client(token_for(user, name="first"))
    expires = (timezone.now() + timedelta(days=30)).replace(microsecond=0)

    created = api.post("/api/tokens/", {"name": "theses import", "feeds": ["books"],
                                        "read_only": False, "expires": expires.isoformat()},
                       format="json")
    listed = api.get("/api/tokens/")

    assert created.status_code == 201, created.content
    body = created.json()
    secret = body["token"]
    assert is_well_formed(secret)
    assert {key: body[key] for key in ("name", "feeds", "read_only", "last_used")} == {
        "name": "theses import", "feeds": ["books"], "read_only": False, "last_used": None}
    assert secret.startswith(body["hint"])
    assert put(client(secret), "books").status_code == 201
    assert [token["name"] for token in listed.json()] == ["first", "theses import"]
    assert {token["id"] for token in listed.json()} >= {body["id"]}
    assert secret not in listed.content.decode()
    assert all(set(token) == set(body) - {"token"} for token in listed.json())


def test_the_list_holds_only_the_callers_tokens(user, feeds):
    other = User.objects.create_user("other")
    token_for(other, name="theirs")

    listed = client(token_for(user, name="mine")).get("/api/tokens/")

    assert [token["name"] for token in listed.json()] == ["mine"]


def test_another_users_token_cannot_be_revoked(user):
    other = User.objects.create_user("other")
    token_for(other, name="theirs")
    theirs = ApiToken.objects.get(user=other)

    response = client(token_for(user)).delete(f"/api/tokens/{theirs.pk}")

    assert response.status_code == 404
    assert ApiToken.objects.filter(pk=theirs.pk).exists()


def test_the_tokens_api_needs_authentication(db):
    for response in (client().get("/api/tokens/"),
                     client().post("/api/tokens/", {"name": "x"}, format="json"),
                     client().delete("/api/tokens/1")):
        assert response.status_code == 401
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"name": "x", "expires": "2020-01-01T00:00:00Z"}, "expires", "in the past"),
    ({"name": "x", "feeds": ["books", "theses"]}, "feeds", "'theses'"),
    ({"name": "taken"}, "name", "already"),
    ({"name": ""}, "name", "blank"),
    ({"name": "   "}, "name", "blank"),
    ({"name": "x" * 101}, "name", "100"),
    ({"name": "x", "read_only": "yes"}, "read_only", "true or false"),
    ({"name": "x", "expires": "soon"}, "expires", "format"),
    ({"name": "x", "colour": "red"}, "colour", "Unknown"),
])
def test_bad_input_is_a_400_naming_the_field(user, feeds, body, field, says):
    token_for(user, name="taken")
    api = client(token_for(user, name="api"))

    response = api.post("/api/tokens/", body, format="json")

    assert response.status_code == 400, response.content
    assert says in " ".join(response.json()["errors"][field])
    assert ApiToken.objects.count() == 2


def test_a_scoped_token_makes_only_tokens_within_its_feeds(user, feeds):
    api = client(token_for(user, name="books", feeds=[feeds[0]]))

    within = api.post("/api/tokens/", {"name": "b", "feeds": ["books"]}, format="json")
    beyond = api.post("/api/tokens/", {"name": "f", "feeds": ["films"]}, format="json")
    everywhere = api.post("/api/tokens/", {"name": "all"}, format="json")

    assert within.status_code == 201
    assert beyond.status_code == 403
    assert "'films'" in detail(beyond)
    assert everywhere.status_code == 403
    assert sorted(ApiToken.objects.values_list("name", flat=True)) == ["b", "books"]


def test_an_expiring_token_makes_only_tokens_expiring_no_later(user, feeds):
    soon = timezone.now() + timedelta(days=1)
    api = client(token_for(user, expires=soon))

    never = api.post("/api/tokens/", {"name": "never"}, format="json")
    sooner = api.post("/api/tokens/", {"name": "sooner", "expires": (
        soon - timedelta(hours=1)).isoformat()}, format="json")

    assert never.status_code == 403
    assert "expire no later" in detail(never)
    assert sooner.status_code == 201


def test_the_tokens_api_examples_are_what_it_says(user, feeds):
    from archives.api import examples

    FeedFactory(slug=examples.RECORDS_SLUG)
    created = client(token_for(user)).post("/api/tokens/", examples.TOKEN_BODY, format="json")

    assert created.status_code == 201, created.content
    assert set(created.json()) == set(examples.TOKEN) | {"token"}
    assert not is_well_formed(examples.TOKEN_SECRET)  # no scanner takes it for a leak
    refused = client(token_for(user)).post("/api/tokens/", {"name": "x", "feeds": ["theses"]},
                                           format="json")
    assert refused.json() == examples.TOKEN_INVALID


# Hashed at rest


def test_a_database_dump_holds_no_secret(user, feeds):
    secret = token_for(user, feeds=[feeds[0]])
    out = StringIO()

    call_command("dumpdata", stdout=out)

    assert token_digest(secret) in out.getvalue()  # the token is in the dump...
    assert secret not in out.getvalue()  # ...its secret is not
    assert secret[len(TOKEN_PREFIX) + 4:] not in out.getvalue()


@pytest.mark.postgres
@pytest.mark.skipif(not shutil.which("pg_dump"), reason="pg_dump is not on PATH")
def test_pg_dump_of_the_database_holds_no_secret(transactional_db):
    user = User.objects.create_user("pat")
    secret = token_for(user)
    db = connection.settings_dict
    env = {**os.environ, **({"PGPASSWORD": db["PASSWORD"]} if db["PASSWORD"] else {})}

    dump = subprocess.run(  # noqa: S603 (our own arguments)
        [shutil.which("pg_dump") or "pg_dump", "--data-only", "-h", db["HOST"] or "127.0.0.1",
         "-p", str(db["PORT"] or 5432), "-U", db["USER"] or "postgres", db["NAME"]],
        capture_output=True, text=True, env=env, check=True, timeout=60).stdout

    assert token_digest(secret) in dump
    assert secret not in dump


# Never in logs or error pages


@pytest.fixture
def failing_list(monkeypatch):
    def fail(self, request):
        raise RuntimeError("the list broke")

    monkeypatch.setattr(tokens_api.TokenList, "get", fail)


@pytest.mark.usefixtures("failing_list")
def test_debugs_error_page_and_the_logged_report_hold_no_secret(user, settings, caplog):
    settings.DEBUG = True
    settings.FEEDPUB_BASE_URL = "http://testserver"  # (DEBUG checks the address)
    secret = token_for(user)
    api = client(secret)
    api.raise_request_exception = False

    with caplog.at_level(logging.ERROR, logger="django.request"):
        page = api.get("/api/tokens/", headers={"Accept": "text/html"})
        text = api.get("/api/tokens/", headers={"Accept": "application/json"})

    assert page.status_code == text.status_code == 500
    assert b"the list broke" in page.content
    assert b"the list broke" in text.content
    assert b"HTTP_AUTHORIZATION" in page.content  # shown, but hidden
    for shown in (page.content.decode(), text.content.decode(), caplog.text):
        assert secret not in shown
        assert secret[len(TOKEN_PREFIX) + 4:] not in shown


def test_an_error_while_authenticating_shows_no_secret_among_the_locals(user, settings,
                                                                        monkeypatch):
    from archives.api import authentication

    def fail(token, now):
        raise RuntimeError("the database broke")

    monkeypatch.setattr(authentication, "_note_use", fail)
    settings.DEBUG = True
    settings.FEEDPUB_BASE_URL = "http://testserver"  # (DEBUG checks the address)
    secret = token_for(user)
    api = client(secret)
    api.raise_request_exception = False

    page = api.get("/api/feeds/", headers={"Accept": "text/html"})

    assert page.status_code == 500
    assert b"authenticate_credentials" in page.content  # the frame is shown...
    assert secret not in page.content.decode()  # ...not the secret among its locals


def test_the_deployed_access_logs_leave_the_authorization_header_out():
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    formats = re.findall(r"log_format\s+\w+\s+((?:'[^']*'\s*)+);", nginx)
    gunicorn = (ROOT / "deploy/gunicorn.conf.py").read_text()

    assert formats
    assert all("authorization" not in fmt.lower() for fmt in formats)
    # gunicorn's default access format has no request header but the referer and agent.
    assert "access_log_format" not in gunicorn


# manage.py create_token


def create_token(*args: str) -> str:
    out = StringIO()
    call_command("create_token", *args, stdout=out)
    return out.getvalue()


def test_create_token_prints_the_secret_alone_on_its_last_line(user, feeds):
    printed = create_token("pat", "--name", "catalogue job", "--feeds", "books")
    secret = printed.splitlines()[-1]

    assert is_well_formed(secret)
    assert "catalogue job" in printed.splitlines()[0]
    assert put(client(secret), "books").status_code == 201
    token = ApiToken.objects.get(digest=token_digest(secret))
    assert [feed.slug for feed in token.feeds.all()] == ["books"]


def test_create_token_makes_read_only_and_expiring_tokens(user, feeds):
    secret = create_token("pat", "--name", "reader", "--read-only",
                          "--expires", "2030-06-30T18:00:00Z").splitlines()[-1]

    token = ApiToken.objects.get(digest=token_digest(secret))
    assert token.read_only
    assert token.expires.isoformat() == "2030-06-30T18:00:00+00:00"
    assert put(client(secret), "books").status_code == 403


@pytest.mark.parametrize(("args", "says"), [
    (["nobody", "--name", "x"], "No user 'nobody'"),
    (["pat", "--name", "x", "--feeds", "books,theses"], "--feeds: No feed has the slug 'theses'"),
    (["pat", "--name", "x", "--expires", "2020-01-01"], "--expires: 2020-01-01T00:00:00"),
    (["pat", "--name", "x", "--expires", "next week"], "no ISO 8601"),
    (["pat", "--name", "taken"], "--name: pat has a token named 'taken' already"),
    (["pat", "--name", " "], "--name: Give the token a name"),
])
def test_create_token_refuses_bad_input_clearly(user, feeds, args, says):
    token_for(user, name="taken")

    with pytest.raises(CommandError, match=re.escape(says)):
        create_token(*args)
    assert ApiToken.objects.count() == 1


# The upgrade: DRF's tokens of before keep working


def drf_token_table() -> str:
    """authtoken_token as DRF's migrations make it."""
    created = "timestamp with time zone" if connection.vendor == "postgresql" else "datetime"
    return ('CREATE TABLE "authtoken_token" ("key" varchar(40) NOT NULL PRIMARY KEY, '
            f'"created" {created} NOT NULL, "user_id" integer NOT NULL UNIQUE '
            'REFERENCES "auth_user" ("id") DEFERRABLE INITIALLY DEFERRED)')


def test_drf_tokens_of_before_keep_working_hashed_and_named_migrated(transactional_db):
    executor = MigrationExecutor(connection)
    target = [("archives", "0023_record_language")]
    key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # as DRF makes them: 40 hex digits
    executor.migrate(target)
    try:
        user = User.objects.create_user("pat")
        user.user_permissions.set(Permission.objects.filter(codename__endswith="_record"))
        with connection.cursor() as cursor:
            cursor.execute(drf_token_table())
            cursor.execute('INSERT INTO "authtoken_token" ("key", "created", "user_id") '
                           "VALUES (%s, %s, %s)", [key, timezone.now(), user.pk])
        MigrationExecutor(connection).migrate([("archives", "0024_roles_tokens_and_actors")])
        with connection.cursor() as cursor:
            cursor.execute('SELECT count(*) FROM "authtoken_token"')
            left = cursor.fetchone()[0]
    finally:
        with connection.cursor() as cursor:
            cursor.execute('DROP TABLE IF EXISTS "authtoken_token"')
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    FeedFactory(slug="books")
    token = ApiToken.objects.get()
    assert left == 0  # the clear key is gone
    assert (token.user, token.name) == (user, "migrated")
    assert token.digest == token_digest(key)
    assert key not in (token.digest, token.hint)
    assert put(client(key, "Token"), "books").status_code == 201
    assert put(client(key, "Bearer"), "books", "k2").status_code == 201


def test_the_docs_give_secret_scanners_the_pattern_tokens_have():
    page = (ROOT / "docs/publishing/roles-and-tokens.md").read_text()

    assert f"```text\n{TOKEN_RE}\n```" in page


# The admin: every token, never its secret nor its digest; revoked there


def test_the_admin_lists_every_token_without_its_secret_and_revokes(admin_client, user, feeds):
    secret = token_for(user, name="books import", feeds=[feeds[0]], read_only=True)
    other = token_for(User.objects.create_user("sam"), name="sam's job")
    token = ApiToken.objects.get(digest=token_digest(secret))

    listed = admin_client.get("/admin/archives/apitoken/").content.decode()
    shown = admin_client.get(f"/admin/archives/apitoken/{token.pk}/change/").content.decode()
    revoked = admin_client.post("/admin/archives/apitoken/", {
        "action": "revoke", "_selected_action": [token.pk]}, follow=True)

    assert "books import" in listed
    assert "sam&#x27;s job" in listed
    assert token.hint in listed
    assert "books" in shown
    for page in (listed, shown):
        for hidden in (secret, other, token.digest, token_digest(other)):
            assert hidden not in page
    assert admin_client.get("/admin/archives/apitoken/add/").status_code == 403
    assert "Revoked 1 token(s)" in revoked.content.decode()
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["sam's job"]
    assert client(secret).get("/api/tokens/").status_code == 401
