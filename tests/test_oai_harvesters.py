"""OAI-PMH harvesters nobody here wrote (oaipmh-scythe, and the client of oaipmh, pyoai's
maintained fork) harvest every feed of random histories from a live server, and get exactly
the live records, deletions flagged; on PostgreSQL, writers keep writing to several feeds
while a harvester pages through, and an incremental harvest from each responseDate then
equals the database."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone
from feedpub_consumer.harvesting import harvest
from oaipmh.client import Client
from oaipmh.metadata import MetadataRegistry, oai_dc_reader
from oaipmh_scythe import Scythe
from oaipmh_scythe.exceptions import NoRecordsMatch
from oaipmh_scythe.response import OAIResponse

from archives import conf
from archives.log import publishing
from archives.models import Feed, Record
from archives.oai import repository
from archives.oai.repository import identifier

from .factories import FeedFactory, record_data
from .feeds_live import random_history
from .oai import CATALOGUE_DC, CATALOGUE_RECORD, CATALOGUE_SCHEMA, settle


@pytest.fixture
def live_feeds(live_server, settings, transactional_db, monkeypatch):
    settings.FEEDPUB_BASE_URL = live_server.url
    settings.FEEDPUB_OAI_PAGE_SIZE = 7  # many tokens for a few dozen records
    settle(monkeypatch)
    rng = random.Random(5005)
    feeds = [FeedFactory(slug=slug, page_size=4) for slug in ("books", "maps", "films")]
    for feed in feeds:
        keys = [f"{feed.slug}-{n}" for n in range(10)]
        random_history(feed, rng, 40, keys)
        # A record deleted and created again: one identifier, live at the end.
        publishing.put_record(feed=feed, key="again", data=record_data(1))
        publishing.delete_record(feed=feed, key="again")
        publishing.put_record(feed=feed, key="again", data=record_data(2, title="again"))
    return feeds, f"{live_server.url}/oai"


def database_state(feeds=None) -> dict[str, str | None]:
    """identifier -> the live record's title, or None for a deleted one."""
    records = Record.objects.select_related("feed")
    if feeds is not None:
        records = records.filter(feed__in=feeds)
    return {identifier(r.feed.uuid, r.key): None if r.is_deleted else r.title for r in records}


def test_oaipmh_scythe_harvests_every_feed_into_the_live_records(live_feeds):
    feeds, url = live_feeds
    with Scythe(url) as scythe:
        harvested = {record.header.identifier: None if record.deleted else
                     record.metadata["title"][0]
                     for record in scythe.list_records(metadata_prefix="oai_dc")}
        assert harvested == database_state()
        assert any(title is None for title in harvested.values())  # deletions were flagged
        for feed in feeds:
            by_set = {record.header.identifier: None if record.deleted else
                      record.metadata["title"][0]
                      for record in scythe.list_records(metadata_prefix="oai_dc",
                                                        set_=feed.slug)}
            assert by_set == database_state([feed])
        assert {s.setSpec for s in scythe.list_sets()} == {"books", "maps", "films"}
        assert scythe.identify().deletedRecord == "persistent"


def test_feedpubs_own_harvester_rebuilds_the_live_records_incrementally(live_feeds, tmp_path,
                                                                       monkeypatch):
    feeds, url = live_feeds
    monkeypatch.setattr(repository, "now", timezone.now)  # responseDates on the real clock
    state = tmp_path / "oai.sqlite"
    result = harvest(url, state_path=state)  # told OAI-PMH by the answer; feedpub preferred
    assert result.complete, result.warnings
    live = {identifier(r.feed.uuid, r.key): (r.key, r.title, r.metadata)
            for r in Record.objects.select_related("feed").filter(deleted_at__isnull=True)}
    assert {row["id"]: (row["key"], row["title"], row["metadata"])
            for row in result.records} == live
    publishing.delete_record(feed=feeds[0], key="again")
    publishing.put_record(feed=feeds[1], key="again", data=record_data(3, title="changed"))
    again = harvest(url, state_path=state)
    assert again.complete, again.warnings
    # From the first run's responseDate: the two changes, and anything of that second again.
    assert again.summary.records_changed == 2
    assert {row["id"]: row["title"] for row in again.records} == {
        i: title for i, title in database_state().items() if title is not None}


def test_the_oaipmh_client_harvests_the_same_records(live_feeds):
    _, url = live_feeds
    registry = MetadataRegistry()
    registry.registerReader("oai_dc", oai_dc_reader)
    client = Client(url, registry)
    assert client.identify().repositoryName() == "feedpub"
    harvested = {header.identifier(): None if header.isDeleted() else
                 metadata.getField("title")[0]
                 for header, metadata, _ in client.listRecords(metadataPrefix="oai_dc")}
    assert harvested == database_state()
    header, metadata, _ = client.getRecord(identifier=next(iter(harvested)),
                                           metadataPrefix="oai_dc")
    assert header.identifier() == next(iter(harvested))


