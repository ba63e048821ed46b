"""OAI-PMH 2.0 at /oai, as a harvester sees it: every verb, every protocol error, flow
control whose tokens never expire, and lists that miss nothing while the log changes.
Every answer is checked against OAI-PMH.xsd and its formats' schemas (tests/oai.py)."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from lxml import etree

from archives import conf
from archives.log import publishing
from archives.models import Feed, Record
from archives.oai import repository
from archives.oai.metadata import FEEDPUB_SCHEMA_FILE

from .factories import FeedFactory, record_data
from .oai import NS, ask, error_codes, identifiers, response_date, settle, token_of, valid, walk

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settled(monkeypatch):
    settle(monkeypatch)


@pytest.fixture
def books(db):
    return FeedFactory(slug="books", title="Books", subtitle="A catalogue of books")


def put(feed, key, n=1, **overrides):
    return publishing.put_record(feed=feed, key=key, data=record_data(n, **overrides))


def oai_id(feed, key):
    return f"oai:feedpub.localhost:{feed.uuid}/{key}"


# Identify, ListMetadataFormats, ListSets ---------------------------------------------------

def test_identify_describes_the_repository_from_settings_and_data(client, books, settings):
    settings.FEEDPUB_OAI_REPOSITORY_NAME = "Book catalogues"
    settings.FEEDPUB_OAI_ADMIN_EMAIL = "oai@books.example.org"
    put(books, "a")
    first = Record.objects.get(key="a").updated
    put(books, "b")
    identify = ask(client, verb="Identify").find("o:Identify", NS)
    assert identify.findtext("o:repositoryName", namespaces=NS) == "Book catalogues"
    assert identify.findtext("o:baseURL", namespaces=NS) == settings.FEEDPUB_BASE_URL + "/oai"
    assert identify.findtext("o:protocolVersion", namespaces=NS) == "2.0"
    assert identify.findtext("o:adminEmail", namespaces=NS) == "oai@books.example.org"
    assert identify.findtext("o:earliestDatestamp", namespaces=NS) == first.strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    assert identify.findtext("o:deletedRecord", namespaces=NS) == "persistent"
    assert identify.findtext("o:granularity", namespaces=NS) == "YYYY-MM-DDThh:mm:ssZ"
    scheme = identify.find("o:description/id:oai-identifier", NS)
    assert scheme.findtext("id:repositoryIdentifier", namespaces=NS) == "feedpub.localhost"
    assert scheme.findtext("id:sampleIdentifier", namespaces=NS).startswith(
        "oai:feedpub.localhost:")


def test_the_base_url_answers_post_as_it_answers_get(client, books):
    put(books, "a")
    by_get = ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc")
    by_post = ask(client, "post", verb="ListIdentifiers", metadataPrefix="oai_dc")
    assert identifiers(by_post.xpath("//o:header", namespaces=NS)) == identifiers(
        by_get.xpath("//o:header", namespaces=NS)) == [oai_id(books, "a")]


def test_both_formats_are_listed_and_feedpubs_schema_is_served(client, books, settings):
    formats = ask(client, verb="ListMetadataFormats").xpath(
        "o:ListMetadataFormats/o:metadataFormat", namespaces=NS)
    listed = {f.findtext("o:metadataPrefix", namespaces=NS): f.findtext("o:schema", namespaces=NS)
              for f in formats}
    assert listed == {"oai_dc": "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
                      "feedpub": settings.FEEDPUB_BASE_URL + "/oai/feedpub-record.xsd"}
    served = client.get("/oai/feedpub-record.xsd")
    assert served.status_code == 200
    assert served.content == FEEDPUB_SCHEMA_FILE.read_bytes()
    etree.XMLSchema(etree.fromstring(served.content))  # a schema that compiles


def test_each_feed_is_a_set_named_by_its_slug_and_title(client, books):
    FeedFactory(slug="maps", title="Maps", subtitle="")
    _, sets = walk(client, "ListSets")
    assert [(s.findtext("o:setSpec", namespaces=NS), s.findtext("o:setName", namespaces=NS))
            for s in sets] == [("books", "Books"), ("maps", "Maps")]
    assert sets[0].findtext(".//dc:description", namespaces=NS) == "A catalogue of books"


def test_sets_are_listed_in_pages_with_tokens(client, settings, db):
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    for n in range(5):
        FeedFactory(slug=f"feed-{n}")
    documents, sets = walk(client, "ListSets")
    assert [s.findtext("o:setSpec", namespaces=NS) for s in sets] == [
        f"feed-{n}" for n in range(5)]
    assert len(documents) == 3
    assert [token_of(d).get("cursor") for d in documents] == ["0", "2", "4"]


def test_a_repository_without_feeds_has_no_sets(client, db):
    assert error_codes(ask(client, verb="ListSets")) == ["noSetHierarchy"]


# Records and their formats -------------------------------------------------------------------

def test_oai_dc_maps_the_record_and_the_dublin_core_its_metadata_names(client, books):
    put(books, "pride", title="Pride and Prejudice", summary="A novel.", metadata={
        "creator": ["Jane Austen"], "subject": ["Fiction", "Romance"], "language": "en",
        "publisher": "T. Egerton", "rights": "Public domain", "type": "Text", "year": 1813,
        "format": {"not": "a text"}, "coverage": [True, None]})
    record = Record.objects.get(key="pride")
    dc = ask(client, verb="GetRecord", metadataPrefix="oai_dc",
             identifier=oai_id(books, "pride")).find(".//oai_dc:dc", NS)

    def texts(name):
        return [e.text for e in dc.findall(f"dc:{name}", NS)]

    assert texts("title") == ["Pride and Prejudice"]
    assert texts("description") == ["A novel."]
    assert texts("creator") == ["Jane Austen"]
    assert texts("subject") == ["Fiction", "Romance"]
    assert texts("language") == ["en"]
    assert texts("publisher") == ["T. Egerton"]
    assert texts("rights") == ["Public domain"]
    assert texts("type") == ["Text"]
    assert texts("format") == texts("coverage") == []  # objects and booleans have no DC form
    assert texts("date") == [record.updated.strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert texts("identifier") == ["http://127.0.0.1:8000/feeds/books/records/pride",
                                   "https://example.org/records/1"]


def test_the_feedpub_format_carries_the_whole_record_losslessly(client, books):
    metadata = {"nested": {"list": [1, 2.5, None, True, "ü ✓"]}, "empty": {}, "n": 10**15}
    links = [{"href": "https://example.org/a", "rel": "related", "type": "text/html",
              "title": "A & <b>"}, {"href": "https://example.org/b", "rel": "enclosure"}]
    put(books, "full", title="Title <&>", summary="", metadata=metadata, links=links)
    record = Record.objects.get(key="full")
    found = ask(client, verb="GetRecord", metadataPrefix="feedpub",
                identifier=oai_id(books, "full")).find(".//fp:record", NS)
    assert found.findtext("fp:key", namespaces=NS) == "full"
    assert found.findtext("fp:title", namespaces=NS) == "Title <&>"
    assert found.findtext("fp:summary", namespaces=NS) == ""
    assert found.findtext("fp:atomId", namespaces=NS) == record.atom_id
    assert found.findtext("fp:url", namespaces=NS).endswith("/feeds/books/records/full")
    assert json.loads(found.findtext("fp:metadata", namespaces=NS)) == metadata
    assert [dict(link.attrib) for link in found.findall("fp:link", NS)] == [
        {k: v for k, v in link.items() if v} for link in record.links]
    assert found.findtext("fp:updated", namespaces=NS) == record.updated.strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_deleted_record_is_a_deleted_header_without_metadata(client, books):
    put(books, "gone")
    publishing.delete_record(feed=books, key="gone")
    record = ask(client, verb="GetRecord", metadataPrefix="oai_dc",
                 identifier=oai_id(books, "gone")).find("o:GetRecord/o:record", NS)
    assert record.find("o:header", NS).get("status") == "deleted"
    assert record.find("o:metadata", NS) is None
    assert error_codes(ask(client, verb="ListMetadataFormats",
                           identifier=oai_id(books, "gone"))) == ["noMetadataFormats"]


def test_every_identifier_ever_issued_resolves_and_is_never_reused(client, books):
    put(books, "a")
    first = ask(client, verb="GetRecord", metadataPrefix="oai_dc", identifier=oai_id(books, "a"))
    publishing.delete_record(feed=books, key="a")
    put(books, "a", 2, title="Back again")  # the same record, re-created
    again = ask(client, verb="GetRecord", metadataPrefix="oai_dc", identifier=oai_id(books, "a"))
    assert first.findtext(".//dc:title", namespaces=NS) == "Record 1"
    assert again.findtext(".//dc:title", namespaces=NS) == "Back again"
    other = FeedFactory(slug="other")
    put(other, "a")  # the same key in another feed is another record
    assert oai_id(other, "a") != oai_id(books, "a")
    _, headers = walk(client, "ListIdentifiers", metadataPrefix="oai_dc")
    assert sorted(identifiers(headers)) == sorted([oai_id(books, "a"), oai_id(other, "a")])


def test_headers_name_their_feeds_set_and_lists_span_all_feeds_without_one(client, books):
    maps = FeedFactory(slug="maps")
    put(books, "b1")
    put(maps, "m1")
    put(books, "b2")
    _, every = walk(client, "ListIdentifiers", metadataPrefix="oai_dc")
    assert identifiers(every) == [oai_id(books, "b1"), oai_id(maps, "m1"), oai_id(books, "b2")]
    assert [h.findtext("o:setSpec", namespaces=NS) for h in every] == ["books", "maps", "books"]
    _, only_maps = walk(client, "ListIdentifiers", metadataPrefix="oai_dc", set="maps")
    assert identifiers(only_maps) == [oai_id(maps, "m1")]


def test_datestamps_are_the_last_change_in_seconds(client, books):
    put(books, "a")
    put(books, "a", 2)
    record = Record.objects.get(key="a")
    header = ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc").find(".//o:header", NS)
    assert header.findtext("o:datestamp", namespaces=NS) == record.updated.strftime(
        "%Y-%m-%dT%H:%M:%SZ")


# Selective harvesting --------------------------------------------------------------------

def stamp_updates(feed, moments: dict[str, datetime]):
    """Give records the datestamps a test needs (the write path stamps now)."""
    for key, moment in moments.items():
        put(feed, key)
        Record.objects.filter(feed=feed, key=key).update(updated=moment, datestamp=moment)


def test_from_and_until_select_by_datestamp_inclusively_in_both_granularities(client, books):
    day = datetime(2024, 5, 1, tzinfo=UTC)
    stamp_updates(books, {"before": day - timedelta(seconds=1), "start": day,
                          "noon": day + timedelta(hours=12, microseconds=999_999),
                          "last": day + timedelta(hours=23, minutes=59, seconds=59, microseconds=5),
                          "next": day + timedelta(days=1)})

    def keys(**params):
        _, headers = walk(client, "ListIdentifiers", metadataPrefix="oai_dc", **params)
        return [i.rsplit("/", 1)[1] for i in identifiers(headers)]

    assert keys(from_="2024-05-01", until="2024-05-01") == ["start", "noon", "last"]
    assert keys(from_="2024-05-01T12:00:00Z", until="2024-05-01T12:00:00Z") == ["noon"]
    assert keys(from_="2024-05-01T00:00:00Z", until="2024-05-01T23:59:58Z") == ["start", "noon"]
    assert keys(until="2024-04-30") == ["before"]
    assert keys(from_="2024-05-02") == ["next"]
    assert error_codes(ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc",
                           from_="2030-01-01")) == ["noRecordsMatch"]


# Flow control ------------------------------------------------------------------------------

def test_a_long_list_comes_in_pages_whose_tokens_carry_cursor_and_size(client, books, settings):
    settings.FEEDPUB_OAI_PAGE_SIZE = 3
    for n in range(8):
        put(books, f"k{n}", n)
    documents, records = walk(client, "ListRecords", metadataPrefix="oai_dc")
    assert identifiers(records) == [oai_id(books, f"k{n}") for n in range(8)]
    tokens = [token_of(d) for d in documents]
    assert [(t.get("cursor"), t.get("completeListSize")) for t in tokens] == [
        ("0", "8"), ("3", "8"), ("6", "8")]
    assert tokens[-1].text is None  # the empty token that ends a resumed list
    assert token_of(ask(client, verb="ListRecords", metadataPrefix="oai_dc",
                        set="books", from_="2000-01-01")) is not None


def test_a_short_list_comes_whole_without_a_token(client, books):
    put(books, "a")
    assert token_of(ask(client, verb="ListRecords", metadataPrefix="oai_dc")) is None


def test_a_token_gives_the_same_records_again_days_later_on_any_process(client, books, settings,
                                                                         monkeypatch):
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    for n in range(5):
        put(books, f"k{n}", n)
    token = token_of(ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc")).text
    first = ask(client, verb="ListIdentifiers", resumptionToken=token)
    settle(monkeypatch, seconds=5 * 24 * 3600)  # nothing of the token lives on the server
    again = ask(client, verb="ListIdentifiers", resumptionToken=token)
    assert identifiers(first.xpath("//o:header", namespaces=NS)) == identifiers(
        again.xpath("//o:header", namespaces=NS)) == [oai_id(books, "k2"), oai_id(books, "k3")]


def test_a_record_changed_during_a_harvest_is_listed_again_later_and_none_is_skipped(
        client, books, settings):
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    for n in range(6):
        put(books, f"k{n}", n)
    first = ask(client, verb="ListRecords", metadataPrefix="oai_dc")
    put(books, "k0", 100, title="k0 changed")  # listed already: it moves to the end
    put(books, "k4", 100, title="k4 changed")  # not listed yet: it moves to the end
    publishing.delete_record(feed=books, key="k5")
    put(books, "new", 7)
    documents = [first]
    while (token := token_of(documents[-1]).text):
        documents.append(ask(client, verb="ListRecords", resumptionToken=token))
    records = [r for d in documents for r in d.xpath("//o:record", namespaces=NS)]
    listed = [(i.rsplit("/", 1)[1], r.findtext(".//dc:title", namespaces=NS))
              for i, r in zip(identifiers(records), records, strict=True)]
    assert listed == [("k0", "Record 0"), ("k1", "Record 1"), ("k2", "Record 2"),
                      ("k3", "Record 3"), ("k0", "k0 changed"), ("k4", "k4 changed"),
                      ("k5", None), ("new", "Record 7")]


def test_no_page_reads_past_an_offset_and_a_deep_page_costs_what_the_first_does(
        client, books, settings):
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    for n in range(9):
        put(books, f"k{n}", n)
    _, __ = walk(client, "ListRecords", metadataPrefix="oai_dc")
    token = token_of(ask(client, verb="ListRecords", metadataPrefix="oai_dc")).text
    deep = token_of(ask(client, verb="ListRecords", resumptionToken=token)).text
    counts = []
    for current in (token, deep):
        with CaptureQueriesContext(connection) as queries:
            ask(client, verb="ListRecords", resumptionToken=current)
        assert not any("OFFSET" in q["sql"].upper() or "COUNT(" in q["sql"].upper()
                       for q in queries.captured_queries)
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a_resumed_list_whose_records_all_moved_out_of_its_range_matches_nothing(
        client, books, settings):
    settings.FEEDPUB_OAI_PAGE_SIZE = 1
    day = datetime(2024, 5, 1, tzinfo=UTC)
    stamp_updates(books, {"a": day, "b": day + timedelta(hours=1)})
    token = token_of(ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc",
                         until="2024-05-01")).text
    put(books, "b", 2)  # now changed today: out of the list's range
    assert error_codes(ask(client, verb="ListIdentifiers", resumptionToken=token)) == [
        "noRecordsMatch"]


# The safe point -------------------------------------------------------------------------------

def test_a_page_stops_before_changes_stamped_after_the_horizon(client, books, settings,
                                                               monkeypatch):
    """Changes stamped after the horizon (here: after now, as a host whose clock is ahead
    would stamp them) may still have others stamped before them and not committed: a token
    never resumes past them while it can stop before, and responseDate is before them."""
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    stamp_updates(books, {"old": now - timedelta(seconds=30), "a": now + timedelta(seconds=1),
                          "b": now + timedelta(seconds=2), "c": now + timedelta(seconds=3)})
    monkeypatch.setattr(repository, "now", lambda: now)
    first = ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc")
    assert response_date(first) == "2024-05-01T11:59:59Z"  # less the settle time
    assert identifiers(first.xpath("//o:header", namespaces=NS)) == [oai_id(books, "old")]
    # Three left, more than a page, none before the horizon: the page goes on past it, and
    # the rest of the list answers no later responseDate than that page's.
    rest = ask(client, verb="ListIdentifiers", resumptionToken=token_of(first).text)
    assert identifiers(rest.xpath("//o:header", namespaces=NS)) == [
        oai_id(books, "a"), oai_id(books, "b")]
    monkeypatch.setattr(repository, "now", lambda: now + timedelta(minutes=5))
    last = ask(client, verb="ListIdentifiers", resumptionToken=token_of(rest).text)
    assert identifiers(last.xpath("//o:header", namespaces=NS)) == [oai_id(books, "c")]
    assert response_date(last) == "2024-05-01T11:59:59Z"


def test_the_last_page_lists_everything_after_its_position(client, books, settings, monkeypatch):
    """So that a record that exists throughout a harvest is listed, however recent."""
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    stamp_updates(books, {"old": now - timedelta(seconds=30), "ahead": now + timedelta(hours=1)})
    monkeypatch.setattr(repository, "now", lambda: now)
    document = ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc")
    assert identifiers(document.xpath("//o:header", namespaces=NS)) == [
        oai_id(books, "old"), oai_id(books, "ahead")]
    assert response_date(document) == "2024-05-01T11:59:59Z"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_writer_in_flight_holds_the_horizon_at_its_transactions_start(client, books, settings):
    """On PostgreSQL the horizon is the start of the oldest transaction holding a feed lock:
    a change it stamps later may commit after changes of other feeds stamped after it."""
    settings.FEEDPUB_OAI_PAGE_SIZE = 2
    other = FeedFactory(slug="other")
    for key in ("r1", "r2", "r3"):
        put(books, key)
    locked, release = threading.Event(), threading.Event()
    started = []

    def writer_in_flight():
        try:
            with transaction.atomic():
                Feed.objects.select_for_update().get(pk=other.pk)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT transaction_timestamp()")
                    started.append(cursor.fetchone()[0])
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=writer_in_flight)
    thread.start()
    try:
        assert locked.wait(10)
        time.sleep(0.05)
        for key in ("r4", "r5", "r6"):  # stamped after the writer in flight began
            put(books, key)
        first = ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc")
        second = ask(client, verb="ListIdentifiers", resumptionToken=token_of(first).text)
        assert identifiers(second.xpath("//o:header", namespaces=NS)) == [oai_id(books, "r3")]
        horizon_second = int(started[0].timestamp()) - conf.settings.FEEDPUB_LAST_MODIFIED_SETTLE
        assert response_date(second) == datetime.fromtimestamp(horizon_second, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    finally:
        release.set()
        thread.join()
    _, rest = walk(client, "ListIdentifiers", metadataPrefix="oai_dc")
    assert identifiers(rest) == [oai_id(books, f"r{n}") for n in range(1, 7)]


def test_an_incremental_harvest_from_the_last_response_date_gets_every_later_change(
        client, books, monkeypatch):
    monkeypatch.setattr(repository, "now", lambda: datetime.now(tz=UTC))  # the real clock
    for n in range(3):
        put(books, f"k{n}", n)
    documents, first = walk(client, "ListRecords", metadataPrefix="oai_dc")
    assert len(first) == 3  # the last page takes every record, however recent
    since = response_date(documents[-1])
    put(books, "k1", 10, title="changed")
    publishing.delete_record(feed=books, key="k2")
    _, changes = walk(client, "ListRecords", metadataPrefix="oai_dc", from_=since)
    assert [(i.rsplit("/", 1)[1], r.find("o:header", NS).get("status"))
            for i, r in zip(identifiers(changes), changes, strict=True)
            if i.endswith(("k1", "k2"))] == [("k1", None), ("k2", "deleted")]


# Errors ------------------------------------------------------------------------------------

BAD_REQUESTS = [
    ({}, "badVerb"),
    ({"verb": "ListEverything"}, "badVerb"),
    ({"verb": ["Identify", "Identify"]}, "badVerb"),
    ({"verb": "Identify", "metadataPrefix": "oai_dc"}, "badArgument"),
    ({"verb": "ListRecords"}, "badArgument"),
    ({"verb": "GetRecord", "metadataPrefix": "oai_dc"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": ["oai_dc", "oai_dc"]}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-13-01"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-05-01T1\u0660:00:00Z"},
     "badArgument"),  # an Arabic-Indic digit: \d would take it, OAI-PMH.xsd does not
    ({"verb": "Identify", "a\x01b": "x"}, "badArgument"),  # a name XML cannot carry
    # After every feed there can be (ids grow across a PostgreSQL session: 999 was reached).
    ({"verb": "ListSets", "resumptionToken": f"ListSets,{2**63 - 1},0,0"}, "badResumptionToken"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-05-01T10:00Z"},
     "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-05-01T10:00:00.5Z"},
     "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-05-01",
      "until": "2024-05-02T00:00:00Z"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "from": "2024-05-02",
      "until": "2024-05-01"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "resumptionToken": "x"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "bad prefix"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "set": "a b"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "set": ""}, "badArgument"),
    ({"verb": "GetRecord", "metadataPrefix": "oai_dc", "identifier": "not a uri"}, "badArgument"),
    ({"verb": "ListSets", "set": "books"}, "badArgument"),
    ({"verb": "ListRecords", "metadataPrefix": "marc21"}, "cannotDisseminateFormat"),
    ({"verb": "GetRecord", "metadataPrefix": "marc21", "identifier": "oai:x.org:1"},
     "cannotDisseminateFormat"),
    ({"verb": "GetRecord", "metadataPrefix": "oai_dc", "identifier": "oai:x.org:1"},
     "idDoesNotExist"),
    ({"verb": "ListMetadataFormats", "identifier": "urn:isbn:0451450523"}, "idDoesNotExist"),
    ({"verb": "ListRecords", "resumptionToken": "ListRecords,oai_dc,,,,1,2,3"},
     "badResumptionToken"),
    ({"verb": "ListRecords",
      "resumptionToken": "ListRecords,oai_dc,,,,99999999999999999999,1,1,1,"},
     "badResumptionToken"),
    ({"verb": "ListSets", "resumptionToken": "ListRecords,oai_dc,,,,1,1,1,1,"},
     "badResumptionToken"),
    ({"verb": "ListRecords", "metadataPrefix": "oai_dc", "set": "no-such-feed"},
     "noRecordsMatch"),
]


@pytest.mark.parametrize(("params", "code"), BAD_REQUESTS)
def test_every_bad_request_gets_its_protocol_error(client, books, params, code):
    put(books, "a")
    document = ask(client, **params)
    assert error_codes(document) == [code]
    request = document.find("o:request", NS)
    if code in ("badVerb", "badArgument"):
        assert dict(request.attrib) == {}  # the base URL alone (3.2)
    else:
        assert request.get("verb") == params["verb"]


def test_a_token_from_a_listrecords_list_is_refused_by_listidentifiers(client, books, settings):
    settings.FEEDPUB_OAI_PAGE_SIZE = 1
    put(books, "a")
    put(books, "b")
    token = token_of(ask(client, verb="ListRecords", metadataPrefix="oai_dc")).text
    assert error_codes(ask(client, verb="ListIdentifiers", resumptionToken=token)) == [
        "badResumptionToken"]


def test_a_post_that_is_not_a_form_is_a_bad_argument(client, db):
    document = valid(client.post("/oai", data='{"verb": "Identify"}',
                                 content_type="application/json"))
    assert error_codes(document) == ["badArgument"]


NASTY = ["", " ", "\x00", "\x01", "\ufffe", "é", "'", '"<&>', "%", "oai:", "oai:x:y/z",
         "2024-05-01T1\u0660:00:00Z", "\u0662024-05-01",
         "9" * 40, "-1", "2024-02-30", "0000-00-00", "9999-12-31", "9999-12-31T23:59:59Z",
         ",,,,,,,,,", "ListRecords,oai_dc,,,,0,0,0,0,", "ListSets,0,0,0", "a" * 5000]
NAMES = ["verb", "metadataPrefix", "from", "until", "set", "identifier", "resumptionToken",
         "other", "a\x01b", "\ufffe", "\x00", "é<&>"]
VERB_NAMES = ["Identify", "ListMetadataFormats", "ListSets", "ListIdentifiers", "ListRecords",
              "GetRecord"]


def test_no_input_gets_a_5xx_and_every_answer_validates(client, books):
    put(books, "a")
    rng = random.Random(2002)
    for _ in range(300):
        params = {}
        for name in rng.sample(NAMES, rng.randint(0, 4)):
            values = NASTY + (VERB_NAMES if name == "verb" else ["oai_dc", "feedpub", "books"])
            params[name] = [rng.choice(values) for _ in range(rng.choice([1, 1, 1, 2]))]
        params["verb"] = params.get("verb") or [rng.choice(VERB_NAMES)]
        document = ask(client, "get" if rng.random() < 0.7 else "post", **params)
        if not error_codes(document):  # then the answer is the verb's element
            assert document[2].tag == f"{{{NS['o']}}}{params['verb'][0]}"


@pytest.mark.postgres
@pytest.mark.parametrize(("in_set", "index"), [(False, "record_datestamp"),
                                               (True, "record_feed_datestamp")])
def test_lists_are_read_by_the_datestamp_indexes(books, in_set, index):
    """Selected (from, until) and resumed (after a position) by a datestamp index, which a
    move of the feed (rerender_documents) moves with the records' datestamps."""
    from archives.db import fastsql

    for n in range(1, 4):
        put(books, f"k{n}", n)
    moment = Record.objects.get(key="k2").datestamp
    sql = fastsql.oai_records_sql(feed=in_set, start=True, end=True, after=True,
                                  content=True)
    params = [*([books.pk] if in_set else []), moment, moment, moment, moment, 1, 100]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # An index scan, or a bitmap one on a tiny table's statistics (as the full suite leaves
    # them): either way the index, never a scan of the table.
    assert re.search(rf"(Index Scan using|Bitmap Index Scan on) {index} ", plan), plan
