"""The admin with record schemas: a feed's schema is set, refused and versioned on its page,
and a schema feed's records are edited as a form drawn from it (django-jsonform), saved
through the write path, which alone checks them and whose messages come back at the field."""

from __future__ import annotations

import json

import pytest
from lxml import html

from archives import validation
from archives.admin import widgets
from archives.documents import urls
from archives.log import publishing
from archives.models import Entry, Feed, Record, RecordSchema

from .factories import record_data

SCHEMA = {
    "type": "object",
    "required": ["year", "creators"],
    "properties": {
        "year": {"type": "integer", "title": "Year", "x-dc": "date",
                 "description": "The year it was published."},
        "kind": {"type": "string", "title": "Kind", "enum": ["article", "book", "dataset"]},
        "creators": {"type": "array", "title": "Creators", "minItems": 1, "x-dc": "creator",
                     "description": "Who made it, first author first.",
                     "items": {"type": "object", "required": ["name"], "properties": {
                         "name": {"type": "string", "title": "Name",
                                  "description": "Family name, given name."}}}},
    },
    "additionalProperties": False,
}
GOOD = {"year": 1813, "kind": "book", "creators": [{"name": "Austen, Jane"}]}


def body(metadata, **fields) -> dict:
    """A record as the admin's form posts it (the metadata widget posts JSON text)."""
    data = record_data(1, metadata=metadata)
    return {"title": data["title"], "summary": data["summary"],
            "metadata": metadata if isinstance(metadata, str) else json.dumps(metadata),
            "links": json.dumps(data["links"]), **fields}


def page(response):
    assert response.status_code == 200
    return html.fromstring(response.content.decode())


def field_errors(doc, name: str) -> list[str]:
    return [" ".join(item.text_content().split()) for item in doc.xpath(
        f"//div[contains(@class, 'field-{name}')]//ul[contains(@class, 'errorlist')]/li")]


def widget_config(doc) -> dict:
    """What the metadata widget is told: the schema it draws, the data, the errors."""
    [box] = doc.xpath("//textarea[@name='metadata']")
    config = json.loads(box.get("data-django-jsonform"))
    return {**config, "data": json.loads(config["data"])}


def entry_kinds(feed) -> list[tuple[str, int | None]]:
    return list(Entry.objects.filter(feed=feed).order_by("seq").values_list(
        "kind", "schema_version"))


@pytest.fixture
def papers(db):
    return publishing.create_feed(slug="papers", title="Papers", record_schema=SCHEMA)


@pytest.fixture
def paper(papers):
    publishing.put_record(feed=papers, key="pride", data=record_data(1, metadata=GOOD))
    return Record.objects.get(feed=papers, key="pride")


def change_url(record: Record) -> str:
    return f"/admin/archives/record/{record.pk}/change/"


# A schema feed's records: a form drawn from the schema


def test_a_records_change_form_draws_its_feeds_schema(admin_client, paper):
    doc = page(admin_client.get(change_url(paper)))
    config = widget_config(doc)

    assert config["data"] == GOOD
    properties = config["schema"]["properties"]
    assert config["schema"]["required"] == ["year", "creators"]
    assert properties["year"]["help_text"] == "The year it was published."
    assert properties["kind"]["enum"] == ["article", "book", "dataset"]
    assert properties["creators"]["items"]["properties"]["name"]["help_text"] == (
        "Family name, given name.")
    # The widget shows a list's own description: no help text of its own there.
    assert "help_text" not in properties["creators"]
    help_text = " ".join(doc.xpath("string(//div[contains(@class, 'field-metadata')]"
                                   "//div[@class='help'])").split())
    assert "record schema (version 1)" in help_text
    assert doc.xpath("//div[contains(@class, 'field-metadata')]//a/@href") == [
        urls.schema_url("papers", 1)]
    # The widget's script and style come with the page.
    assert doc.xpath("//script[contains(@src, 'django_jsonform/react-json-form.js')]")