@pytest.mark.postgres
def test_incremental_harvests_during_concurrent_writes_equal_the_database(
        live_server, settings, transactional_db, monkeypatch):
    """Writers on three feeds commit out of `updated` order across feeds while a harvester
    pages through (the real clock, the default settle time): a tenth of their transactions
    stay open for longer than the settle time after they stamp `updated`, so only the
    horizon (archives/oai/repository.py) keeps them in a later harvest. Each incremental
    harvest from the previous responseDate, applied in order, ends equal to the database."""
    settings.FEEDPUB_BASE_URL = live_server.url
    settings.FEEDPUB_OAI_PAGE_SIZE = 5
    assert conf.settings.FEEDPUB_LAST_MODIFIED_SETTLE == 1
    feeds = [FeedFactory(slug=f"busy-{n}", page_size=10) for n in range(3)]
    announce = publishing.announce
    held = threading.local()

    def announce_late(feed_id: int) -> None:  # called after the stamp, before the commit
        time.sleep(held.seconds)
        announce(feed_id)

    monkeypatch.setattr(publishing, "announce", announce_late)

    def write(feed: Feed, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for step in range(40):
                held.seconds = 1.5 if rng.random() < 0.1 else rng.random() / 50
                key = f"k{rng.randrange(15)}"
                if rng.random() < 0.2 and Record.objects.filter(
                        feed=feed, key=key, deleted_at__isnull=True).exists():
                    publishing.delete_record(feed=feed, key=key)
                else:
                    publishing.put_record(feed=feed, key=key,
                                          data=record_data(step, title=f"{key} {step}"))
        finally:
            connection.close()

    writers = [threading.Thread(target=write, args=(feed, n)) for n, feed in enumerate(feeds)]
    for writer in writers:
        writer.start()
    seen: dict[str, str | None] = {}
    since = None
    harvests = 0
    try:
        with RecordingScythe(f"{live_server.url}/oai") as scythe:
            while any(writer.is_alive() for writer in writers):
                since = harvest_into(scythe, seen, since)
                harvests += 1
                time.sleep(0.2)
    finally:
        for writer in writers:
            writer.join()
    with RecordingScythe(f"{live_server.url}/oai") as scythe:
        harvest_into(scythe, seen, since)
    assert harvests >= 3  # the harvests ran while the writers wrote
    assert seen == database_state()


def test_harvesters_read_the_dublin_core_a_feeds_schema_maps(live_server, settings,
                                                              transactional_db, monkeypatch):
    settings.FEEDPUB_BASE_URL = live_server.url
    settle(monkeypatch)
    feed = publishing.create_feed(slug="data", title="Research data",
                                  record_schema=CATALOGUE_SCHEMA)
    publishing.put_record(feed=feed, key="polonium", data=CATALOGUE_RECORD)
    record_url = f"{live_server.url}/feeds/data/records/polonium"
    expected: dict[str, list[str]] = {}
    for name, text in CATALOGUE_DC:
        expected.setdefault(name, []).append(text.format(record_url=record_url))
    with Scythe(f"{live_server.url}/oai") as scythe:
        [record] = scythe.list_records(metadata_prefix="oai_dc", set_="data")
        assert record.metadata == expected
    registry = MetadataRegistry()
    registry.registerReader("oai_dc", oai_dc_reader)
    _, metadata, _ = Client(f"{live_server.url}/oai", registry).getRecord(
        identifier=identifier(feed.uuid, "polonium"), metadataPrefix="oai_dc")
    for name, texts in expected.items():
        assert metadata.getField(name) == texts


class RecordingScythe(Scythe):
    """oaipmh-scythe, remembering the responseDate of the last answer it received."""

    response_date: str | None = None

    def harvest(self, query: dict[str, str]) -> OAIResponse:
        response = OAIResponse(self._request_with_retry(query), params=query)
        self.response_date = response.xml.findtext(
            "{http://www.openarchives.org/OAI/2.0/}responseDate")
        response.raise_for_oaipmh_error()
        return response


def harvest_into(scythe: RecordingScythe, seen: dict, since: str | None) -> str | None:
    """One incremental harvest applied in order; returns its last answer's responseDate."""
    try:
        for record in scythe.list_records(metadata_prefix="oai_dc", from_=since):
            seen[record.header.identifier] = (None if record.deleted
                                              else record.metadata["title"][0])
    except NoRecordsMatch:
        pass
    return scythe.response_date
