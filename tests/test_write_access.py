"""Day one with the admin and a colleague: the admin is named by FEEDPUB_ADMIN_TITLE, feeds
are chosen by their titles, the record list links each record's page, and a user in the
`producers` group (made by a migration on every install) writes records through the API
and the admin, and only reads feeds."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
from lxml import html
from rest_framework.test import APIClient

from archives.documents import urls
from archives.log import publishing
from archives.models import Feed, Record

from .factories import FeedFactory, record_data


def page(response):
    assert response.status_code == 200
    return html.fromstring(response.content)


@pytest.fixture
def producer(db) -> User:
    """A colleague as the docs make one: staff (to log in to the admin), in `producers`."""
    user = User.objects.create_user("pat", "pat@example.org", "a long passphrase 1",
                                    is_staff=True)
    user.groups.add(Group.objects.get(name="producers"))
    return user


@pytest.fixture
def token_client(producer) -> APIClient:
    """The producer's API client, with the token `manage.py create_token` prints."""
    out = io.StringIO()
    call_command("create_token", "pat", "--name", "tests", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().splitlines()[-1]}")
    return client


# The admin's name


def test_the_admin_is_called_feedpub_by_default(admin_client):
    index = page(admin_client.get("/admin/"))
    assert index.xpath("normalize-space(//div[@id='site-name'])") == "feedpub"
    assert index.xpath("string(//title)").endswith("| feedpub")


def test_the_admin_takes_its_header_and_title_from_the_setting(admin_client, client,
                                                               settings):
    settings.FEEDPUB_ADMIN_TITLE = "Library catalogue"
    index = page(admin_client.get("/admin/"))
    assert index.xpath("normalize-space(//div[@id='site-name'])") == "Library catalogue"
    assert index.xpath("string(//title)").endswith("| Library catalogue")
    login = page(client.get("/admin/login/"))  # the same on every page, logged in or not
    assert login.xpath("normalize-space(//div[@id='site-name'])") == "Library catalogue"


# Choosing a feed


@pytest.fixture
def two_feeds(db):
    return (FeedFactory(slug="nz-theses", title="Theses of New Zealand"),
            FeedFactory(slug="maps", title="Historic maps"))


def test_the_record_forms_feed_select_shows_titles_and_slugs(admin_client, two_feeds):
    form = page(admin_client.get("/admin/archives/record/add/"))
    # (The empty choice's label is Django's own, and differs between releases.)
    options = [text.strip() for text in
               form.xpath("//select[@name='feed']/option[@value!='']/text()")]
    assert options == ["Historic maps (maps)", "Theses of New Zealand (nz-theses)"]


@pytest.mark.parametrize("model", ["record", "entry", "archivepage"])
def test_the_lists_feed_filters_show_titles(admin_client, two_feeds, model):
    listing = page(admin_client.get(f"/admin/archives/{model}/"))
    choices = [" ".join(text.split()) for text in listing.xpath(
        "//details[@data-filter-title='feed']//li/a/text()")]
    assert choices == ["All", "Historic maps (maps)", "Theses of New Zealand (nz-theses)"]


def test_the_record_list_links_each_live_records_page(admin_client, feed):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    publishing.put_record(feed=feed, key="k2", data=record_data(2))
    publishing.delete_record(feed=feed, key="k2")
    listing = page(admin_client.get("/admin/archives/record/"))

    live, gone = (listing.xpath(f"//tr[.//a[normalize-space()='{key}']]")[0]
                  for key in ("k1", "k2"))
    (link,) = live.xpath(".//a[normalize-space()='page']/@href")
    assert link == "http://127.0.0.1:8000/feeds/books/records/k1?format=html"
    assert "Record 1" in page(admin_client.get(link.removeprefix("http://127.0.0.1:8000")))\
        .xpath("string(//h1)")
    assert gone.xpath(".//a[normalize-space()='page']") == []  # its URL is a 410
    assert gone.xpath(".//a[normalize-space()='gone (410)']")


# The producers group


def test_the_producers_group_has_exactly_what_a_producer_needs(db):
    codenames = set(Group.objects.get(name="producers").permissions.values_list(
        "codename", flat=True))
    assert codenames == {"add_record", "change_record", "delete_record", "view_record",
                         "view_feed", "view_entry", "view_archivepage"}