def test_the_add_form_draws_the_schema_of_the_feed_it_is_for(admin_client, papers):
    doc = page(admin_client.get(f"/admin/archives/record/add/?feed={papers.pk}"))

    assert doc.xpath("//select[@name='feed']/option[@selected]/@value") == [str(papers.pk)]
    assert widget_config(doc)["schema"]["properties"]["year"]["type"] == "integer"
    assert json.loads(doc.xpath("string(//script[@id='feedpub-schema-feeds'])")) == [papers.pk]
    assert json.loads(doc.xpath("string(//script[@id='feedpub-drawn-for'])")) == papers.pk


def test_a_valid_save_appends_one_entry_checked_under_the_schema(admin_client, paper, client):
    changed = {**GOOD, "year": 1814, "creators": [{"name": "Austen, Jane"}, {"name": "X"}]}

    response = admin_client.post(change_url(paper), body(changed))

    assert response.status_code == 302
    assert entry_kinds(paper.feed) == [("create", 1), ("update", 1)]
    shown = client.get("/feeds/papers/records/pride", HTTP_ACCEPT="application/json").json()
    assert shown["metadata"] == changed
    assert shown["schema"] == urls.schema_url("papers", 1)


def test_an_invalid_save_shows_the_write_paths_errors_at_the_field_and_writes_nothing(
        admin_client, paper):
    wrong = {"year": "eighteen", "kind": "poem", "creators": [{"name": 7}]}

    doc = page(admin_client.post(change_url(paper), body(wrong)))

    assert field_errors(doc, "metadata") == [  # by the labels the form shows
        'Creators › item 1 › Name: 7 is not of type "string"',
        'Kind: "poem" is not one of "article", "book" or "dataset"',
        'Year: "eighteen" is not of type "integer"']
    config = widget_config(doc)
    assert config["data"] == wrong  # as it was filled in
    assert config["errorMap"] == {
        'creators§0§name': ['7 is not of type "string"'],
        'kind': ['"poem" is not one of "article", "book" or "dataset"'],
        'year': ['"eighteen" is not of type "integer"']}
    assert entry_kinds(paper.feed) == [("create", 1)]
    assert Record.objects.get(pk=paper.pk).metadata == GOOD


def test_a_missing_required_property_is_said_at_its_input_by_its_label(admin_client, paper):
    doc = page(admin_client.post(change_url(paper), body({"kind": "book"})))

    assert field_errors(doc, "metadata") == [
        "Creators: this field is required.", "Year: this field is required."]
    assert widget_config(doc)["errorMap"] == {"creators": ["this field is required."],
                                              "year": ["this field is required."]}


def test_adding_a_record_to_a_schema_feed_appends_one_entry_or_nothing(admin_client, papers):
    url = "/admin/archives/record/add/"
    refused = page(admin_client.post(url, body({"year": 1813}, feed=papers.pk, key="k1")))

    assert field_errors(refused, 'metadata') == ['Creators: this field is required.']
    assert widget_config(refused)["schema"]["properties"]["kind"]["enum"]  # drawn again
    assert not Record.objects.exists()
    assert entry_kinds(papers) == []

    added = admin_client.post(url, body(GOOD, feed=papers.pk, key="k1"))

    assert added.status_code == 302
    assert entry_kinds(papers) == [("create", 1)]
    assert Record.objects.get(key="k1").schema_version == 1


def test_a_form_that_sent_no_metadata_saves_nothing(admin_client, paper):
    # The widget always posts what it holds: an empty value means its script did not run.
    doc = page(admin_client.post(change_url(paper), body("")))

    assert "The metadata form sent nothing" in " ".join(field_errors(doc, "metadata"))
    assert entry_kinds(paper.feed) == [("create", 1)]


def test_metadata_that_is_not_json_is_refused_and_the_form_starts_empty(admin_client, paper):
    doc = page(admin_client.post(change_url(paper), body('{"year": 18')))

    assert field_errors(doc, "metadata")[0].startswith("Invalid JSON at line 1")
    assert widget_config(doc)["data"] is None
    assert entry_kinds(paper.feed) == [("create", 1)]


