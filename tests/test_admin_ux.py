"""The admin as a person meets it: forms that say what they want, objects linked to their
neighbours, actions that say what they did, lists that fit a screen."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import LogEntry
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from lxml import html

from archives import validation
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import RecordFactory, record_data
from .test_admin import change_url, form_body, kinds


def page(response):
    assert response.status_code == 200
    return html.fromstring(response.content.decode())


def errors_of(response) -> str:
    return " ".join(page(response).xpath("//ul[contains(@class, 'errorlist')]//text()"))


def textarea(doc, name: str) -> str:
    # HTML drops a textarea's first newline (Django writes one); lxml keeps it.
    return doc.xpath(f"string(//textarea[@name='{name}'])").removeprefix("\n")


def add_record(client, feed, key="new-1", **changes):
    body = {"feed": feed.pk, "key": key, **form_body(record_data(1)), **changes}
    return client.post("/admin/archives/record/add/", body)


def messages_of(response) -> str:
    return " ".join(page(response).xpath("//ul[contains(@class, 'messagelist')]//text()"))


# 1. Forms that teach


def test_the_worked_examples_are_records_the_rules_accept():
    data = validation.clean_record({"title": "Pride and Prejudice",
                                    "metadata": validation.METADATA_EXAMPLE,
                                    "links": validation.LINKS_EXAMPLE})

    assert validation.clean_key(validation.KEY_EXAMPLE) == validation.KEY_EXAMPLE
    assert len(data.links) == 2


def test_the_links_example_gives_an_entry_one_alternate_of_each_type(client, feed,
                                                                      atom_validators):
    """The example beside the Links box, as a record: its entry must not carry two
    alternate links of one type (RFC 4287 4.1.2) beside those feedpub adds."""
    from feedpub_consumer.atom import repeated_alternates

    publishing.put_record(feed=feed, key="k1", data={"title": "Pride and Prejudice",
                                                     "links": validation.LINKS_EXAMPLE})
    body = client.get(f"/feeds/{feed.slug}/", HTTP_ACCEPT="application/atom+xml").content
    (entry,) = atom_validators(body).iterfind("{http://www.w3.org/2005/Atom}entry")
    links = [dict(link.attrib) for link in entry.iterfind("{http://www.w3.org/2005/Atom}link")]

    assert repeated_alternates(links) == []
    assert len(links) == 2 + len(validation.LINKS_EXAMPLE)


def test_the_admin_refuses_a_second_text_html_alternate_on_the_links_field(admin_client, feed):
    links = [{"href": "https://example.org/books/1", "rel": "alternate", "type": "text/html"}]
    response = add_record(admin_client, feed, links=json.dumps(links))
    doc = page(response)

    errors = doc.xpath("//div[contains(@class, 'field-links')]//ul[@class='errorlist']"
                       "/li/text()")
    assert len(errors) == 1
    assert "feedpub already links the record's page for people" in errors[0]
    assert not Record.objects.exists()


def test_the_record_form_explains_key_metadata_and_links_with_examples(admin_client, feed):
    doc = page(admin_client.get("/admin/archives/record/add/"))

    def help_of(name):
        return doc.xpath(f"string(//div[@id='id_{name}_helptext'])")

    assert "200" in help_of("key")
    assert validation.KEY_EXAMPLE in help_of("key")
    assert "JSON object" in help_of("metadata")
    assert '"year": 1813' in help_of("metadata")
    assert "href" in help_of("links")
    assert "text/html" in help_of("links")
    assert json.loads(doc.xpath("string(//div[@id='id_links_helptext']//pre)")) == (
        validation.LINKS_EXAMPLE)


def test_json_fields_are_shown_indented(admin_client, feed):
    record = RecordFactory(feed=feed, key="k1", data=record_data(1, metadata={"a": {"b": 1}}))

    doc = page(admin_client.get(change_url(record)))

    assert textarea(doc, "metadata") == '{\n  "a": {\n    "b": 1\n  }\n}'


def test_invalid_json_is_reported_with_line_and_column(admin_client, feed):
    response = add_record(admin_client, feed, metadata='{\n  "year": 1813\n  "x": 1\n}')

    assert "Invalid JSON at line 3, column 3" in errors_of(response)
    # What the person typed comes back as typed, to be fixed.
    assert textarea(page(response), "metadata").startswith('{\n  "year": 1813\n  "x"')
    assert not Record.objects.exists()


def test_a_control_character_is_placed_counting_from_1(admin_client, feed):
    response = add_record(admin_client, feed, summary="tab \x0b inside")

    assert "Character U+000B at position 5 is not allowed in XML." in errors_of(response)


def test_a_key_too_long_gets_one_message_from_the_server(admin_client, feed):
    form = page(admin_client.get("/admin/archives/record/add/"))
    response = add_record(admin_client, feed, key="k" * 201)

    assert form.xpath("//input[@name='key']/@maxlength") == []
    assert errors_of(response).strip() == "A key has at most 200 characters (it has 201)."
    assert not Record.objects.exists()


def test_a_control_character_in_json_is_reported_with_what_to_write(admin_client, feed):
    response = add_record(admin_client, feed, metadata='{"a": "x\ty"}')

    assert errors_of(response).strip() == (
        "Invalid JSON at line 1, column 9: a control character inside a string: write it "
        "as \\uXXXX (tab: \\t, newline: \\n).")


def test_an_empty_metadata_box_means_an_empty_object_as_links_means_no_links(
        admin_client, feed):
    record = RecordFactory(feed=feed, key="k1", data=record_data(
        1, metadata={"year": 1813}, links=[{"href": "https://example.org/k1"}]))

    response = admin_client.post(change_url(record), {
        **form_body(record_data(1)), "metadata": "", "links": " "}, follow=True)

    assert "changed successfully" in messages_of(response)
    record.refresh_from_db()
    assert (record.metadata, record.links) == ({}, [])


def test_a_feed_form_leaves_lengths_to_the_server_with_one_message_each(admin_client, db):
    form = page(admin_client.get("/admin/archives/feed/add/"))
    response = admin_client.post("/admin/archives/feed/add/", {
        "slug": "s" * 101, "title": "t" * 301, "subtitle": "", "author": "a" * 301,
        "language": "en", "page_size": 3})
    doc = page(response)

    def errors(name):
        return doc.xpath(f"//div[contains(@class, 'field-{name}')]//ul[@class='errorlist']"
                         "/li/text()")

    assert form.xpath("//input/@maxlength") == []
    assert errors("slug") == ["At most 100 characters (this has 101)."]
    assert errors("title") == ["At most 300 characters (this has 301)."]
    assert errors("author") == ["At most 300 characters (this has 301)."]
    assert not Feed.objects.exists()


def test_the_help_texts_say_what_the_rules_check():
    for char, name in (("\t", "tab"), ("\n", "newline"), ("\r", "carriage return")):
        validation.clean_record({"title": "t", "metadata": {f"a{char}b": f"c{char}d"}})
        assert name in validation.METADATA_HELP
    with pytest.raises(ValidationError):
        validation.clean_record({"title": "t", "metadata": {"a\x01": "b"}})
    assert "keys included" in validation.METADATA_HELP
    with pytest.raises(ValidationError):
        validation.clean_key("caf\u00e9")
    assert "ASCII letters" in validation.KEY_HELP


# 2. An admin that links itself together


@pytest.fixture
def busy(feed):
    """books (page size 3): 8 records, one deleted, 2 pages sealed, 1 full page not yet."""
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(8)])
    publishing.delete_record(feed=feed, key="k0")
    seal_feed(feed, max_pages=2)
    feed.refresh_from_db()
    return feed


def test_the_feed_page_links_its_counts_and_documents(admin_client, busy):
    doc = page(admin_client.get(f"/admin/archives/feed/{busy.pk}/change/"))
    links = {a.text_content(): a.get("href") for a in doc.xpath("//ul[@class='feed-contents']//a")}
    documents = {a.text_content(): a.get("href")
                 for a in doc.xpath("//div[contains(@class, 'field-contents')]//a")}

    assert set(links) == {"7 live records", "1 deleted record", "9 entries",
                          "2 sealed pages", "1 full page not yet sealed"}
    live = page(admin_client.get(links["7 live records"]))
    assert len(live.xpath("//th[contains(@class, 'field-short_key')]")) == 7
    entries = page(admin_client.get(links["9 entries"]))
    assert len(entries.xpath("//td[contains(@class, 'field-kind')]")) == 9
    backlog = page(admin_client.get(links["1 full page not yet sealed"]))
    assert sorted(int(t) for t in backlog.xpath("//th[contains(@class, 'field-seq')]//text()")
                  ) == [7, 8, 9]
    pages = page(admin_client.get(links["2 sealed pages"]))
    assert len(pages.xpath("//td[contains(@class, 'field-document')]")) == 2
    base = "http://127.0.0.1:8000/feeds/books/"
    assert documents["subscription document (Atom)"] == base
    assert documents["its page for people"] == base + "?format=html"
    assert documents["activity chart"] == base + "activity.svg"


def test_the_feed_page_counts_the_records_once(admin_client, busy):
    with CaptureQueriesContext(connection) as queries:
        page(admin_client.get(f"/admin/archives/feed/{busy.pk}/change/"))

    assert sum('"archives_record"' in query["sql"] for query in queries) == 1


def test_object_names_use_the_feed_slug(busy):
    entry = Entry.objects.get(feed=busy, seq=9)

    assert str(Record.objects.get(key="k1")) == "books / k1"
    assert str(entry) == "books #9 delete"
    assert str(ArchivePage.objects.get(number=2)) == "books page 2"


def test_saving_an_unchanged_record_says_nothing_was_appended(admin_client, feed):
    record = RecordFactory(feed=feed, key="k1", data=record_data(1))

    response = admin_client.post(change_url(record), form_body(record_data(1)), follow=True)

    assert "Nothing changed in books / k1: no entry was appended." in messages_of(response)
    assert "changed successfully" not in messages_of(response)
    assert not LogEntry.objects.exists()  # the record's admin history: nothing happened


def test_save_and_add_another_on_an_unchanged_record_goes_to_the_add_form(admin_client, feed):
    record = RecordFactory(feed=feed, key="k1", data=record_data(1))

    response = admin_client.post(change_url(record),
                                 {**form_body(record_data(1)), "_addanother": "1"})

    assert response["Location"] == "/admin/archives/record/add/"
    assert "Nothing changed" in messages_of(admin_client.get(response["Location"]))


def test_a_changed_record_is_logged_in_its_admin_history(admin_client, feed):
    record = RecordFactory(feed=feed, key="k1", data=record_data(1))

    admin_client.post(change_url(record), form_body(record_data(2)))

    assert LogEntry.objects.get().object_id == str(record.pk)


def test_after_adding_a_record_the_person_sees_it(admin_client, feed):
    response = add_record(admin_client, feed, key="new-1")

    assert response["Location"] == change_url(Record.objects.get(key="new-1"))


def test_a_record_page_links_its_history_and_documents(admin_client, busy):
    record = Record.objects.get(key="k0")
    doc = page(admin_client.get(change_url(record)))
    history = doc.xpath("//div[contains(@class, 'field-history')]//a/@href")[0]

    entries = page(admin_client.get(history))

    assert entries.xpath("//td[contains(@class, 'field-kind')]/text()") == ["Delete", "Create"]
    assert "http://127.0.0.1:8000/feeds/books/records/k0?format=html" in doc.xpath(
        "//div[contains(@class, 'field-documents')]//a/@href")
    assert entries.xpath("string(//h2)") == "Entries of the record books / k0"
    assert entries.xpath("//h2/a/@href") == [change_url(record)]


def test_the_seal_action_names_each_feed_and_links_its_pages(admin_client, busy):
    other = publishing.create_feed(slug="films", title="Films", page_size=3)

    response = admin_client.post("/admin/archives/feed/", {
        "action": "seal_now", "_selected_action": [busy.pk, other.pk]}, follow=True)

    message = page(response).xpath("//ul[contains(@class, 'messagelist')]/li")[0]
    assert "books: page 3" in message.text_content()
    assert "films: nothing to seal" in message.text_content()
    assert "FEEDPUB_SEAL_ON_WRITE" in message.text_content()
    assert message.xpath(".//a/@href") == ["http://127.0.0.1:8000/feeds/books/archives/3/"]


def test_read_only_fields_and_the_missing_delete_button_are_explained(admin_client, busy):
    doc = page(admin_client.get(f"/admin/archives/feed/{busy.pk}/change/"))
    note = doc.xpath("string(//div[contains(@class, 'feed-frozen')])")

    assert publishing.FROZEN["slug"] in note
    assert publishing.FROZEN["page_size"] in note
    assert "no Delete button" in note
    assert not doc.xpath("//a[contains(@class, 'deletelink')]")


def test_a_records_read_only_feed_and_key_are_explained(admin_client, busy):
    added = page(admin_client.get("/admin/archives/record/add/"))
    doc = page(admin_client.get(change_url(Record.objects.get(key="k1"))))
    note = doc.xpath("string(//div[contains(@class, 'record-frozen')])")

    assert "Key: The key is the record's URL, promised for ever" in " ".join(note.split())
    assert "Feed: A record stays in the feed it was added to" in " ".join(note.split())
    assert not added.xpath("//div[contains(@class, 'record-frozen')]")


def test_the_add_feed_form_shows_no_uuid(admin_client, db):
    doc = page(admin_client.get("/admin/archives/feed/add/"))

    assert not doc.xpath("//div[contains(@class, 'field-uuid')]")
    assert doc.xpath("//input[@name='slug']")


# 3. Lists that fit a screen


def test_long_keys_and_titles_are_cut_with_the_whole_on_hover(admin_client, feed):
    key, title = "k" * 200, "A very long title " * 20
    RecordFactory(feed=feed, key=key, data=record_data(1, title=title))

    doc = page(admin_client.get("/admin/archives/record/"))
    shown_key = doc.xpath("//th[contains(@class, 'field-short_key')]//span")[0]
    shown_title = doc.xpath("//td[contains(@class, 'field-short_title')]/span")[0]

    assert (shown_key.get("title"), len(shown_key.text_content())) == (key, 24)
    assert (shown_title.get("title"), len(shown_title.text_content())) == (title, 40)


def test_entries_are_newest_first_and_found_by_record_key_or_title(admin_client, busy):
    newest = page(admin_client.get("/admin/archives/entry/"))
    by_key = page(admin_client.get("/admin/archives/entry/?q=k3"))
    by_title = page(admin_client.get("/admin/archives/entry/?q=" + record_data(5)["title"]))

    seqs = [int(t) for t in newest.xpath("//th[contains(@class, 'field-seq')]//text()")]
    assert seqs == sorted(seqs, reverse=True)
    assert seqs[0] == 9
    assert by_key.xpath("//td[contains(@class, 'field-record_key')]/a/text()") == ["k3"]
    assert by_title.xpath("//td[contains(@class, 'field-record_key')]/a/text()") == ["k5"]


def test_the_entry_list_joins_each_table_once(admin_client, busy):
    with CaptureQueriesContext(connection) as queries:
        page(admin_client.get("/admin/archives/entry/"))

    listing = [q["sql"] for q in queries if q["sql"].startswith('SELECT "archives_entry"."id"')]
    assert len(listing) == 1
    assert listing[0].count('JOIN "archives_feed"') == 1


def test_a_deleted_record_is_shown_apart_in_the_record_list(admin_client, busy):
    doc = page(admin_client.get(f"/admin/archives/record/?feed__id__exact={busy.pk}"))
    states = [td.text_content() for td in doc.xpath("//td[contains(@class, 'field-state')]")]
    deleted = doc.xpath("//td[contains(@class, 'field-state')]/span/@title")

    assert states.count("live") == 7
    assert states.count("deleted") == 1
    assert deleted[0].startswith("deleted 20")
    assert Feed.objects.get().last_seq == 9
    assert kinds(busy)[-1] == "delete"


# 4. Deleting is marking deleted, and a deleted record can come back


@pytest.fixture
def deleted(feed):
    """books / gone: created, then deleted."""
    RecordFactory(feed=feed, key="gone", data=record_data(1))
    publishing.delete_record(feed=feed, key="gone")
    return Record.objects.get(key="gone")


def test_re_adding_a_deleted_key_offers_to_restore_it(admin_client, deleted):
    offered = add_record(admin_client, deleted.feed, key="gone", title="Back again")
    doc = page(offered)
    offer = doc.xpath("//ul[contains(@class, 'errorlist')]//button[@name='_restore']")

    assert "belongs to a record deleted on" in errors_of(offered)
    assert "already exists" not in errors_of(offered)
    assert len(offer) == 1
    assert offer[0].xpath("ancestor::form")  # it submits what was entered
    assert kinds(deleted.feed) == ["create", "delete"]

    response = add_record(admin_client, deleted.feed, key="gone", title="Back again",
                          _restore="1")

    assert response["Location"] == change_url(deleted)
    assert kinds(deleted.feed) == ["create", "delete", "create"]
    restored = Record.objects.get(pk=deleted.pk)
    assert (restored.title, restored.is_deleted) == ("Back again", False)
    assert "Restored books / gone" in messages_of(admin_client.get(response["Location"]))


def test_re_adding_a_live_key_links_to_the_record(admin_client, feed):
    record = RecordFactory(feed=feed, key="here", data=record_data(1))

    response = add_record(admin_client, feed, key="here", _restore="1")

    assert "has a record with this key already" in errors_of(response)
    assert page(response).xpath("//ul[contains(@class, 'errorlist')]//a/@href") == [
        change_url(record)]
    assert kinds(feed) == ["create"]


def test_a_deleted_records_page_says_it_is_deleted(admin_client, deleted):
    live = RecordFactory(feed=deleted.feed, key="live")
    note = page(admin_client.get(change_url(deleted))).xpath(
        "string(//ul[contains(@class, 'record-deleted')])")

    assert "This record is deleted (since 20" in note
    assert "saving this form restores it" in note
    assert not page(admin_client.get(change_url(live))).xpath(
        "//ul[contains(@class, 'record-deleted')]")


def test_saving_a_deleted_records_page_restores_it(admin_client, deleted):
    response = admin_client.post(change_url(deleted), form_body(record_data(1)), follow=True)

    assert kinds(deleted.feed) == ["create", "delete", "create"]
    assert "Restored books / gone" in messages_of(response)


def test_the_delete_confirmation_says_the_record_is_marked_deleted_not_removed(
        admin_client, feed):
    records = [RecordFactory(feed=feed, key=f"k{n}") for n in range(2)]
    one = page(admin_client.get(f"/admin/archives/record/{records[0].pk}/delete/"))
    many = page(admin_client.post("/admin/archives/record/", {
        "action": "delete_selected", "_selected_action": [r.pk for r in records]}))

    for doc in (one, many):
        said = " ".join(doc.xpath("string(//div[@id='content'])").split())
        assert "marked deleted, not removed" in said
        assert "a deletion entry is appended to the feed's log" in said
        assert "will be deleted" not in said
        assert doc.xpath("//form//input[@name='post'][@value='yes']")
    assert kinds(feed) == ["create", "create"]  # asking deleted nothing
