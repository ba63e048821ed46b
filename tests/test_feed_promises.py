"""A feed's promises: from its first entry its slug is fixed and it cannot be deleted (its
archive, record and snapshot URLs and its OAI-PMH identifiers and sets name it), and no two
slugs differ only in case. Refused with a 409 (JSON) at the API, with no delete button and a
read-only slug in the admin; never a 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import requests
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from feedpub_consumer.harvesting import harvest
from feedpub_consumer.linkedharvest import FROM_SNAPSHOT
from lxml import html
from rest_framework.test import APIClient

from archives.log import publishing
from archives.models import Feed, Record, Snapshot
from archives.storage.snapshots import take_snapshot

from .factories import FeedFactory, record_data, token_for
from .feeds_live import make_live_feed

PERMS = ["add_feed", "change_feed", "delete_feed", "add_record", "change_record",
         "delete_record"]


def producer() -> APIClient:
    """A producer allowed every write; a server error is an answer here, not an exception."""
    user = User.objects.create(username="producer")
    user.user_permissions.set(Permission.objects.filter(codename__in=PERMS))
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


@pytest.fixture
def api(db) -> APIClient:
    return producer()


@pytest.fixture
def admin(admin_client):
    admin_client.raise_request_exception = False
    return admin_client


def empty_snapshot(feed: Feed) -> Snapshot:
    """A complete snapshot of a feed with no entry, as `manage.py snapshot` made them."""
    return Snapshot.objects.create(feed=feed, last_seq=0, created=datetime.now(tz=UTC),
                                   complete=True)


def refusal(response, status: int = 409) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()


# The API


def test_a_feed_with_one_entry_keeps_its_slug(api, feed):
    api.put("/api/feeds/books/records/k1", record_data(1), format="json")

    body = refusal(api.patch("/api/feeds/books/", {"slug": "livres", "title": "Livres"},
                             format="json"))

    assert body["errors"] == {"slug": [publishing.FROZEN["slug"]]}
    assert "create a new feed" in body["detail"]
    assert Feed.objects.get(pk=feed.pk).slug == "books"
    assert Feed.objects.get(pk=feed.pk).title == "Books"  # nothing of the patch written
    # Its own slug again is no change: the rest of a patch goes through.
    assert api.patch("/api/feeds/books/", {"slug": "books", "title": "Livres"},
                     format="json").status_code == 200


def test_a_feed_with_an_entry_and_a_snapshot_is_not_deleted_and_no_500(api, feed):
    api.put("/api/feeds/books/records/k1", record_data(1), format="json")
    take_snapshot(feed)  # no page sealed: page_size is 3

    body = refusal(api.delete("/api/feeds/books/"))

    assert body["detail"] == publishing.UNDELETABLE
    assert "Delete its records" in body["detail"]
    assert Feed.objects.filter(slug="books").exists()
    assert Record.objects.filter(feed=feed).count() == Snapshot.objects.count() == 1


def test_a_feed_whose_records_are_all_deleted_still_cannot_be_deleted(api, feed):
    api.put("/api/feeds/books/records/k1", record_data(1), format="json")
    api.delete("/api/feeds/books/records/k1")

    refusal(api.delete("/api/feeds/books/"))
    refusal(api.patch("/api/feeds/books/", {"slug": "livres"}, format="json"))

    assert api.get("/feeds/books/records/k1").status_code == 410


def test_a_feed_without_entries_can_be_renamed_and_deleted_with_its_snapshot(api, feed):
    empty_snapshot(feed)

    renamed = api.patch("/api/feeds/books/", {"slug": "livres"}, format="json")
    deleted = api.delete("/api/feeds/livres/")

    assert renamed.status_code == 200
    assert renamed.json()["url"].endswith("/feeds/livres/")
    assert deleted.status_code == 204
    assert not Feed.objects.exists()
    assert not Snapshot.objects.exists()


@pytest.mark.parametrize("slug", ["Books", "BOOKS", "books"])
def test_a_new_slug_differing_only_in_case_is_refused_naming_the_existing_one(api, feed,
                                                                              slug):
    # 409: the request is valid (its schema cannot know the slugs taken); the data refuses it.
    body = refusal(api.post("/api/feeds/", {"slug": slug, "title": "Again"}, format="json"),
                   409)

    assert list(body["errors"]) == ["slug"]
    assert "'books'" in body["errors"]["slug"][0]
    assert Feed.objects.count() == 1


def test_a_rename_to_a_slug_differing_only_in_case_is_refused(api, feed):
    FeedFactory(slug="films")

    body = refusal(api.patch("/api/feeds/films/", {"slug": "Books"}, format="json"), 409)
    own_case = api.patch("/api/feeds/films/", {"slug": "Films"}, format="json")

    assert "'books'" in body["errors"]["slug"][0]
    assert own_case.status_code == 200  # a feed's own slug in another case is no collision
    assert sorted(Feed.objects.values_list("slug", flat=True)) == ["Films", "books"]


def test_a_slug_another_writer_took_meanwhile_is_refused_naming_it(api, monkeypatch):
    full_clean = Feed.full_clean

    def other_writer_after_the_checks(self, *args, **kwargs):
        full_clean(self, *args, **kwargs)
        if self.pk is None and not Feed.objects.exists():
            Feed.objects.create(slug="race", title="Race")

    monkeypatch.setattr(Feed, "full_clean", other_writer_after_the_checks)
    body = refusal(api.post("/api/feeds/", {"slug": "Race", "title": "t"}, format="json"), 409)

    assert "'race'" in body["errors"]["slug"][0]
    assert list(Feed.objects.values_list("slug", flat=True)) == ["race"]


def test_the_database_refuses_slugs_differing_only_in_case(feed):
    with pytest.raises(IntegrityError), transaction.atomic():
        Feed.objects.create(slug="BOOKS", title="Bypassing the write path")


def test_the_demo_command_names_the_existing_slug(feed):
    with pytest.raises(CommandError, match="'books'"):
        call_command("demo_feed", "--slug", "Books", "--records", "1", "--changes", "0")


# The admin


def test_the_admin_offers_no_delete_and_a_read_only_slug_once_a_feed_has_an_entry(admin,
                                                                                   feed):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    take_snapshot(feed)
    change = f"/admin/archives/feed/{feed.pk}/change/"

    doc = html.fromstring(admin.get(change).content)
    note = " ".join(doc.xpath("string(//div[contains(@class, 'feed-frozen')])").split())
    saved = admin.post(change, {"slug": "renamed", "title": "New title", "subtitle": "",
                                "author": "me", "language": "en"})
    confirm = admin.get(f"/admin/archives/feed/{feed.pk}/delete/")
    bulk = admin.post("/admin/archives/feed/", {"action": "delete_selected",
                                                "_selected_action": [feed.pk], "post": "yes"})

    assert not doc.xpath("//input[@name='slug']")
    assert publishing.FROZEN["slug"] in note
    assert publishing.UNDELETABLE in note
    assert not doc.xpath("//a[contains(@class, 'deletelink')]")
    assert saved.status_code == 302
    assert confirm.status_code == 403
    assert bulk.status_code == 200
    assert f"books: {publishing.UNDELETABLE}" in html.fromstring(bulk.content).xpath(
        "//li/text()")
    feed.refresh_from_db()
    assert (feed.slug, feed.title) == ("books", "New title")


def test_the_admin_deletes_a_feed_without_entries_with_its_snapshot(admin, feed):
    empty_snapshot(feed)

    response = admin.post(f"/admin/archives/feed/{feed.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Feed.objects.exists()
    assert not Snapshot.objects.exists()


def test_the_admin_refuses_a_slug_differing_only_in_case_naming_the_existing_one(admin,
                                                                                 feed):
    response = admin.post("/admin/archives/feed/add/", {
        "slug": "Books", "title": "Again", "subtitle": "", "author": "me", "language": "en",
        "page_size": 10})

    errors = " ".join(html.fromstring(response.content).xpath(
        "//ul[contains(@class, 'errorlist')]//text()"))
    assert response.status_code == 200
    assert "'books'" in errors
    assert Feed.objects.count() == 1


# A consumer that starts from a snapshot


def test_a_consumer_from_the_snapshot_ends_with_exactly_the_live_records(live_server,
                                                                         settings,
                                                                         transactional_db):
    feed, _ = make_live_feed(live_server, settings)
    for n in range(1, 3):  # no page sealed yet (page_size is 3)
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    take_snapshot(feed)

    renamed = producer().patch("/api/feeds/live/", {"slug": "moved"}, format="json")
    feed.refresh_from_db()
    publishing.put_record(feed=feed, key="k1", data=record_data(1, title="Changed"))
    publishing.delete_record(feed=feed, key="k2")
    publishing.put_record(feed=feed, key="k9", data=record_data(9))
    result = harvest(f"{live_server.url}/feeds/{feed.slug}/pages/latest", start=FROM_SNAPSHOT)

    live = Record.objects.filter(feed=feed, deleted_at__isnull=True)
    urls = {f"{live_server.url}/feeds/{feed.slug}/records/{record.key}": record.title
            for record in live}
    assert result.complete, result.warnings
    assert {r["id"]: r["record"]["title"] for r in result.records} == urls
    assert all(requests.get(url, timeout=10).status_code == 200 for url in urls)
    refusal(renamed)


# The migration that adds the constraint


def test_the_migration_stops_naming_slugs_differing_only_in_case(transactional_db):
    graph = MigrationLoader(connection).graph
    mine = next(key for key in graph.nodes if key[1].endswith("_feed_slug_unique_ignoring_case"))
    # The migration before it, whatever it is named once branches are chained.
    before = [parent.key for parent in graph.node_map[mine].parents
              if parent.key[0] == "archives"]
    MigrationExecutor(connection).migrate(before)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps
        for slug in ("race", "Race", "films"):
            old.get_model("archives", "Feed").objects.create(slug=slug, title="t")

        with pytest.raises(CommandError, match=r"only in case: 'Race' \(no entry\), 'race' "
                                               r"\(no entry\)\. Rename or delete"):
            MigrationExecutor(connection).migrate([mine])
        old.get_model("archives", "Feed").objects.filter(slug="Race").delete()
        MigrationExecutor(connection).migrate([mine])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert list(Feed.objects.values_list("slug", flat=True)) == ["films", "race"]


@pytest.fixture
def first_entry_meanwhile(monkeypatch):
    """The first entry of `books` comes after the admin's checks, just before its delete."""
    delete_feed = publishing.delete_feed

    def entry_first(*, feed):
        if feed.slug == "books":
            publishing.put_record(feed=feed, key="k1", data=record_data(1))
        delete_feed(feed=feed)

    monkeypatch.setattr(publishing, "delete_feed", entry_first)


@pytest.mark.usefixtures("first_entry_meanwhile")
def test_the_admin_says_why_when_an_entry_came_after_the_delete_was_confirmed(admin, feed):
    response = admin.post(f"/admin/archives/feed/{feed.pk}/delete/", {"post": "yes"},
                          follow=True)

    shown = html.fromstring(response.content).xpath("//ul[@class='messagelist']/li/text()")
    assert response.status_code == 200
    assert shown == [publishing.UNDELETABLE]
    assert Feed.objects.filter(pk=feed.pk).exists()


@pytest.mark.usefixtures("first_entry_meanwhile")
def test_the_admin_bulk_delete_says_which_feeds_it_kept(admin, feed):
    empty = FeedFactory(slug="empty")
    response = admin.post("/admin/archives/feed/", {
        "action": "delete_selected", "_selected_action": [feed.pk, empty.pk], "post": "yes"},
        follow=True)

    shown = html.fromstring(response.content).xpath("//ul[@class='messagelist']/li/text()")
    assert response.status_code == 200
    assert shown == [f"Not deleted: books. {publishing.UNDELETABLE}", "Deleted 1 feed."]
    assert list(Feed.objects.values_list("slug", flat=True)) == ["books"]
