"""The admin: staff change feeds and records through the write path, one entry per change."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from lxml import html

from archives.documents.records import record_json
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import FeedFactory, RecordFactory, record_data


def kinds(feed) -> list[str]:
    return list(Entry.objects.filter(feed=feed).order_by("seq").values_list("kind", flat=True))


def form_body(data: dict) -> dict:
    """A record as the admin's change form posts it (JSON fields as text)."""
    return {"title": data["title"], "summary": data.get("summary", ""),
            "metadata": json.dumps(data.get("metadata", {})),
            "links": json.dumps(data.get("links", []))}


def page(response):
    assert response.status_code == 200
    return html.fromstring(response.content)


def errors_of(response) -> str:
    return " ".join(page(response).xpath("//ul[contains(@class, 'errorlist')]//text()"))


@pytest.fixture
def record(feed):
    return RecordFactory(feed=feed, key="k1", data=record_data(1))


def change_url(record: Record) -> str:
    return f"/admin/archives/record/{record.pk}/change/"


# Records


def test_saving_a_changed_record_appends_exactly_one_entry(admin_client, record):
    response = admin_client.post(change_url(record),
                                 form_body(record_data(1, title="Edited")))

    assert response.status_code == 302
    assert kinds(record.feed) == ["create", "update"]
    assert Record.objects.get(pk=record.pk).title == "Edited"


def test_saving_an_unchanged_record_appends_nothing(admin_client, record):
    response = admin_client.post(change_url(record), form_body(record_data(1)))

    assert response.status_code == 302
    assert kinds(record.feed) == ["create"]


def test_adding_a_record_appends_one_create_entry(admin_client, feed):
    body = {"feed": feed.pk, "key": "new-1", **form_body(record_data(7))}

    response = admin_client.post("/admin/archives/record/add/", body)

    assert response.status_code == 302
    assert kinds(feed) == ["create"]
    assert record_json(Record.objects.get(key="new-1"))["links"] == record_data(7)["links"]


@pytest.mark.parametrize(("change", "why"), [
    ({"links": json.dumps([{"href": "/relative"}])}, "absolute"),
    ({"metadata": "[1, 2]"}, "JSON object"),
    ({"summary": "tab \x0b inside"}, "not allowed in XML"),
    ({"links": json.dumps([{"href": "https://x.org/", "type": "html"}])}, "media type"),
])
def test_the_admin_refuses_what_the_api_refuses(admin_client, record, change, why):
    response = admin_client.post(change_url(record), {**form_body(record_data(1)), **change})

    assert why in errors_of(response)
    assert kinds(record.feed) == ["create"]


def test_a_new_record_needs_a_url_safe_key(admin_client, feed):
    body = {"feed": feed.pk, "key": "not safe", **form_body(record_data(1))}

    response = admin_client.post("/admin/archives/record/add/", body)

    assert "URL-safe" in errors_of(response)
    assert not Record.objects.exists()


def test_deleting_a_record_appends_one_deletion_entry_and_keeps_the_row(admin_client, record):
    confirm = admin_client.get(f"/admin/archives/record/{record.pk}/delete/")
    response = admin_client.post(f"/admin/archives/record/{record.pk}/delete/", {"post": "yes"})

    assert confirm.status_code == 200
    assert b"protected" not in confirm.content.lower()
    assert response.status_code == 302
    assert kinds(record.feed) == ["create", "delete"]
    assert Record.objects.get(pk=record.pk).is_deleted


def test_deleting_a_record_returns_to_its_feeds_records(admin_client, record):
    other = FeedFactory(slug="other", title="Other")
    RecordFactory(feed=other, key="elsewhere", data=record_data(2))

    response = admin_client.post(f"/admin/archives/record/{record.pk}/delete/", {"post": "yes"},
                                 follow=True)

    assert response.redirect_chain[-1][0] == (
        f"/admin/archives/record/?feed__id__exact={record.feed_id}")
    listed = page(response).xpath("//table[@id='result_list']//th/a/span/text()")
    assert listed == ["k1"]  # the feed's (deleted, still listed), not the other feed's


def test_deleting_a_record_from_a_filtered_list_returns_to_that_list(admin_client, record):
    filters = f"feed__id__exact={record.feed_id}&state=live"
    url = (f"/admin/archives/record/{record.pk}/delete/?"
           f"{urlencode({'_changelist_filters': filters})}")

    response = admin_client.post(url, {"post": "yes"})

    assert response["Location"] == f"/admin/archives/record/?{filters}"


def test_the_bulk_delete_action_appends_one_entry_per_record(admin_client, feed):
    records = [RecordFactory(feed=feed, key=f"k{n}") for n in range(3)]

    response = admin_client.post("/admin/archives/record/", {
        "action": "delete_selected", "post": "yes",
        "_selected_action": [r.pk for r in records]})

    assert response.status_code == 302
    assert kinds(feed) == ["create"] * 3 + ["delete"] * 3
    assert Record.objects.filter(deleted_at__isnull=False).count() == 3


def test_deleted_records_can_be_found_and_restored(admin_client, feed):
    RecordFactory(feed=feed, key="live")
    gone = RecordFactory(feed=feed, key="gone", data=record_data(2))
    publishing.delete_record(feed=feed, key="gone")

    listed = page(admin_client.get("/admin/archives/record/?state=deleted"))
    response = admin_client.post("/admin/archives/record/", {
        "action": "restore", "_selected_action": [gone.pk]})

    assert [a.text_content() for a in listed.xpath(
        "//th[contains(@class, 'field-short_key')]/a")] == ["gone"]
    assert response.status_code == 302
    assert kinds(feed)[-1] == "create"
    restored = Record.objects.get(pk=gone.pk)
    assert not restored.is_deleted
    assert record_json(restored)["metadata"] == record_data(2)["metadata"]


