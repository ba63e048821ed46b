"""A record's history (`GET /api/feeds/<slug>/records/<key>/history`): who changed it, when,
by which door and why, newest first, for the feed's producers and maintainers and the site's
administrators only; and the actor and note an import keeps."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from archives.db import fastsql
from archives.formats import rfc3339
from archives.log import publishing
from archives.log.access import Actor
from archives.models import ApiToken, Entry, FeedRole, Record

from .factories import FeedFactory, record_data

HISTORY = "/api/feeds/{slug}/records/{key}/history"


pytestmark = pytest.mark.usefixtures("fresh_throttles")


@pytest.fixture
def books(db):
    return FeedFactory(slug="books", title="Books")


@pytest.fixture
def films(db):
    return FeedFactory(slug="films", title="Films")


def member(feed, username: str, role: str = FeedRole.Role.PRODUCER) -> User:
    user = User.objects.create_user(username)
    FeedRole.objects.create(feed=feed, user=user, role=role)
    return user


def client_of(user: User | None, token: ApiToken | None = None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user, token=token)
    return client


def history(client: APIClient, key: str = "moby-dick", slug: str = "books"):
    return client.get(HISTORY.format(slug=slug, key=key))


def entries(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["entries"]


# What it shows


def test_it_lists_the_entries_newest_first_with_who_when_by_which_door_and_why(books):
    pat = member(books, "pat")
    token, _secret = ApiToken.issue(user=pat, name="catalogue sync")
    first = publishing.put_record(feed=books, key="moby-dick", data=record_data(1),
                                  actor=Actor(via="api", user=pat, token=token,
                                              note="First catalogued"))
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1, title="Moby-Dick"),
                          actor=Actor(via="admin", user=pat))
    publishing.delete_record(feed=books, key="moby-dick",
                             actor=Actor(via="command", note="Withdrawn"))

    response = history(client_of(pat))

    assert response.json()["feed"] == "books"
    assert response.json()["key"] == "moby-dick"
    shown = entries(response)
    assert [entry["kind"] for entry in shown] == ["delete", "update", "create"]
    assert [entry["seq"] for entry in shown] == [3, 2, 1]
    assert shown[2] == {
        "seq": 1, "kind": "create",
        "updated": first.updated.isoformat().replace("+00:00", "Z"),
        "actor": {"user": "pat", "token": "catalogue sync", "via": "api"},
        "note": "First catalogued"}
    assert shown[1]["actor"] == {"user": "pat", "token": None, "via": "admin"}
    assert shown[1]["note"] == ""
    # A command run by the operator: no user.
    assert shown[0]["actor"] == {"user": None, "token": None, "via": "command"}
    assert shown[0]["note"] == "Withdrawn"


def test_an_entry_written_before_actors_were_kept_has_an_unknown_actor(books):
    pat = member(books, "pat")
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1))  # actor=None
    publishing.put_record(feed=books, key="moby-dick", data=record_data(2),
                          actor=Actor(via="batch", user=pat))

    shown = entries(history(client_of(pat)))

    assert shown[0]["actor"] == {"user": "pat", "token": None, "via": "batch"}
    assert shown[1]["actor"] is None
    assert shown[1]["note"] == ""


def test_it_keeps_the_name_a_user_had_when_the_user_is_gone(books):
    pat, sam = member(books, "pat"), member(books, "sam")
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1),
                          actor=Actor(via="api", user=sam))
    sam.delete()

    assert entries(history(client_of(pat)))[0]["actor"]["user"] == "sam"


def test_a_deleted_records_history_is_read_like_any_other(books):
    pat = member(books, "pat")
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1))
    publishing.delete_record(feed=books, key="moby-dick")

    assert [entry["kind"] for entry in entries(history(client_of(pat)))] == [
        "delete", "create"]


def test_the_answer_is_private_to_its_reader(books):
    pat = member(books, "pat")
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1))

    assert history(client_of(pat))["Cache-Control"] == "private"


def test_the_answer_is_json_as_the_rest_of_the_api_writes_it(books):
    pat = member(books, "pat")
    note = 'A "quoted" word, a \\ backslash, a line\nbreak and ü漢 \U0001f989'
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1),
                          actor=Actor(via="admin", user=pat, note=note))

    response = history(client_of(pat))

    assert response["Content-Type"] == "application/json"
    assert response.json()["entries"][0]["note"] == note
    assert response.content == json.dumps(
        response.json(), ensure_ascii=False, separators=(",", ":")).encode()


def test_it_reads_in_as_many_queries_for_one_entry_as_for_a_hundred(books):
    pat = member(books, "pat")
    publishing.put_record(feed=books, key="one", data=record_data(1))
    for n in range(100):
        publishing.put_record(feed=books, key="many", data=record_data(n))
    client = client_of(pat)
    history(client, "one")  # (the throttle's first count of the user writes a row)

    with CaptureQueriesContext(connection) as one:
        assert len(entries(history(client, "one"))) == 1
    with CaptureQueriesContext(connection) as many:
        assert len(entries(history(client, "many"))) == 100

    assert len(many) == len(one)
    entry_queries = [query["sql"] for query in many if "archives_entry" in query["sql"]]
    assert len(entry_queries) == 1
    assert "archives_record" not in entry_queries[0]  # no join: the (record, seq) index


def test_the_history_shortcut_reads_what_the_orm_reads(books):
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1),
                          actor=Actor(via="import", note="Loaded"))
    publishing.put_record(feed=books, key="moby-dick", data=record_data(2))
    publishing.put_record(feed=books, key="other", data=record_data(3))
    # A time on the second, which SQLite stores without its fraction.
    Entry.objects.filter(seq=1).update(updated=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    record = Record.objects.get(key="moby-dick")
    orm = [(seq, kind, rfc3339(updated), *rest) for seq, kind, updated, *rest in
           Entry.objects.filter(record=record).order_by("-seq").values_list(
               "seq", "kind", "updated", "username", "token_name", "via", "note")]

    with CaptureQueriesContext(connection) as queries:
        rows = fastsql.history_rows(record.pk)

    assert rows == orm
    assert rows[1].updated == "2026-01-02T03:04:05.000000Z"
    assert len(queries) == 1


def test_the_history_shortcut_reads_the_entries_table_alone_by_record():
    updated = fastsql.rfc3339_sql("updated")
    assert fastsql.history_rows_sql() == (
        f'SELECT seq, kind, {updated}, username, token_name, via, note FROM '  # noqa: S608
        f'"archives_entry" WHERE record_id = %s ORDER BY seq DESC')


# Who may read it


@pytest.fixture
def written(books):
    publishing.put_record(feed=books, key="moby-dick", data=record_data(1),
                          actor=Actor(via="command", note="Loaded"))


def someone(kind: str, books, films) -> User:
    if kind == "producer":
        return member(books, "pat")
    if kind == "maintainer":
        return member(books, "mo", FeedRole.Role.MAINTAINER)
    if kind == "group producer":
        user = User.objects.create_user("gil")
        group = Group.objects.create(name="cataloguers")
        user.groups.add(group)
        FeedRole.objects.create(feed=books, group=group)
        return user
    if kind == "superuser":
        return User.objects.create_superuser("root")
    if kind == "site administrator":
        user = User.objects.create_user("ada")
        user.user_permissions.add(Permission.objects.get(codename="change_feed"))
        return user
    if kind == "in the producers group":
        user = User.objects.create_user("pia")
        user.groups.add(Group.objects.get(name="producers"))
        return user
    if kind == "producer of another feed":
        return member(films, "fay")
    assert kind == "user without a role"
    return User.objects.create_user("nobody", is_staff=True)


@pytest.mark.parametrize("kind", ["producer", "maintainer", "group producer", "superuser",
                                  "site administrator", "in the producers group"])
def test_those_who_may_write_the_feed_read_its_history(books, films, written, kind):
    assert entries(history(client_of(someone(kind, books, films))))[0]["note"] == "Loaded"


@pytest.mark.parametrize("kind", ["producer of another feed", "user without a role"])
def test_others_are_refused_naming_the_feed_and_the_role(books, films, written, kind):
    response = history(client_of(someone(kind, books, films)))

    assert response.status_code == 403
    assert response.json()["detail"] == (
        "Reading the history of feed 'books' needs the producer role on it (or maintainer).")
    assert "Loaded" not in response.content.decode()


def test_an_anonymous_reader_is_asked_for_credentials(written):
    response = history(APIClient())

    assert response.status_code == 401
    assert "Loaded" not in response.content.decode()


def test_a_token_reads_only_the_feeds_of_its_scope(books, films, written):
    pat = member(books, "pat")
    FeedRole.objects.create(feed=films, user=pat)
    elsewhere, _ = ApiToken.issue(user=pat, name="films only", feeds=[films])
    here, _ = ApiToken.issue(user=pat, name="books, reading", feeds=[books], read_only=True)
    anywhere, _ = ApiToken.issue(user=pat, name="every feed")

    refused = history(client_of(pat, elsewhere))
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "This token ('films only') is not scoped to feed 'books'.")
    assert entries(history(client_of(pat, here)))[0]["note"] == "Loaded"
    assert entries(history(client_of(pat, anywhere)))[0]["note"] == "Loaded"


def test_a_token_does_not_read_more_than_its_user_may(books, films, written):
    fay = member(films, "fay")
    token, _ = ApiToken.issue(user=fay, name="books?", feeds=[books])

    assert history(client_of(fay, token)).status_code == 403


def test_an_unknown_record_or_feed_is_a_404_and_a_bad_key_a_400(books, written):
    pat = member(books, "pat")
    client = client_of(pat)

    missing = history(client, "no-such-record")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "No record 'no-such-record' in feed 'books'."
    assert history(client, slug="no-such-feed").status_code == 404
    assert history(client, "a b").status_code == 400


# The import's actor and note


@pytest.fixture
def records_file(tmp_path):
    path = tmp_path / "books.jsonl"
    path.write_text("".join(json.dumps({"key": f"k{n}", **record_data(n)}) + "\n"
                            for n in range(1, 4)))
    return path


def import_records(*args) -> str:
    out = StringIO()
    call_command("import_records", *map(str, args), stdout=out, stderr=StringIO())
    return out.getvalue()


def test_an_import_keeps_its_note_and_the_user_it_acts_as(books, records_file):
    pat = member(books, "pat")

    import_records("books", records_file, "--user", "pat", "--note", "Nightly export")

    shown = entries(history(client_of(pat), "k2"))
    assert shown == [{"seq": 2, "kind": "create", "updated": shown[0]["updated"],
                      "actor": {"user": "pat", "token": None, "via": "import"},
                      "note": "Nightly export"}]
    assert set(Entry.objects.values_list("user", "via", "note")) == {
        (pat.pk, "import", "Nightly export")}


def test_an_import_without_a_user_is_the_operators(books, records_file):
    import_records("books", records_file)

    assert set(Entry.objects.values_list("user", "username", "via", "note")) == {
        (None, "", "import", "")}


def test_an_import_as_a_user_who_is_no_producer_of_the_feed_is_refused(
        books, films, records_file):
    member(films, "fay")

    with pytest.raises(CommandError) as refusal:
        import_records("books", records_file, "--user", "fay")

    assert str(refusal.value) == ("--user: 'fay' may not write the records of feed 'books': "
                                  "that needs the producer role on it (or maintainer)")
    assert not Entry.objects.exists()


def test_an_import_as_an_unknown_user_is_refused(books, records_file):
    with pytest.raises(CommandError, match="--user: no user 'nemo'"):
        import_records("books", records_file, "--user", "nemo")
    assert not Entry.objects.exists()


def test_a_note_over_500_characters_is_refused_before_anything_is_written(
        books, records_file):
    with pytest.raises(CommandError, match="^--note: .*500"):
        import_records("books", records_file, "--note", "x" * 501)
    assert not Entry.objects.exists()


def test_the_demo_feeds_changes_are_the_operators_by_a_command(db):
    call_command("demo_feed", "--records", "3", "--changes", "2", stdout=StringIO(),
                 stderr=StringIO())

    assert set(Entry.objects.values_list("user", "via")) == {(None, "command")}
