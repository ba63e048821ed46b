from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from jsonschema import Draft202012Validator

from archives.html import activity
from archives.log import publishing
from archives.management.commands.demo_feed import RECORD_SCHEMA
from archives.models import ArchivePage, Entry, Feed, Record

from .oai import NS, settle
from .oai import walk as oai_walk
from .walking import walk

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture
def demo(db) -> Feed:
    """The demo feed as the Quick start makes it (its defaults), pages of 25."""
    call_command("demo_feed", "--no-progress", stdout=StringIO())
    return Feed.objects.get(slug="demo")


def live_records(client) -> list[dict]:
    """The demo's live records as the API lists them, every page."""
    found, url = [], "/api/feeds/demo/records/?deleted=false&page_size=1000"
    while url:
        page = client.get(url).json()
        found += page["results"]
        url = page["next"] and urlsplit(page["next"])._replace(scheme="", netloc="").geturl()
    return found


def test_the_demo_feed_has_a_walkable_history_of_creates_updates_and_deletes(db, client):
    out = StringIO()
    call_command("demo_feed", "--records", "20", "--changes", "40", "--page-size", "10",
                 stdout=out)

    feed = Feed.objects.get(slug="demo")
    kinds = set(Entry.objects.filter(feed=feed).values_list("kind", flat=True))
    assert kinds == {"create", "update", "delete"}
    assert feed.sealed_pages == feed.last_seq // 10 >= 1
    walked = walk(client, "http://127.0.0.1:8000/feeds/demo/")
    assert len(walked.live) == Record.objects.filter(feed=feed, deleted_at=None).count()
    assert f"{len(walked.live)} live records" in out.getvalue()


def test_the_demo_command_leaves_an_existing_feed_alone(db):
    call_command("demo_feed", "--records", "3", "--changes", "0", stdout=StringIO())
    out = StringIO()
    call_command("demo_feed", stdout=out)
    assert "exists already" in out.getvalue()
    assert Entry.objects.count() == 3


@pytest.mark.parametrize("seal_on_write", [True, False])
def test_the_demo_says_how_many_pages_it_sealed(db, settings, seal_on_write):
    settings.FEEDPUB_SEAL_ON_WRITE = seal_on_write
    out = StringIO()

    call_command("demo_feed", "--records", "20", "--changes", "45", "--page-size", "10",
                 stdout=out)

    assert Feed.objects.get(slug="demo").sealed_pages == 6
    assert "sealed 6 archive pages (10 entries each), 5 entries not archived yet" \
        in out.getvalue()


def test_the_demo_spreads_its_history_over_past_days(db):
    started = timezone.now()
    call_command("demo_feed", "--days", "30", stdout=StringIO())

    feed = Feed.objects.get(slug="demo")
    stamps = list(Entry.objects.filter(feed=feed).order_by("seq")
                  .values_list("updated", flat=True))
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
    assert stamps[0] < started - timedelta(days=25)
    assert started - timedelta(days=2) < stamps[-1] <= timezone.now()
    unit, bars = activity.counts(feed)
    assert unit.name == "day"
    assert len([bar for _, bar in bars if bar]) > 20  # a chart of days, not one bar
    pages = ArchivePage.objects.filter(feed=feed).order_by("number")
    assert pages.first().last_updated < pages.last().first_updated - timedelta(days=15)


def test_a_write_after_the_demo_is_stamped_now(db):
    call_command("demo_feed", "--records", "5", "--changes", "5", stdout=StringIO())
    feed = Feed.objects.get(slug="demo")
    record = Record.objects.get(feed=feed, key="collection-0001")
    metadata = {**record.metadata, "subjects": [*record.metadata["subjects"], "Added now"]}

    entry = publishing.put_record(feed=feed, key=record.key, data={
        "title": record.title, "summary": record.summary, "metadata": metadata,
        "links": record.links})

    assert entry.updated > timezone.now() - timedelta(minutes=1)


def test_getting_started_quotes_what_the_demo_prints(db):
    out = StringIO()
    call_command("demo_feed", "--no-progress", stdout=out)

    page = (Path(__file__).resolve().parent.parent / "docs" / "getting-started.md").read_text()
    quoted = re.search(r"```text\n(feed 'demo'.*)\n```", page).group(1)
    assert quoted in out.getvalue().splitlines()


def test_the_demo_refuses_changes_without_records_to_change(db):
    with pytest.raises(CommandError, match="--records 1 or more"):
        call_command("demo_feed", "--records", "0", "--changes", "5", stdout=StringIO())
    assert not Feed.objects.exists()


# The demo's records have a shape: a research-data catalogue's schema.

