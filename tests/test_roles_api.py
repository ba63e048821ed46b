"""Who may write which feed through the API: each kind of writer at each door (a single PUT,
PATCH, DELETE, a batch), the feed's settings and its members, tokens that reach less than
their user, and the actor every entry keeps."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.test import APIClient

from archives.log import publishing
from archives.models import ApiToken, Entry, Feed, FeedRole

from .factories import FeedFactory, record_data

Writer = Callable[[], User]


pytestmark = pytest.mark.usefixtures("fresh_throttles")


@pytest.fixture
def feeds(db) -> tuple[Feed, Feed]:
    alpha, beta = FeedFactory(slug="alpha"), FeedFactory(slug="beta")
    for feed in (alpha, beta):
        publishing.put_record(feed=feed, key="k1", data=record_data(1))
    return alpha, beta


def role(user: User, slug: str, name: str = "producer") -> User:
    FeedRole.objects.create(feed=Feed.objects.get(slug=slug), user=user, role=name)
    return user


def producer_of_alpha() -> User:
    return role(User.objects.create_user("pat"), "alpha")


def group_producer_of_alpha() -> User:
    user = User.objects.create_user("gus")
    group = Group.objects.create(name="cataloguers")
    FeedRole.objects.create(feed=Feed.objects.get(slug="alpha"), group=group, role="producer")
    user.groups.add(group)
    return user


def maintainer_of_alpha() -> User:
    return role(User.objects.create_user("mia"), "alpha", "maintainer")


def in_the_producers_group() -> User:
    user = User.objects.create_user("olga")
    user.groups.add(Group.objects.get(name="producers"))  # every install has it
    return user


def superuser() -> User:
    return User.objects.create_superuser("root")


def with_change_feed() -> User:
    user = User.objects.create_user("sam")
    user.user_permissions.add(Permission.objects.get(codename="change_feed"))
    return user


FEED_WRITERS = [producer_of_alpha, group_producer_of_alpha, maintainer_of_alpha]
EVERY_FEED_WRITERS = [in_the_producers_group, superuser, with_change_feed]


def client_of(user: User | None, token: ApiToken | None = None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user, token=token)
    return client


def put(client, slug, **headers):
    return client.put(f"/api/feeds/{slug}/records/new", record_data(2), format="json",
                      headers=headers)


def patch(client, slug, **headers):
    return client.patch(f"/api/feeds/{slug}/records/k1", {"title": "Patched"},
                        format="json", headers=headers)


def delete(client, slug, **headers):
    return client.delete(f"/api/feeds/{slug}/records/k1", headers=headers)


def batch(client, slug, **headers):
    return client.post(f"/api/feeds/{slug}/batch", {"operations": [
        {"op": "put", "key": "new", "record": record_data(2)},
        {"op": "delete", "key": "k1"}]}, format="json", headers=headers)


# Each door, and what it answers when the write is made.
DOORS = {put: 201, patch: 200, delete: 204, batch: 200}


def entries(slug: str) -> int:
    return Entry.objects.filter(feed__slug=slug).count()


def refusal(response, status: int = 403) -> str:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["detail"]


# Records, at every door


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("writer", FEED_WRITERS)
def test_a_producer_or_maintainer_of_a_feed_writes_it_and_no_other(feeds, writer, door):
    client = client_of(writer())

    assert door(client, "alpha").status_code == DOORS[door]
    refused = refusal(door(client, "beta"))

    assert "'beta'" in refused
    assert "producer role" in refused
    assert entries("alpha") > 1
    assert entries("beta") == 1  # nothing written


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("writer", EVERY_FEED_WRITERS)
def test_the_producers_group_and_site_administrators_write_every_feed(feeds, writer, door):
    client = client_of(writer())

    assert door(client, "alpha").status_code == DOORS[door]
    assert door(client, "beta").status_code == DOORS[door]


@pytest.mark.parametrize("door", DOORS)
def test_a_user_without_a_role_writes_nothing(feeds, door):
    refused = refusal(door(client_of(User.objects.create_user("nobody")), "alpha"))

    assert "'alpha'" in refused
    assert entries("alpha") == 1


@pytest.mark.parametrize("door", DOORS)
def test_an_anonymous_client_writes_nothing(feeds, door):
    response = door(client_of(None), "alpha")

    assert refusal(response, 401) == "Authentication credentials were not provided."
    assert entries("alpha") == 1


def test_a_role_given_to_a_group_is_taken_away_with_the_group(feeds):
    user = group_producer_of_alpha()
    client = client_of(user)
    assert put(client, "alpha").status_code == 201

    user.groups.clear()

    assert "'alpha'" in refusal(patch(client, "alpha"))


# Tokens


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("writer", [superuser, in_the_producers_group])
def test_a_token_scoped_to_a_feed_writes_no_other_even_when_its_user_may(feeds, writer,
                                                                          door):
    user = writer()
    token, _ = ApiToken.issue(user=user, name="alpha importer", feeds=[feeds[0]])
    client = client_of(user, token)

    assert door(client, "alpha").status_code == DOORS[door]
    refused = refusal(door(client, "beta"))

    assert refused == "This token ('alpha importer') is not scoped to feed 'beta'."
    assert entries("beta") == 1


def test_a_scoped_token_does_no_more_than_its_user(feeds):
    user = producer_of_alpha()
    token, _ = ApiToken.issue(user=user, name="both", feeds=feeds)

    assert "'beta'" in refusal(put(client_of(user, token), "beta"))


READ_ONLY_WRITES = [
    *DOORS,
    lambda client, slug: client.patch(f"/api/feeds/{slug}/", {"title": "x"}, format="json"),
    lambda client, slug: client.delete(f"/api/feeds/{slug}/"),
    lambda client, slug: client.post("/api/feeds/", {"slug": "new", "title": "x"},
                                     format="json"),
    lambda client, slug: client.put(f"/api/feeds/{slug}/members/root", {"role": "producer"},
                                    format="json"),
]


@pytest.mark.parametrize("door", READ_ONLY_WRITES)
def test_a_read_only_token_writes_nothing_even_a_superusers(feeds, door):
    user = superuser()
    token, _ = ApiToken.issue(user=user, name="reader", read_only=True)
    client = client_of(user, token)

    assert refusal(door(client, "alpha")) == "This token ('reader') is read-only."
    assert entries("alpha") == 1
    assert Feed.objects.count() == 2
    assert client.get("/api/feeds/alpha/records/k1").status_code == 200
    assert client.get("/api/feeds/alpha/members/").status_code == 200


# The actor each entry keeps


def test_an_api_write_keeps_its_user_token_door_and_note(feeds):
    user = producer_of_alpha()
    token, _ = ApiToken.issue(user=user, name="nightly import")

    response = put(client_of(user, token), "alpha", **{"X-Change-Note": "Fixed the title"})

    assert response.status_code == 201
    entry = Entry.objects.filter(feed__slug="alpha").latest("seq")
    assert (entry.user, entry.username, entry.token_name, entry.via, entry.note) == (
        user, "pat", "nightly import", "api", "Fixed the title")


def test_a_batch_keeps_its_actor_on_every_entry_it_appends(feeds):
    user = maintainer_of_alpha()

    response = batch(client_of(user), "alpha", **{"X-Change-Note": "Spring clean-up"})

    assert response.status_code == 200
    appended = Entry.objects.filter(feed__slug="alpha", seq__gt=1)
    assert {(e.username, e.token_name, e.via, e.note) for e in appended} == {
        ("mia", "", "batch", "Spring clean-up")}
    assert appended.count() == 2


def test_a_note_in_utf8_is_kept_as_written(feeds):
    note = "Révisé: «titre» 漢字"
    raw = note.encode("utf-8").decode("latin-1")  # as the header's bytes reach Django

    response = patch(client_of(producer_of_alpha()), "alpha", **{"X-Change-Note": raw})

    assert response.status_code == 200
    assert Entry.objects.filter(feed__slug="alpha").latest("seq").note == note


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("note", ["x" * 501, "a \x01 control character"])
def test_a_note_too_long_or_not_xml_text_is_a_400_naming_it(feeds, door, note):
    response = door(client_of(producer_of_alpha()), "alpha", **{"X-Change-Note": note})

    assert response.status_code == 400, response.content
    assert "note" in response.json()["errors"]
    assert entries("alpha") == 1


# The feed's settings and record schema


SCHEMA = {"type": "object", "properties": {"isbn": {"type": "string"}}}


@pytest.mark.parametrize("change", [{"title": "Alpha, renamed"}, {"record_schema": SCHEMA}])
def test_a_maintainer_changes_the_feeds_settings_and_schema_a_producer_cannot(feeds, change):
    maintainer, producer = client_of(maintainer_of_alpha()), client_of(producer_of_alpha())

    refused = refusal(producer.patch("/api/feeds/alpha/", change, format="json"))
    assert "'alpha'" in refused
    assert "maintainer role" in refused
    assert maintainer.patch("/api/feeds/alpha/", change, format="json").status_code == 200
    assert "'beta'" in refusal(maintainer.patch("/api/feeds/beta/", change, format="json"))

    (field, value), = change.items()
    read = APIClient().get
    assert read("/api/feeds/alpha/").json()[field] == value
    assert read("/api/feeds/beta/").json()[field] == {"title": feeds[1].title,
                                                      "record_schema": None}[field]


@pytest.mark.parametrize("writer", [maintainer_of_alpha, in_the_producers_group])
def test_creating_and_deleting_feeds_stays_with_site_administrators(db, writer):
    FeedFactory(slug="alpha")
    client = client_of(writer())

    created = client.post("/api/feeds/", {"slug": "mine", "title": "Mine"}, format="json")
    deleted = client.delete("/api/feeds/alpha/")

    assert refusal(created) == ("Creating a feed needs site administration (the "
                                "archives.add_feed permission).")
    assert "site administration" in refusal(deleted)
    assert list(Feed.objects.values_list("slug", flat=True)) == ["alpha"]


def test_a_superuser_creates_changes_and_deletes_feeds(db):
    client = client_of(superuser())

    assert client.post("/api/feeds/", {"slug": "mine", "title": "Mine"},
                       format="json").status_code == 201
    assert client.patch("/api/feeds/mine/", {"title": "Ours"}, format="json").status_code == 200
    assert client.delete("/api/feeds/mine/").status_code == 204


def test_a_feed_scoped_token_creates_no_feed_and_changes_only_its_own(feeds):
    user = superuser()
    token, _ = ApiToken.issue(user=user, name="alpha only", feeds=[feeds[0]])
    client = client_of(user, token)

    created = client.post("/api/feeds/", {"slug": "mine", "title": "Mine"}, format="json")
    changed = client.patch("/api/feeds/beta/", {"title": "x"}, format="json")
    deleted = client.delete("/api/feeds/beta/")

    assert "scoped to some feeds" in refusal(created)
    assert refusal(changed) == "This token ('alpha only') is not scoped to feed 'beta'."
    assert refusal(deleted) == "This token ('alpha only') is not scoped to feed 'beta'."
    assert client.patch("/api/feeds/alpha/", {"title": "x"}, format="json").status_code == 200
    assert Feed.objects.count() == 2


# Members


def members(client, slug="alpha"):
    return client.get(f"/api/feeds/{slug}/members/")


def test_a_maintainer_lists_the_feeds_members_users_first_then_groups(feeds):
    maintainer = maintainer_of_alpha()
    producer_of_alpha()
    group_producer_of_alpha()
    role(User.objects.create_user("bea"), "beta")  # another feed's

    response = members(client_of(maintainer))

    assert response.status_code == 200
    assert response.json() == [{"user": "mia", "role": "maintainer"},
                               {"user": "pat", "role": "producer"},
                               {"group": "cataloguers", "role": "producer"}]


def test_a_maintainer_gives_changes_and_takes_a_role(feeds):
    client = client_of(maintainer_of_alpha())
    colleague = User.objects.create_user("pat")
    address = "/api/feeds/alpha/members/pat"

    given = client.put(address, {"role": "producer"}, format="json")
    written = put(client_of(colleague), "alpha")
    changed = client.put(address, {"role": "maintainer"}, format="json")
    again = client.put(address, {"role": "maintainer"}, format="json")

    assert (given.status_code, given.json()) == (201, {"user": "pat", "role": "producer"})
    assert given["Location"] == address
    assert written.status_code == 201
    assert (changed.status_code, changed.json()) == (200, {"user": "pat",
                                                           "role": "maintainer"})
    assert again.status_code == 200
    assert FeedRole.objects.get(user=colleague).role == "maintainer"

    assert client.delete(address).status_code == 204
    assert "'pat'" in refusal(client.delete(address), 404)
    assert "'alpha'" in refusal(patch(client_of(colleague), "alpha"))


@pytest.mark.parametrize("writer", [superuser, with_change_feed])
def test_a_site_administrator_manages_every_feeds_members(feeds, writer):
    client = client_of(writer())
    User.objects.create_user("pat")

    assert client.put("/api/feeds/beta/members/pat", {"role": "maintainer"},
                      format="json").status_code == 201
    assert members(client, "beta").json() == [{"user": "pat", "role": "maintainer"}]


@pytest.mark.parametrize("writer", [producer_of_alpha, in_the_producers_group,
                                    maintainer_of_alpha])
def test_who_does_not_maintain_a_feed_neither_sees_nor_changes_its_members(feeds, writer):
    client = client_of(writer())
    User.objects.create_user("eve")
    slug = "beta" if writer is maintainer_of_alpha else "alpha"

    answers = [members(client, slug),
               client.put(f"/api/feeds/{slug}/members/eve", {"role": "maintainer"},
                          format="json"),
               client.delete(f"/api/feeds/{slug}/members/eve")]

    for answer in answers:
        refused = refusal(answer)
        assert f"'{slug}'" in refused
        assert "maintainer role" in refused
    assert not FeedRole.objects.filter(user__username="eve").exists()


def test_the_members_api_refuses_anonymous_clients(feeds):
    client = client_of(None)

    assert refusal(members(client), 401)
    assert refusal(client.put("/api/feeds/alpha/members/root", {"role": "producer"},
                              format="json"), 401)


def test_an_unknown_user_or_feed_is_a_404_naming_it(feeds):
    client = client_of(superuser())

    assert "'ghost'" in refusal(client.put("/api/feeds/alpha/members/ghost",
                                           {"role": "producer"}, format="json"), 404)
    assert "'ghost'" in refusal(client.delete("/api/feeds/alpha/members/ghost"), 404)
    assert refusal(members(client, "nope"), 404)


@pytest.mark.parametrize("body", [{"role": "owner"}, {"role": 1}, {}, {"role": "producer",
                                                                        "until": "2027"}])
def test_a_body_that_is_not_a_role_is_a_400(feeds, body):
    client = client_of(superuser())
    User.objects.create_user("pat")

    response = client.put("/api/feeds/alpha/members/pat", body, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["errors"]
    assert not FeedRole.objects.exists()


def test_a_bad_role_is_refused_listing_the_roles(feeds):
    client = client_of(superuser())
    User.objects.create_user("pat")

    response = client.put("/api/feeds/alpha/members/pat", {"role": "owner"}, format="json")

    assert response.json()["errors"] == {
        "role": ["Not a role; the roles are producer, maintainer."]}


def test_a_token_scoped_to_another_feed_manages_no_members(feeds):
    user = superuser()
    token, _ = ApiToken.issue(user=user, name="beta only", feeds=[feeds[1]])
    User.objects.create_user("pat")

    response = client_of(user, token).put("/api/feeds/alpha/members/pat",
                                          {"role": "producer"}, format="json")

    assert refusal(response) == "This token ('beta only') is not scoped to feed 'alpha'."


# The contract


def test_the_schema_documents_the_change_note_and_the_members(db):
    schema = json.loads(APIClient().get("/api/schema/?format=json").content)
    paths = schema["paths"]

    writes = [paths["/api/feeds/{slug}/records/{key}"][method] for method in (
        "put", "patch", "delete")] + [paths["/api/feeds/{slug}/batch"]["post"]]
    for operation in writes:
        (note,) = [p for p in operation["parameters"] if p["name"] == "X-Change-Note"]
        assert note["in"] == "header"
        assert note["schema"]["maxLength"] == 500
    assert set(paths["/api/feeds/{slug}/members/"]["get"]["responses"]) >= {
        "200", "401", "403", "404"}
    member = paths["/api/feeds/{slug}/members/{username}"]
    assert set(member["put"]["responses"]) >= {"200", "201", "400", "401", "403", "404"}
    assert set(member["delete"]["responses"]) >= {"204", "401", "403", "404"}