def test_restoring_a_record_the_schema_now_refuses_says_why(admin_client, db):
    feed = publishing.create_feed(slug="loose", title="Loose")
    publishing.put_record(feed=feed, key="old", data=record_data(1, metadata={"year": "x"}))
    publishing.delete_record(feed=feed, key="old")
    publishing.update_feed(feed=feed, record_schema={
        "properties": {"year": {"type": "integer"}}})
    old = Record.objects.get(key="old")

    response = admin_client.post("/admin/archives/record/", {
        "action": "restore", "_selected_action": [old.pk]}, follow=True)

    said = " ".join(page(response).xpath(
        "string(//ul[contains(@class, 'messagelist')])").split())
    assert said == ('loose / old was not restored: metadata.year: "x" is not of type '
                    '"integer". Correct it on its page, and save it to restore it.')
    assert Record.objects.get(pk=old.pk).is_deleted


# Feeds without a schema keep the JSON box


def test_a_feed_without_a_schema_keeps_the_json_box(admin_client, feed, papers):
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    record = Record.objects.get(feed=feed, key="k1")

    for url in (change_url(record), "/admin/archives/record/add/",
                f"/admin/archives/record/add/?feed={feed.pk}"):
        doc = page(admin_client.get(url))
        [box] = doc.xpath("//textarea[@name='metadata']")
        assert box.get("data-django-jsonform") is None
        assert box.get("style") is None  # shown: a box to write JSON in
    assert json.loads(page(admin_client.get(change_url(record))).xpath(
        "string(//textarea[@name='metadata'])")) == record_data(1)["metadata"]


def test_a_schema_without_properties_draws_no_form(admin_client, db):
    feed = publishing.create_feed(slug="any", title="Any",
                                  record_schema={"type": "object", "maxProperties": 3})

    doc = page(admin_client.get(f"/admin/archives/record/add/?feed={feed.pk}"))

    assert doc.xpath("//textarea[@name='metadata']/@data-django-jsonform") == []


# A feed's schema on its page


def feed_body(feed: Feed, record_schema) -> dict:
    return {"slug": feed.slug, "title": feed.title, "subtitle": feed.subtitle,
            "author": feed.author, "language": feed.language, "page_size": feed.page_size,
            "record_schema": record_schema if isinstance(record_schema, str)
            else json.dumps(record_schema)}


def feed_url(feed: Feed) -> str:
    return f"/admin/archives/feed/{feed.pk}/change/"


def versions(feed: Feed) -> list[int]:
    return list(RecordSchema.objects.filter(feed=feed).values_list("version", flat=True))


def test_a_feed_is_created_with_a_schema_from_the_admin(admin_client, db):
    new = Feed(slug="papers", title="Papers", page_size=50, language="en")

    response = admin_client.post("/admin/archives/feed/add/", feed_body(new, SCHEMA))

    assert response.status_code == 302
    feed = Feed.objects.get(slug="papers")
    assert (feed.schema_version, versions(feed)) == (1, [1])


def test_the_feed_page_shows_its_schema_and_links_each_version(admin_client, papers, client):
    changed = {**SCHEMA, "required": ["year"]}

    response = admin_client.post(feed_url(papers), feed_body(papers, changed))
    doc = page(admin_client.get(feed_url(papers)))

    assert response.status_code == 302
    assert json.loads(doc.xpath("string(//textarea[@name='record_schema'])")) == changed
    assert " ".join(doc.xpath("string(//div[contains(@class, 'field-record_schema')]"
                              "//div[@class='help'])").split()) == validation.SCHEMA_HELP
    listed = doc.xpath("//div[contains(@class, 'field-schema_versions')]//li")
    assert [" ".join(item.text_content().split()).split(",")[0] for item in listed] == [
        "version 2", "version 1"]
    assert listed[0].text_content().endswith("(in force)")
    links = [item.xpath("a/@href")[0] for item in listed]
    assert links == [urls.schema_url("papers", 2), urls.schema_url("papers", 1)]
    assert client.get("/feeds/papers/schema/1").json() == SCHEMA
    assert doc.xpath("//div[contains(@class, 'field-schema_versions')]//a[.='Add a record']"
                     "/@href") == [f"/admin/archives/record/add/?feed={papers.pk}"]


def test_an_unchanged_schema_box_adds_no_version(admin_client, papers):
    response = admin_client.post(feed_url(papers), feed_body(papers, SCHEMA))

    assert response.status_code == 302
    assert versions(papers) == [1]