def test_the_demo_declares_a_catalogue_schema_that_every_live_record_matches(demo, client):
    response = client.get("/feeds/demo/schema")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/schema+json"
    schema = json.loads(response.content)
    Draft202012Validator.check_schema(schema)
    properties = schema["properties"]
    assert len(properties) >= 10
    assert all(sub.get("title") and sub.get("description") for sub in properties.values())
    dublin_core = {name: sub["x-dc"] for name, sub in properties.items() if "x-dc" in sub}
    assert {"creator", "subject", "date", "rights", "type", "identifier"} \
        <= set(dublin_core.values())
    assert properties["resource_type"]["enum"]  # a closed list
    assert properties["published"]["format"] == "date"
    assert schema["required"]

    # jsonschema's own checker, with every format it knows: not the server's.
    checker = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    records = live_records(client)
    assert len(records) == Record.objects.filter(feed=demo, deleted_at=None).count() == 52
    for record in records:
        assert list(checker.iter_errors(record["metadata"])) == [], record["key"]


def test_every_demo_record_names_the_schema_version_it_was_checked_under(demo, client):
    current = client.get("/feeds/demo/schema")
    version_url = current["Content-Location"]
    assert version_url.endswith("/feeds/demo/schema/1")

    for record in live_records(client):
        assert record["schema"] == version_url
        own = client.get(urlsplit(record["url"]).path, HTTP_ACCEPT="application/json").json()
        assert own["schema"] == version_url
    version = client.get(urlsplit(version_url).path)
    assert version.status_code == 200
    assert json.loads(version.content) == json.loads(current.content) == RECORD_SCHEMA


def test_the_demo_history_corrects_and_adds_to_records_and_never_turns_one_into_another(demo):
    done = Counter()
    entries = Entry.objects.filter(feed=demo).select_related("record").order_by("seq")
    histories: dict[str, list[Entry]] = {}
    for entry in entries:
        histories.setdefault(entry.record.key, []).append(entry)
    for key, history in histories.items():
        kinds = [entry.kind for entry in history]
        assert kinds[0] == "create", key
        assert "delete" not in kinds[:-1], f"{key} comes back after its deletion"
        states = [entry for entry in history if entry.kind != "delete"]
        for before, after in zip(states, states[1:], strict=False):
            old, new = before.metadata, after.metadata
            assert (before.title, old) != (after.title, new), f"{key}: an empty update"
            assert set(old) <= set(new), f"{key} lost {set(old) - set(new)}"
            for name in ("published", "resource_type", "place", "publisher", "language"):
                assert new[name] == old[name], f"{key}: {name} changed"
            for name in ("creators", "subjects"):  # added to, never replaced
                assert new[name][:len(old[name])] == old[name], f"{key}: {name} replaced"
            done["a creator added"] += len(new["creators"]) > len(old["creators"])
            done["a subject added"] += len(new["subjects"]) > len(old["subjects"])
            done["a licence given"] += "licence" in new and "licence" not in old
            done["a DOI minted"] += "doi" in new and "doi" not in old
            done["a new version"] += new["version"] == old["version"] + 1
            done["a typo fixed"] += (before.title != after.title
                                     and sorted(before.title) == sorted(after.title))
    assert set(done) == {"a creator added", "a subject added", "a licence given",
                         "a DOI minted", "a new version", "a typo fixed"}
    assert all(done.values()), done
    assert Entry.objects.filter(feed=demo, kind="delete").count() == 8  # a few, never most


def test_the_demo_records_are_valid_atom_and_oai_pmh_in_both_formats(demo, client,
                                                                    atom_validators,
                                                                    monkeypatch):
    walked = walk(client, "http://127.0.0.1:8000/feeds/demo/")
    for document in walked.documents:
        atom_validators(document.body)
    assert len(walked.live) == 52

    settle(monkeypatch)
    live = {record["key"]: record for record in live_records(client)}
    for prefix in ("oai_dc", "feedpub"):
        _, items = oai_walk(client, "ListRecords", metadataPrefix=prefix, set="demo")
        shown = [item for item in items if item.find("o:header", NS).get("status") is None]
        assert len(shown) == len(live), prefix
    for item in shown:  # the feedpub format: the whole record, metadata as JSON
        record = json.loads(item.findtext(".//fp:metadata", namespaces=NS))
        key = item.findtext(".//fp:key", namespaces=NS)
        assert record == live[key]["metadata"]


def test_describing_records_shows_the_demo_schema_as_it_is():
    page = (DOCS / "describing-records.md").read_text()
    shown = re.search(r"<!-- the demo's schema -->\n```json\n(.*?)\n```", page, re.DOTALL)
    assert json.loads(shown.group(1)) == RECORD_SCHEMA


def test_describing_records_shows_a_demo_record_as_it_is(demo, client):
    page = (DOCS / "describing-records.md").read_text()
    key, shown = re.search(r"<!-- the metadata of the demo's ([\w-]+) -->\n```json\n(.*?)\n```",
                           page, re.DOTALL).groups()
    record = client.get(f"/api/feeds/demo/records/{key}").json()
    assert record["metadata"] == json.loads(shown)
