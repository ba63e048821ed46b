"""Every field of a record (archives.validation.RECORD_FIELDS) that the write path stores, the
admin's form and `import_records` store too: a field added to RECORD_FIELDS that one of these
doors shows but drops, or does not read at all, fails here."""

from __future__ import annotations

import csv
import json
from io import StringIO

import pytest
from django.core.management import call_command

from archives.admin.forms import RecordForm
from archives.log import publishing
from archives.models import Record
from archives.validation import RECORD_FIELDS

from .factories import FeedFactory

# A value of each record field, none of them its default, as a producer would set it. A field
# added to RECORD_FIELDS needs one here (test_every_record_field_has_a_value_to_try says so).
VALUES = {
    "title": "Pride and Prejudice",
    "summary": "A novel of manners, first published in 1813.",
    "metadata": {"creator": "Austen, Jane", "year": 1813, "subjects": ["Courtship"]},
    "links": [{"href": "https://example.org/books/pride", "rel": "related",
               "type": "text/html", "title": "Catalogue page"}],
    "language": "en-GB",
}


def test_every_record_field_has_a_value_to_try():
    assert set(VALUES) == set(RECORD_FIELDS)


@pytest.fixture
def written(db):
    """Each field as the write path stores the record VALUES holds: what the doors must
    store too (and none of it a new record's default, or storing it would prove nothing)."""
    feed = FeedFactory(slug="written")
    publishing.put_record(feed=feed, key="k", data=VALUES)
    record = Record.objects.get(feed=feed, key="k")
    for name in RECORD_FIELDS:
        assert getattr(record, name) != getattr(Record(), name), name
    return record


def form_post(values: dict) -> dict[str, str]:
    """A record as the admin's form posts it: each field as its input shows the value."""
    return {name: RecordForm.base_fields[name].prepare_value(value)
            for name, value in values.items()}


@pytest.mark.parametrize("name", RECORD_FIELDS)
def test_the_admin_stores_each_record_field_it_adds(admin_client, written, name):
    feed = FeedFactory(slug="books")

    response = admin_client.post("/admin/archives/record/add/",
                                 {"feed": feed.pk, "key": "pride", **form_post(VALUES)})

    assert response.status_code == 302, response.content.decode()
    record = Record.objects.get(feed=feed, key="pride")
    assert getattr(record, name) == getattr(written, name)


@pytest.mark.parametrize("name", RECORD_FIELDS)
def test_the_admin_stores_each_record_field_it_changes(admin_client, written, name):
    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="pride", data={"title": "Untitled"})
    record = Record.objects.get(feed=feed, key="pride")

    response = admin_client.post(f"/admin/archives/record/{record.pk}/change/",
                                 form_post(VALUES))

    assert response.status_code == 302, response.content.decode()
    record.refresh_from_db()
    assert getattr(record, name) == getattr(written, name)


def json_lines(values: dict) -> str:
    return json.dumps({"key": "pride", **values}) + "\n"


def csv_file(values: dict) -> str:
    """A header row and one record: a text field's cell as it is, any other's as JSON (the
    syntax docs/publishing/import.md gives metadata and links)."""
    out = StringIO()
    writer = csv.writer(out)
    writer.writerow(["key", *values])
    writer.writerow(["pride", *(value if isinstance(value, str) else json.dumps(value)
                                for value in values.values())])
    return out.getvalue()


@pytest.mark.parametrize("name", RECORD_FIELDS)
@pytest.mark.parametrize(("suffix", "written_as"), [(".jsonl", json_lines), (".csv", csv_file)])
def test_import_records_stores_each_record_field(tmp_path, written, name, suffix, written_as):
    feed = FeedFactory(slug="books")
    path = tmp_path / f"records{suffix}"
    path.write_text(written_as(VALUES), encoding="utf-8")

    call_command("import_records", "books", str(path), "--no-progress", stdout=StringIO(),
                 stderr=StringIO())

    record = Record.objects.get(feed=feed, key="pride")
    assert getattr(record, name) == getattr(written, name)