def test_emptying_the_schema_box_ends_the_schema_and_keeps_its_versions(admin_client, papers):
    response = admin_client.post(feed_url(papers), feed_body(papers, ""))
    doc = page(admin_client.get(feed_url(papers)))

    assert response.status_code == 302
    assert Feed.objects.get(pk=papers.pk).schema_version is None
    assert versions(papers) == [1]
    assert doc.xpath("string(//textarea[@name='record_schema'])").strip() == ""
    assert "No schema in force now." in doc.xpath(
        "string(//div[contains(@class, 'field-schema_versions')])")


@pytest.mark.parametrize("schema", [
    {"type": "string"},
    {"properties": {"year": {"type": "integr"}}},
    {"properties": {"year": {"x-dc": "year"}}},
])
def test_an_invalid_schema_is_refused_at_the_field_with_the_write_paths_words(
        admin_client, papers, schema):
    with pytest.raises(publishing.ValidationError) as refused:
        validation.check_record_schema(schema)

    doc = page(admin_client.post(feed_url(papers), feed_body(papers, schema)))

    assert field_errors(doc, "record_schema") == refused.value.message_dict["record_schema"]
    assert json.loads(doc.xpath("string(//textarea[@name='record_schema'])")) == schema
    assert versions(papers) == [1]


def test_a_schema_box_that_is_not_json_is_refused_with_line_and_column(admin_client, papers):
    doc = page(admin_client.post(feed_url(papers), feed_body(papers, '{"type": "object",}')))

    assert field_errors(doc, "record_schema")[0].startswith("Invalid JSON at line 1, column")
    assert versions(papers) == [1]


def test_a_schema_live_records_break_is_refused_at_the_field_and_nothing_saved(
        admin_client, paper):
    stricter = {**SCHEMA, "required": ["year", "creators", "kind"]}
    publishing.put_record(feed=paper.feed, key="emma", data=record_data(2, metadata={
        "year": 1815, "creators": [{"name": "Austen, Jane"}]}))
    with pytest.raises(publishing.SchemaConflict) as conflict:
        publishing.update_feed(feed=paper.feed, record_schema=stricter)

    doc = page(admin_client.post(feed_url(paper.feed), feed_body(
        paper.feed, stricter) | {"title": "Papers, renamed"}))

    assert field_errors(doc, "record_schema") == conflict.value.message_dict["record_schema"]
    assert "1 live record(s) do not match this schema; the first, 'emma'" in (
        field_errors(doc, "record_schema")[0])
    feed = Feed.objects.get(pk=paper.feed_id)
    assert (feed.title, feed.schema_version, versions(feed)) == ("Papers", 1, [1])


# The two small translations, on their own


def test_form_schema_says_what_the_widget_reads_otherwise_and_nothing_more():
    schema = {"properties": {
        "year": {"type": ["integer", "null"], "description": "When."},
        "tags": {"description": "Words.", "items": {
            "type": "string", "description": "One word.", "enum": ["a", "b"]}},
        "place": {"$ref": "#/$defs/place"},
        "at": {"type": "string", "format": "time"},
        "names": {"type": "object", "additionalProperties": {"type": "string"}},
        "note": {"type": "object", "properties": {"text": {"type": "string"}},
                 "default": {"description": "data, not a schema"}}},
        "$defs": {"place": {"properties": {"city": {"type": "string",
                                                    "description": "A city."}}}}}

    drawn = widgets.form_schema(schema)

    assert drawn["type"] == "object"
    properties = drawn["properties"]
    assert properties["year"] == {"type": ["integer", "null"], "description": "When.",
                                  "help_text": "When."}
    assert properties["tags"]["type"] == "array"  # as the standard infers it from items
    assert "help_text" not in properties["tags"]  # the widget shows a list's description
    assert properties["tags"]["items"]["help_text"] == "One word."
    assert properties["place"] == {"$ref": "#/$defs/place"}
    assert drawn["$defs"]["place"]["type"] == "object"
    assert drawn["$defs"]["place"]["properties"]["city"]["help_text"] == "A city."
    assert properties["at"] == {"type": "string"}
    assert properties["names"]["properties"] == {}  # a map: a key per "+"
    assert properties["note"]["default"] == {"description": "data, not a schema"}
    assert "help_text" not in schema["properties"]["year"]  # the feed's schema is untouched