def test_a_producer_puts_and_deletes_records_through_the_api(token_client, feed):
    url = "/api/feeds/books/records/moby-dick"
    created = token_client.put(url, {"title": "Moby-Dick"}, format="json")
    replaced = token_client.put(url, {"title": "Moby Dick"}, format="json")
    batch = token_client.post("/api/feeds/books/batch", {"operations": [
        {"op": "put", "key": "ulysses", "record": {"title": "Ulysses"}}]}, format="json")
    deleted = token_client.delete(url)

    assert [created.status_code, replaced.status_code, batch.status_code,
            deleted.status_code] == [201, 200, 200, 204]
    assert Record.objects.get(feed=feed, key="moby-dick").is_deleted
    assert not Record.objects.get(feed=feed, key="ulysses").is_deleted


def test_a_producer_cannot_create_change_or_delete_feeds_through_the_api(token_client, feed):
    created = token_client.post("/api/feeds/", {"slug": "mine", "title": "Mine"},
                                format="json")
    changed = token_client.patch("/api/feeds/books/", {"title": "Renamed"}, format="json")
    schema = token_client.patch("/api/feeds/books/", {"record_schema": {"type": "object"}},
                                format="json")
    deleted = token_client.delete("/api/feeds/books/")

    assert [created.status_code, changed.status_code, schema.status_code,
            deleted.status_code] == [403, 403, 403, 403]
    assert Feed.objects.get(pk=feed.pk).title == "Books"
    assert not Feed.objects.filter(slug="mine").exists()


def test_a_producer_edits_records_in_the_admin(client, producer, feed):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    record = Record.objects.get(feed=feed, key="k1")
    client.force_login(producer)
    body = {"title": "Edited", "summary": "", "metadata": json.dumps({}), "links": "[]"}

    edited = client.post(f"/admin/archives/record/{record.pk}/change/", body)
    added = client.post("/admin/archives/record/add/",
                        {"feed": feed.pk, "key": "k2", **body, "title": "Added"})

    assert [edited.status_code, added.status_code] == [302, 302]
    assert Record.objects.get(pk=record.pk).title == "Edited"
    assert Record.objects.get(feed=feed, key="k2").title == "Added"


def test_a_producer_sees_feeds_in_the_admin_but_cannot_change_them(client, producer, feed):
    client.force_login(producer)
    url = f"/admin/archives/feed/{feed.pk}/change/"
    shown = page(client.get(url))

    assert shown.xpath("//input[@name='title']") == []  # read-only
    refused = client.post(url, {"slug": "books", "title": "Renamed", "page_size": 3,
                                "language": "en"})
    assert refused.status_code == 403
    assert client.get("/admin/archives/feed/add/").status_code == 403
    assert Feed.objects.get(pk=feed.pk).title == "Books"


def test_a_producer_reads_a_schema_feeds_schema_on_its_feed_page(client, producer, db):
    schema = {"type": "object", "properties": {"year": {"type": "integer", "title": "Year"}}}
    papers = publishing.create_feed(slug="papers", title="Papers", record_schema=schema)
    plain = FeedFactory(slug="plain", title="Plain")
    client.force_login(producer)

    shown = page(client.get(f"/admin/archives/feed/{papers.pk}/change/"))
    [row] = shown.xpath("//div[contains(@class, 'field-record_schema')]")
    assert row.xpath(".//a/@href") == [urls.schema_url("papers", 1)]
    assert " ".join(row.xpath("string(.//a)").split()) == "Version 1"
    assert json.loads(row.xpath("string(.//pre)")) == schema

    shown = page(client.get(f"/admin/archives/feed/{plain.pk}/change/"))
    assert " ".join(shown.xpath("string(//div[contains(@class, 'field-record_schema')]"
                                "//div[@class='readonly'])").split()) == (
        "None: the feed's records are free JSON objects.")


def test_the_producers_group_goes_with_its_migration_and_comes_back(transactional_db):
    graph = MigrationLoader(None).graph
    (name,) = [name for app, name in graph.nodes
               if app == "archives" and name.endswith("_producers_group")]
    (before,) = [parent for app, parent in graph.node_map["archives", name].parents
                 if app == "archives"]
    call_command("migrate", "archives", before, verbosity=0)
    assert not Group.objects.filter(name="producers").exists()
    call_command("migrate", "archives", verbosity=0)
    assert Group.objects.get(name="producers").permissions.count() == 7