def test_records_are_searched_by_key_and_title(admin_client, feed):
    RecordFactory(feed=feed, key="alpha", data=record_data(1, title="Moby Dick"))
    RecordFactory(feed=feed, key="beta", data=record_data(2, title="Ulysses"))

    def found(query):
        doc = page(admin_client.get(f"/admin/archives/record/?q={query}"))
        return [a.text_content() for a in doc.xpath(
            "//th[contains(@class, 'field-short_key')]/a")]

    assert found("alpha") == ["alpha"]
    assert found("ulysses") == ["beta"]


# Feeds


def test_the_feed_list_shows_counts_and_the_subscription_link(admin_client, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(4)])
    publishing.delete_record(feed=feed, key="k0")
    seal_feed(feed)

    row = page(admin_client.get("/admin/archives/feed/")).xpath("//tr[.//a[.='books']]")[0]

    def cell(name):
        return row.xpath(f"string(.//td[contains(@class, 'field-{name}')])")

    # Records counts the live ones; the deleted one is shown apart.
    assert (cell("record_count"), cell("deleted_count"), cell("entry_count"),
            cell("page_count")) == ("3", "1", "5", "1")
    assert row.xpath(".//td[contains(@class, 'field-subscription')]/a/@href") == [
        "http://127.0.0.1:8000/feeds/books/"]


def test_adding_a_feed_goes_through_the_write_path_rules(admin_client, db):
    good = admin_client.post("/admin/archives/feed/add/", {
        "slug": "films", "title": "Films", "subtitle": "", "author": "me", "language": "en",
        "page_size": 10})
    bad = admin_client.post("/admin/archives/feed/add/", {
        "slug": "songs", "title": "bad \x0b inside", "subtitle": "", "author": "me",
        "language": "en", "page_size": 10})

    assert good.status_code == 302
    assert Feed.objects.get(slug="films").page_size == 10
    assert "not allowed in XML" in errors_of(bad)
    assert not Feed.objects.filter(slug="songs").exists()


def test_a_sealed_feed_keeps_its_slug_and_page_size(admin_client, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(3)])
    seal_feed(feed)

    response = admin_client.post(f"/admin/archives/feed/{feed.pk}/change/", {
        "slug": "renamed", "title": "New title", "subtitle": "", "author": "me",
        "language": "en", "page_size": 50})

    assert response.status_code == 302
    feed.refresh_from_db()
    assert (feed.slug, feed.page_size, feed.title) == ("books", 3, "New title")
    delete = admin_client.get(f"/admin/archives/feed/{feed.pk}/delete/")
    assert delete.status_code == 403


def test_a_feed_without_entries_can_be_deleted(admin_client, feed):
    response = admin_client.post(f"/admin/archives/feed/{feed.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Feed.objects.exists()


def test_the_seal_action_seals_full_pages_now(admin_client, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(7)])

    response = admin_client.post("/admin/archives/feed/", {
        "action": "seal_now", "_selected_action": [feed.pk]}, follow=True)

    assert response.status_code == 200
    assert b"Sealed 2 pages" in response.content
    assert list(ArchivePage.objects.values_list("number", flat=True)) == [1, 2]


# Entries and pages


def test_entries_and_pages_are_read_only_lists_linking_to_their_documents(admin_client, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(4)])
    seal_feed(feed)
    page_pk = ArchivePage.objects.get().pk
    entry_pk = Entry.objects.get(seq=1).pk

    entry_links = page(admin_client.get("/admin/archives/entry/")).xpath(
        "//td[contains(@class, 'field-document')]/a/@href")
    page_links = page(admin_client.get("/admin/archives/archivepage/")).xpath(
        "//td[contains(@class, 'field-document')]/a/@href")

    assert sorted(entry_links) == sorted(
        ["http://127.0.0.1:8000/feeds/books/archives/1/"] * 3
        + ["http://127.0.0.1:8000/feeds/books/"])
    assert page_links == ["http://127.0.0.1:8000/feeds/books/archives/1/"]
    assert admin_client.get("/admin/archives/entry/add/").status_code == 403
    assert admin_client.post(f"/admin/archives/entry/{entry_pk}/delete/",
                             {"post": "yes"}).status_code == 403
    assert admin_client.post(f"/admin/archives/archivepage/{page_pk}/delete/",
                             {"post": "yes"}).status_code == 403
    assert Entry.objects.count() == 4


def test_the_admin_is_for_staff_only(client, record):
    client.force_login(User.objects.create_user("producer", is_staff=False))

    response = client.get("/admin/archives/record/")

    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.parametrize(("change", "why"), [
    ({"metadata": '{"year": 1851, "year": 1852}'},
     'JSON refused: at year: the name "year" appears twice in one object'),
    ({"links": '[{"href": "https://x.org/", "href": "https://y.org/"}]'},
     'JSON refused: at [0].href: the name "href" appears twice in one object'),
    ({"metadata": '{"x": 1e-400}'},
     "JSON refused: at x: the number 1e-400 cannot be stored exactly"),
    ({"metadata": '{"x": -0.0}'}, "JSON refused: at x: the number -0.0 is a negative zero"),
])
def test_the_admin_reads_json_as_strictly_as_the_api(admin_client, record, change, why):
    response = admin_client.post(change_url(record), {**form_body(record_data(1)), **change})

    assert why in errors_of(response)
    # The box shows what was typed, not what a lenient reading made of it.
    [name] = change
    assert page(response).xpath(f"//textarea[@name='{name}']/text()")[0].strip() == change[name]
    assert kinds(record.feed) == ["create"]