@pytest.mark.parametrize("schema", [
    {"type": "object"},
    {"properties": {}},
    {"properties": {"anything": {}}},
    {"properties": {"either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
    {"properties": {"list": {"type": "array"}}},
    {"properties": {"object": {"type": "object"}}},
    {"properties": {"yes": True}},
])
def test_form_schema_leaves_the_json_box_where_the_widget_cannot_draw(schema):
    validation.check_record_schema(schema)  # a schema the write path takes

    assert widgets.form_schema(schema) is None


def test_inputs_left_empty_are_properties_left_out(admin_client, paper):
    # What the widget posts for an enum not chosen, an item added and left empty.
    posted = {"year": 1814, "kind": "", "creators": [{"name": "Austen, Jane"}, {"name": ""}]}

    response = admin_client.post(change_url(paper), body(posted))

    assert response.status_code == 302
    assert Record.objects.get(pk=paper.pk).metadata == {
        "year": 1814, "creators": [{"name": "Austen, Jane"}]}


def test_a_required_input_left_empty_is_said_missing(admin_client, paper):
    doc = page(admin_client.post(change_url(paper), body(
        {"year": None, "kind": "book", "creators": [{"name": ""}]})))

    assert field_errors(doc, "metadata") == [
        "Creators: this field is required.", "Year: this field is required."]


def test_input_errors_places_each_message_at_its_input():
    placed = widgets.input_errors([
        "metadata.creators[0].name: 7 is not of type 'string'",
        'metadata["a name"][2]: too long',
        "metadata.creators[0].name: another",
        'metadata: "year" is a required property',
        'metadata.creators[1]: "name" is a required property',
        "something else entirely"])

    assert placed == {"creators§0§name": ["7 is not of type 'string'", "another"],
                      "a name§2": ["too long"],
                      "year": ["this field is required."],
                      "creators§1§name": ["this field is required."],
                      "": ["something else entirely"]}


def shown_messages(response) -> list[tuple[str, str]]:
    """(level, text) of each message on the page a redirect leads to."""
    return [(item.get("class"), " ".join(item.text_content().split()))
            for item in page(response).xpath("//ul[contains(@class, 'messagelist')]/li")]


def test_a_schema_with_a_property_named_like_a_record_field_is_saved_with_a_warning(
        admin_client, papers):
    titled = {**SCHEMA, "properties": {**SCHEMA["properties"], "title": {"type": "string"}}}

    saved = admin_client.post(feed_url(papers), feed_body(papers, titled), follow=True)
    again = admin_client.post(feed_url(papers), feed_body(papers, titled), follow=True)

    assert versions(papers) == [1, 2]
    warnings = [text for level, text in shown_messages(saved) if level == "warning"]
    assert warnings == validation.schema_warnings(titled)
    assert warnings[0].startswith("The property 'title' is named like a record's own title")
    # Said when the schema is set, not on every save of the feed.
    assert [level for level, _ in shown_messages(again)] == ["success"]


def test_a_feed_created_with_such_a_schema_is_warned_of(admin_client, db):
    new = Feed(slug="theses", title="Theses", page_size=50, language="en")
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}}

    created = admin_client.post("/admin/archives/feed/add/", feed_body(new, schema), follow=True)

    assert Feed.objects.get(slug="theses").schema_version == 1
    assert [text.split()[2] for level, text in shown_messages(created)
            if level == "warning"] == ["'summary'"]


def test_an_input_is_named_by_the_labels_the_drawn_form_shows():
    schema = {"type": "object", "$defs": {"person": {
        "type": "object", "properties": {"family_name": {"type": "string"}}}},
        "properties": {
            "authors": {"type": "array", "title": "Authors", "items": {"$ref": "#/$defs/person"}},
            "place_of_publication": {"type": "string"},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}}}}

    assert widgets.input_label(schema, ["authors", 0, "family_name"]) == (
        "Authors › item 1 › Family name")
    assert widgets.input_label(schema, ["place_of_publication"]) == (
        "Place of publication")
    assert widgets.input_label(schema, ["extra", "ISBN_13"]) == "Extra › ISBN_13"
