"""The admin by role: a feed's producers see and write its records only, its maintainers change
it and its members; every write names who made it and why; a record's page shows its history,
what each version changed, and restores a version through the write path."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from lxml import html

from archives.admin.history import changes
from archives.log import publishing
from archives.log.access import Actor
from archives.models import Entry, Feed, FeedRole, Record

from .factories import FeedFactory, RecordFactory, record_data


def page(response):
    assert response.status_code == 200, response.status_code
    return html.fromstring(response.content)


def text(node) -> str:
    return " ".join(node.text_content().split())


def form_body(data: dict, **extra) -> dict:
    return {"title": data["title"], "summary": data.get("summary", ""),
            "metadata": json.dumps(data.get("metadata", {})),
            "links": json.dumps(data.get("links", [])), **extra}


def staff(name: str) -> User:
    return User.objects.create_user(name, f"{name}@example.org", "a long passphrase 1",
                                    is_staff=True)


@pytest.fixture
def theses(db) -> Feed:
    return FeedFactory(slug="theses", title="Theses")


@pytest.fixture
def maps(db) -> Feed:
    return FeedFactory(slug="maps", title="Historic maps")


@pytest.fixture
def producer(theses) -> User:
    """Staff, producer of `theses` only, with no global permission."""
    user = staff("pat")
    FeedRole.objects.create(feed=theses, user=user, role=FeedRole.Role.PRODUCER)
    return user


@pytest.fixture
def maintainer(theses) -> User:
    user = staff("max")
    FeedRole.objects.create(feed=theses, user=user, role=FeedRole.Role.MAINTAINER)
    return user


@pytest.fixture
def thesis(theses) -> Record:
    return RecordFactory(feed=theses, key="t1", data=record_data(1))


@pytest.fixture
def chart(maps) -> Record:
    return RecordFactory(feed=maps, key="m1", data=record_data(2))


def change_url(record: Record) -> str:
    return f"/admin/archives/record/{record.pk}/change/"


def feed_choices(doc) -> list[str]:
    return [value for value in doc.xpath("//select[@name='feed']/option/@value") if value]


def filter_feeds(doc) -> list[str]:
    """The feeds the "By feed" filter offers (their labels)."""
    return [text(a) for a in doc.xpath(
        "//details[@data-filter-title='feed']//li/a")][1:]  # (the first: "All")


# A producer


def test_a_producer_sees_the_archives_app_in_the_admin_index(client, producer):
    client.force_login(producer)
    index = page(client.get("/admin/"))
    assert index.xpath("//a[@href='/admin/archives/record/']")
    assert index.xpath("//a[@href='/admin/archives/record/add/']")


def test_a_producer_lists_chooses_and_filters_only_its_feeds(client, producer, thesis, chart):
    letters = FeedFactory(slug="letters", title="Letters")  # (a filter of one choice is hidden)
    FeedRole.objects.create(feed=letters, user=producer)
    client.force_login(producer)

    listed = page(client.get("/admin/archives/record/"))
    added = page(client.get("/admin/archives/record/add/"))
    entries = page(client.get("/admin/archives/entry/"))

    assert listed.xpath("//th[@class='field-short_key']//text()") == ["t1"]
    assert feed_choices(added) == [str(letters.pk), str(thesis.feed_id)]
    assert filter_feeds(listed) == ["Letters (letters)", "Theses (theses)"]
    assert filter_feeds(entries) == ["Letters (letters)", "Theses (theses)"]
    assert listed.xpath("//select[@name='action']/option/@value")[1:] == [
        "restore", "delete_selected"]


def test_a_producer_writes_its_feeds_records(client, producer, thesis, theses):
    client.force_login(producer)

    edited = client.post(change_url(thesis), form_body(record_data(1, title="Edited")))
    added = client.post("/admin/archives/record/add/",
                        {"feed": theses.pk, "key": "t2", **form_body(record_data(3))})

    assert [edited.status_code, added.status_code] == [302, 302]
    assert Record.objects.get(pk=thesis.pk).title == "Edited"
    assert Entry.objects.filter(feed=theses).latest("seq").username == "pat"


def test_a_producer_cannot_see_or_write_another_feeds_records(client, producer, chart, maps):
    client.force_login(producer)

    assert client.get(change_url(chart)).status_code == 403
    assert client.post(change_url(chart),
                       form_body(record_data(2, title="Edited"))).status_code == 403
    assert client.post(f"/admin/archives/record/{chart.pk}/delete/",
                       {"post": "yes"}).status_code == 403
    added = client.post("/admin/archives/record/add/",
                        {"feed": maps.pk, "key": "m2", **form_body(record_data(3))})
    assert "Select a valid choice" in added.content.decode()
    assert Entry.objects.filter(feed=maps).count() == 1
    assert Record.objects.get(pk=chart.pk).title == chart.title


def test_a_producer_cannot_bulk_delete_another_feeds_records(client, producer, chart):
    client.force_login(producer)
    client.post("/admin/archives/record/", {"action": "delete_selected",
                                            "_selected_action": [chart.pk], "post": "yes"})
    assert not Record.objects.get(pk=chart.pk).is_deleted


def test_a_producer_sees_its_feed_but_cannot_change_it(client, producer, theses):
    client.force_login(producer)
    url = f"/admin/archives/feed/{theses.pk}/change/"

    shown = page(client.get(url))
    refused = client.post(url, {"slug": "theses", "title": "Renamed", "page_size": 3,
                                "language": "en", "author": ""})

    assert shown.xpath("//input[@name='title']") == []
    assert shown.xpath("//select[starts-with(@name, 'roles-')]") == []  # members: read-only
    assert refused.status_code == 403
    assert Feed.objects.get(pk=theses.pk).title == "Theses"
    listed = page(client.get("/admin/archives/feed/"))
    assert listed.xpath("//select[@name='action']") == []  # no action to take
    assert listed.xpath("//a[@href='/admin/archives/feed/add/']") == []


# A maintainer


def member_forms(*rows: dict, initial: int = 0) -> dict:
    body = {"roles-TOTAL_FORMS": str(len(rows)), "roles-INITIAL_FORMS": str(initial),
            "roles-MIN_NUM_FORMS": "0", "roles-MAX_NUM_FORMS": "1000"}
    for index, row in enumerate(rows):
        body.update({f"roles-{index}-{name}": value for name, value in row.items()})
    return body


def feed_settings(feed: Feed, **changes) -> dict:
    return {"slug": feed.slug, "title": feed.title, "subtitle": "", "author": feed.author,
            "language": feed.language, "page_size": feed.page_size, "record_schema": "",
            **changes}


def test_a_maintainer_sees_the_feeds_members_on_its_page(client, maintainer, theses):
    colleague = staff("kim")
    FeedRole.objects.create(feed=theses, user=colleague, role="producer")
    client.force_login(maintainer)

    page = html.fromstring(client.get(f"/admin/archives/feed/{theses.pk}/change/").content)

    chosen = page.xpath('//select[starts-with(@name, "roles-") and '
                        'substring(@name, string-length(@name) - 4) = "-user"]'
                        '/option[@selected and @value != ""]/text()')  # (not the empty forms)
    assert sorted(chosen) == ["kim", "max"]


def test_a_maintainer_changes_its_feed_and_members(client, maintainer, theses):
    colleague = staff("kim")
    client.force_login(maintainer)
    mine = FeedRole.objects.get(user=maintainer)

    response = client.post(f"/admin/archives/feed/{theses.pk}/change/", {
        **feed_settings(theses, title="Theses and dissertations"),
        **member_forms({"id": mine.pk, "feed": theses.pk, "user": maintainer.pk,
                        "role": "maintainer"},
                       {"feed": theses.pk, "user": colleague.pk, "role": "producer"},
                       initial=1)})

    assert response.status_code == 302
    assert Feed.objects.get(pk=theses.pk).title == "Theses and dissertations"
    assert FeedRole.objects.get(feed=theses, user=colleague).role == "producer"


def test_a_member_given_twice_or_as_nobody_is_refused_on_the_form(client, maintainer,
                                                                  theses):
    colleague = staff("kim")
    client.force_login(maintainer)
    mine = FeedRole.objects.get(user=maintainer)
    url = f"/admin/archives/feed/{theses.pk}/change/"
    own = {"id": mine.pk, "feed": theses.pk, "user": maintainer.pk, "role": "maintainer"}

    twice = client.post(url, {**feed_settings(theses), **member_forms(
        own, {"feed": theses.pk, "user": colleague.pk, "role": "producer"},
        {"feed": theses.pk, "user": colleague.pk, "role": "maintainer"}, initial=1)})
    nobody = client.post(url, {**feed_settings(theses), **member_forms(
        own, {"feed": theses.pk, "role": "maintainer"}, initial=1)})

    assert "kim is given a role twice" in page(twice).text_content()
    assert "Give the role to a user or to a group" in page(nobody).text_content()
    assert FeedRole.objects.filter(feed=theses).count() == 1


def test_a_maintainer_cannot_change_another_feed(client, maintainer, maps):
    client.force_login(maintainer)
    url = f"/admin/archives/feed/{maps.pk}/change/"

    assert client.get(url).status_code == 403
    assert client.post(url, feed_settings(maps, title="Mine now")).status_code == 403
    assert Feed.objects.get(pk=maps.pk).title == "Historic maps"
    listed = page(client.get("/admin/archives/feed/"))
    assert listed.xpath("//th[@class='field-short_slug']//text()") == ["theses"]


# The global permissions, as before


def test_the_producers_group_still_writes_every_feed(client, thesis, chart):
    user = staff("gus")
    user.groups.add(Group.objects.get(name="producers"))
    client.force_login(user)

    listed = page(client.get("/admin/archives/record/"))
    edited = client.post(change_url(chart), form_body(record_data(2, title="Edited")))

    assert sorted(listed.xpath("//th[@class='field-short_key']//text()")) == ["m1", "t1"]
    assert edited.status_code == 302
    assert Record.objects.get(pk=chart.pk).title == "Edited"
    assert client.get(f"/admin/archives/feed/{chart.feed_id}/change/").status_code == 200
    assert client.post(f"/admin/archives/feed/{chart.feed_id}/change/",
                       feed_settings(chart.feed, title="X")).status_code == 403


def test_a_superuser_sees_and_changes_every_feed(admin_client, thesis, chart, maps):
    added = page(admin_client.get("/admin/archives/record/add/"))
    assert sorted(feed_choices(added)) == sorted([str(thesis.feed_id), str(maps.pk)])
    shown = page(admin_client.get(f"/admin/archives/feed/{maps.pk}/change/"))
    assert shown.xpath("//input[@name='roles-TOTAL_FORMS']")
    changed = admin_client.post(f"/admin/archives/feed/{maps.pk}/change/",
                                feed_settings(maps, title="Maps"))
    assert changed.status_code == 302


# Who, and why


def test_the_note_reaches_the_entry_of_a_save(client, producer, thesis):
    client.force_login(producer)
    client.post(change_url(thesis), form_body(record_data(1, title="Edited"),
                                              note="Typo in the title"))
    entry = Entry.objects.filter(record=thesis).latest("seq")
    assert (entry.username, entry.via, entry.note) == ("pat", "admin", "Typo in the title")


def test_a_bad_note_is_a_form_error_and_nothing_is_written(client, producer, thesis):
    client.force_login(producer)
    response = client.post(change_url(thesis), form_body(record_data(1, title="Edited"),
                                                         note="x" * 501))
    assert "At most 500 characters" in page(response).text_content()
    assert Entry.objects.filter(record=thesis).count() == 1


def test_the_note_reaches_the_entry_of_a_deletion(client, producer, thesis):
    client.force_login(producer)
    confirm = page(client.get(f"/admin/archives/record/{thesis.pk}/delete/"))
    assert confirm.xpath("//textarea[@name='note']")

    client.post(f"/admin/archives/record/{thesis.pk}/delete/",
                {"post": "yes", "note": "Withdrawn by its author"})

    entry = Entry.objects.filter(record=thesis).latest("seq")
    assert (entry.kind, entry.username, entry.note) == ("delete", "pat",
                                                        "Withdrawn by its author")


def test_a_bad_deletion_note_shows_the_page_again_and_deletes_nothing(client, producer,
                                                                       thesis):
    client.force_login(producer)
    response = client.post(f"/admin/archives/record/{thesis.pk}/delete/",
                           {"post": "yes", "note": "bad \x0b note"})
    doc = page(response)
    assert doc.xpath("//div[@class='deletion-note']//ul[@class='errorlist']/li")
    assert not Record.objects.get(pk=thesis.pk).is_deleted


def test_the_note_reaches_the_entries_of_a_bulk_deletion(client, producer, thesis, theses):
    other = RecordFactory(feed=theses, key="t2", data=record_data(2))
    client.force_login(producer)
    body = {"action": "delete_selected", "_selected_action": [thesis.pk, other.pk]}
    confirm = page(client.post("/admin/archives/record/", body))
    assert confirm.xpath("//textarea[@name='note']")

    client.post("/admin/archives/record/", {**body, "post": "yes", "note": "Duplicates"})

    deletions = Entry.objects.filter(feed=theses, kind="delete")
    assert sorted(deletions.values_list("note", "username")) == [("Duplicates", "pat")] * 2


# History


def history_rows(doc) -> list:
    return doc.xpath("//div[@id='history']//tr[contains(@class, 'history-entry')]")


def test_the_history_shows_what_changed_and_who(client, producer, theses):
    publishing.put_record(feed=theses, key="b", data=record_data(
        1, metadata={"creators": ["Ada"], "year": 1843}))  # unknown actor
    record = Record.objects.get(feed=theses, key="b")
    client.force_login(producer)
    client.post(change_url(record), form_body(record_data(
        1, metadata={"creators": ["Ada Lovelace"], "year": 1843}), note="Full name"))

    rows = history_rows(page(client.get(change_url(record))))

    newest, oldest = rows
    assert text(newest.xpath(".//td[@class='history-actor']")[0]) == "pat"
    assert text(newest.xpath(".//td[@class='history-note']")[0]) == "Full name"
    [change] = newest.xpath(".//td[@class='history-changes']//li")
    assert change.get("data-name") == "metadata/creators/0"
    assert change.xpath("string(.//del)") == '"Ada"'  # (as JSON: "1843" and 1843 differ)
    assert change.xpath("string(.//ins)") == '"Ada Lovelace"'
    assert text(oldest.xpath(".//td[@class='history-actor']")[0]) == "unknown actor"


def test_the_history_is_paged(admin_client, theses):
    for n in range(25):
        publishing.put_record(feed=theses, key="busy", data=record_data(n))
    record = Record.objects.get(feed=theses, key="busy")

    first = page(admin_client.get(change_url(record)))
    second = page(admin_client.get(change_url(record) + "?history=2"))

    assert [row.get("data-seq") for row in history_rows(first)] == [
        str(seq) for seq in range(25, 5, -1)]
    assert [row.get("data-seq") for row in history_rows(second)] == ["5", "4", "3", "2", "1"]
    # The oldest of page 2 is compared with nothing: everything it has is new.
    assert history_rows(second)[-1].xpath(".//li[@data-name='title']")


def test_restoring_a_version_appends_a_put_equal_to_it(client, producer, theses):
    first = publishing.put_record(feed=theses, key="r", data=record_data(1))
    publishing.put_record(feed=theses, key="r", data=record_data(2))
    record = Record.objects.get(feed=theses, key="r")
    client.force_login(producer)
    rows = history_rows(page(client.get(change_url(record))))
    assert rows[0].xpath(".//form") == []  # the version it has now
    assert rows[1].xpath("string(.//form//button)") == "Restore this version"

    response = client.post(f"/admin/archives/record/{record.pk}/restore/{first.seq}/",
                           follow=True)

    newest = Entry.objects.filter(record=record).latest("seq")
    assert (newest.seq, newest.kind, newest.via, newest.username) == (3, "update", "admin",
                                                                      "pat")
    for name in ("title", "summary", "metadata", "links", "language"):
        assert getattr(newest, name) == getattr(first, name), name
    assert "Restored the version of entry 1" in response.content.decode()


def test_restoring_a_version_the_schema_in_force_refuses_writes_nothing(client, producer,
                                                                        theses):
    old = publishing.put_record(feed=theses, key="r", data=record_data(1, metadata={
        "year": "1843"}))
    publishing.put_record(feed=theses, key="r", data=record_data(1, metadata={"year": 1843}))
    publishing.update_feed(feed=theses, record_schema={
        "type": "object", "properties": {"year": {"type": "integer"}}})
    record = Record.objects.get(feed=theses, key="r")
    client.force_login(producer)

    response = client.post(f"/admin/archives/record/{record.pk}/restore/{old.seq}/",
                           follow=True)

    messages = " ".join(page(response).xpath("//ul[@class='messagelist']//text()"))
    assert "was not restored" in messages
    assert "integer" in messages
    assert Entry.objects.filter(record=record).count() == 2


def test_restoring_is_refused_on_another_feed_and_to_a_get(client, producer, chart):
    client.force_login(producer)
    url = f"/admin/archives/record/{chart.pk}/restore/1/"
    assert client.post(url).status_code == 403
    assert client.get(url).status_code == 405
    assert Entry.objects.filter(record=chart).count() == 1


# A user's changes


def test_the_entry_list_shows_a_users_changes_across_feeds(admin_client, thesis, chart):
    kim = staff("kim")
    kim.groups.add(Group.objects.get(name="producers"))
    for record in (thesis, chart):
        publishing.put_record(feed=record.feed, key=record.key,
                              data=record_data(9, title=f"By kim {record.key}"),
                              actor=Actor(via="admin", user=kim))

    listed = page(admin_client.get(f"/admin/archives/entry/?user__id__exact={kim.pk}"))
    searched = page(admin_client.get("/admin/archives/entry/?q=kim"))
    by_via = page(admin_client.get("/admin/archives/entry/?via__exact=admin"))

    for doc in (listed, searched, by_via):
        assert sorted(doc.xpath("//td[@class='field-short_title']//text()")) == [
            "By kim m1", "By kim t1"]
    assert "Changes by kim, across feeds" in listed.text_content()
    # The history links each person to their changes.
    [link] = page(admin_client.get(change_url(thesis))).xpath(
        "//td[@class='history-actor']/a/@href")
    assert link == f"/admin/archives/entry/?user__id__exact={kim.pk}"


def test_a_versions_changes_name_each_metadata_path_added_changed_or_removed():
    before = Entry(title="T", summary="", language="", links=[],
                   metadata={"creators": ["Ada", "Charles"], "a/b": 1, "year": 1843})
    after = Entry(title="T2", summary="", language="", links=[],
                  metadata={"creators": ["Ada"], "a/b": 1, "year": "1843", "place": "London"})

    found = {change.name: (change.old, change.new) for change in changes(before, after)}

    assert found == {"title": ("T", "T2"), "metadata/creators/1": ('"Charles"', None),
                     "metadata/year": ("1843", '"1843"'), "metadata/place": (None, '"London"')}
