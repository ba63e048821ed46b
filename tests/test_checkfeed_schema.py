"""checkfeed and record schemas: each record it reads (linked pages, OAI-PMH's feedpub
format, Atom: the sample's records, or every one with --fetch-records) checked against the
schema it names, and each schema a feed links (rel="describedby") fetched once and checked to
be one; on our own server, and on hand-made feeds and repositories that break the rules."""

from __future__ import annotations

import io
import json
import random
from xml.sax.saxutils import escape

import pytest
from django.core.management import call_command
from feedpub_consumer import recordschemas
from feedpub_consumer.check import CheckFailed
from feedpub_consumer.checking import check_feed
from feedpub_consumer.http import Limits

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Entry, Record
from archives.validation import RecordChecker, check_record_schema

from .broken_feeds import Document, FeedServer, LinkedFeed
from .broken_linked_feeds import LinkedPagesFeed, entity
from .factories import record_data
from .feeds_live import make_live_feed, random_history

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "year": {"type": "integer", "x-dc": "date"},
        "issued": {"type": "string", "format": "date"},
        "creators": {"type": "array", "items": {"$ref": "#/$defs/person"}},
    },
    "required": ["year"],
    "$defs": {"person": {"type": "object", "required": ["name"],
                         "properties": {"name": {"type": "string"}}}},
}
# Version 2 of it: a licence may be given too (records of version 1 still match).
SCHEMA_2 = {**SCHEMA, "properties": {**SCHEMA["properties"], "licence": {"type": "string"}}}


def codes(result) -> set[tuple[str, str]]:
    """(code, path) of every problem, paths without the server's address."""
    return {(problem.code, "/" + problem.url.split("/", 3)[3]) for problem in result.problems}


def messages(result, code: str) -> list[str]:
    return [problem.message for problem in result.problems if problem.code == code]


# Our own server ---------------------------------------------------------------------------


@pytest.fixture
def live(live_server, settings, transactional_db):
    """A feed with a record schema, served by the live server: (feed, its base URL)."""
    settings.FEEDPUB_BASE_URL = live_server.url  # before any page is sealed
    feed = publishing.create_feed(slug="live", title="Live", page_size=3, record_schema=SCHEMA)
    return feed, f"{live_server.url}/feeds/live"


def put(feed, key: str, metadata: dict) -> None:
    publishing.put_record(feed=feed, key=key, data=record_data(title=key, metadata=metadata))


def test_our_own_feed_with_a_schema_checks_clean_in_every_format(live, live_server):
    feed, base = live
    for n in range(5):
        put(feed, f"k{n}", {"year": 2000 + n, "issued": f"200{n}-01-0{n + 1}",
                            "creators": [{"name": f"Author {n}"}]})
    seal_feed(feed)
    feed = publishing.update_feed(feed=feed, record_schema=SCHEMA_2)
    put(feed, "k1", {"year": 2001, "licence": "CC-BY-4.0"})
    put(feed, "k5", {"year": 2005})
    seal_feed(feed)

    linked = check_feed(f"{base}/pages/latest")
    assert linked.problems == []
    assert "7 records checked against 2 record schemas" in linked.notes
    atom = check_feed(f"{base}/", fetch_records=True)
    assert atom.problems == []
    # The live ones (a subscription document's describedby schema would be a third URL).
    assert any(note.startswith("6 records checked against ") for note in atom.notes)
    assert check_feed(f"{live_server.url}/oai").problems == []


def test_a_record_changed_behind_the_write_paths_back_is_reported_with_its_key_and_path(
        live):
    feed, base = live
    for n in range(4):
        put(feed, f"k{n}", {"year": 2000 + n})
    # What no door lets in: the database changed by hand, on the page not sealed yet (the
    # write path sealed the first, full, page as k2 filled it).
    wrong = {"year": "eighteen", "creators": [{}]}
    Record.objects.filter(feed=feed, key="k3").update(metadata=wrong)
    Entry.objects.filter(feed=feed, record__key="k3").update(metadata=wrong)
    schema_v1 = f"{base}/schema/1"

    linked = check_feed(f"{base}/pages/latest")
    assert codes(linked) == {("schema.record", "/feeds/live/pages/2")}
    assert messages(linked, "schema.record") == [
        f"<entry-4@{feed.uuid}>: record k3 ({base}/records/k3) does not match its schema "
        f'{schema_v1}: metadata.creators[0]: "name" is a required property; '
        'metadata.year: "eighteen" is not of type "integer"']

    atom = check_feed(f"{base}/", fetch_records=True)
    assert codes(atom) == {("schema.record", "/feeds/live/records/k3")}
    assert messages(atom, "schema.record") == [
        f"record k3 does not match its schema {schema_v1}: "
        'metadata.creators[0]: "name" is a required property; '
        'metadata.year: "eighteen" is not of type "integer"']
    # Without it, the sample's records (here all four live ones): read as JSON, not HEAD.
    sampled = check_feed(f"{base}/", sample=5)
    assert codes(sampled) == codes(atom)
    assert check_feed(f"{base}/", sample=0).problems == []  # entries only


def test_the_checkfeed_command_prints_the_record_that_does_not_match_and_exits_1(live):
    feed, base = live
    put(feed, "k1", {"year": 2001})
    Entry.objects.filter(feed=feed).update(metadata={"year": 2001, "issued": "2001-02-30"})
    out, errors = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_status:
        call_command("checkfeed", f"{base}/pages/latest", stdout=out, stderr=errors)
    assert exit_status.value.code == 1
    assert out.getvalue() == (
        f"{base}/pages/1  schema.record: <entry-1@{feed.uuid}>: record k1 ({base}/records/k1) "
        f'does not match its schema {base}/schema/1: metadata.issued: "2001-02-30" is not '
        'a "date"\n')
    assert "note: 1 record checked against 1 record schema\n" in errors.getvalue()


def test_a_feed_without_a_schema_checks_as_before(live_server, settings, transactional_db):
    feed, url = make_live_feed(live_server, settings)
    random_history(feed, random.Random(31), 12, ["a", "b", "c", "d"])
    for result in (check_feed(f"{live_server.url}/feeds/live/pages/latest"),
                   check_feed(url, fetch_records=True), check_feed(f"{live_server.url}/oai")):
        assert result.problems == []
        assert not any("schema" in note for note in result.notes)


# Hand-made linked pages -------------------------------------------------------------------


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def serve_schema(server: FeedServer, path: str, schema, *, status: int = 200) -> str:
    body = schema if isinstance(schema, bytes) else json.dumps(schema).encode()
    server.documents[path] = Document(body, status=status,
                                      content_type="application/schema+json")
    return server.url(path)


def linked_record(key: str, metadata, schema: str | None) -> bytes:
    record = {"key": key, "title": f"record {key}", "metadata": metadata}
    if schema is not None:
        record["schema"] = schema
    return json.dumps(record).encode()


def linked_feed(server: FeedServer, metadata: list, schema: str | None) -> LinkedPagesFeed:
    """Two pages of PUT entities, record k<n> holding metadata[n - 1] and naming `schema`."""
    feed = LinkedPagesFeed(server, pages=2, per_page=len(metadata) // 2)
    for n, (each, value) in enumerate(zip(feed.entities, metadata, strict=True), start=1):
        each.body = linked_record(f"k{n}", value, schema)
    feed.publish()
    return feed


def test_linked_pages_whose_records_match_their_schema_are_clean_and_it_is_fetched_once(
        server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    feed = linked_feed(server, [{"year": n} for n in range(6)], schema)
    result = check_feed(feed.latest)
    assert result.problems == []
    assert "6 records checked against 1 record schema" in result.notes
    assert server.requested("/schemas/1") == 1
    [accept] = [headers["Accept"] for _, path, headers in server.requests
                if path == "/schemas/1"]
    assert accept.startswith("application/schema+json")


def test_it_reports_each_linked_record_that_does_not_match(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    feed = linked_feed(server, [{"year": 1}, {"year": "one"}, {"year": 3},
                                {"creators": "me", "issued": "yesterday"}], schema)
    result = check_feed(feed.latest)
    assert codes(result) == {("schema.record", "/pages/1"), ("schema.record", "/pages/2")}
    assert sorted(messages(result, "schema.record")) == [
        f"<2@hand-made>: record k2 ({server.url('/records/k2')}) does not match its schema "
        f'{schema}: metadata.year: "one" is not of type "integer"',
        f"<4@hand-made>: record k4 ({server.url('/records/k4')}) does not match its schema "
        f"{schema}: "
        'metadata: "year" is a required property; '
        'metadata.creators: "me" is not of type "array"; '
        'metadata.issued: "yesterday" is not a "date"',
    ]


def test_it_names_at_most_five_places_of_a_record(server):
    many = {"type": "object", "properties": {f"p{n}": {"type": "integer"} for n in range(8)}}
    schema = serve_schema(server, "/schemas/many", many)
    feed = linked_feed(server, [{f"p{n}": "x" for n in range(8)}, {}], schema)
    [message] = messages(check_feed(feed.latest), "schema.record")
    assert message.count('is not of type "integer"') == 5
    assert message.endswith('metadata.p4: "x" is not of type "integer"; and 3 places more')


def test_it_names_each_place_as_the_write_path_does(server):
    metadata = {"year": 1.5, "creators": [{"name": 7}, "x"], "issued": "2024-02-30"}
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    feed = linked_feed(server, [metadata, {"year": 1}], schema)
    [message] = messages(check_feed(feed.latest), "schema.record")
    said = message.split(f"does not match its schema {schema}: ", 1)[1]
    assert said == "; ".join(RecordChecker(SCHEMA).errors(metadata))


@pytest.mark.parametrize(("body", "status", "code", "said"), [
    (b"", 404, "schema.unresolved", "answered HTTP 404"),
    (b"<html>not here</html>", 200, "schema.invalid", "is not JSON"),
    ({"type": "integr"}, 200, "schema.invalid",
     'is not a JSON Schema (draft 2020-12): at type: "integr" is not valid'),
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, 200, "schema.invalid",
     "its $schema is 'http://json-schema.org/draft-07/schema#', not "
     "https://json-schema.org/draft/2020-12/schema"),
    (["a list"], 200, "schema.invalid", "a JSON list, not a schema"),
], ids=["404", "not-json", "not-a-schema", "another-draft", "not-an-object"])
def test_it_reports_a_schema_that_is_not_one_once(server, body, status, code, said):
    schema = serve_schema(server, "/schemas/1", body, status=status)
    feed = linked_feed(server, [{"year": "one"}, {"year": "two"}, {"year": 3}, {}], schema)
    result = check_feed(feed.latest)
    assert codes(result) == {(code, "/pages/2")}  # where it was first met; no record
    [message] = messages(result, code)
    assert message.startswith(f"schema {schema} ")
    assert said in message
    assert server.requested("/schemas/1") == 1
    assert "0 records checked against 0 record schemas (1 unusable)" in result.notes


def test_it_refuses_a_schema_whose_ref_leads_elsewhere_and_fetches_nothing_more(server):
    serve_schema(server, "/schemas/person", SCHEMA["$defs"]["person"])
    remote = {"type": "object", "properties": {"creator": {"$ref": "person"}}}
    schema = serve_schema(server, "/schemas/1", remote)
    feed = linked_feed(server, [{"creator": {}}, {}], schema)
    result = check_feed(feed.latest)
    assert codes(result) == {("schema.invalid", "/pages/2")}
    assert "/schemas/person' is not present in a registry and retrieving it failed: " \
        "Retrieval is disabled" in messages(result, "schema.invalid")[0]
    assert server.requested("/schemas/person") == 0


def test_a_record_naming_no_schema_is_not_checked_and_one_naming_a_non_url_is_reported(
        server):
    feed = linked_feed(server, [{"year": "one"}, {}], None)
    result = check_feed(feed.latest)
    assert result.problems == []
    assert not any("schema" in note for note in result.notes)
    feed.entities[1].body = linked_record("k2", {"year": 2}, 42)
    feed.publish()
    assert messages(check_feed(feed.latest), "schema.record") == [
        f"<2@hand-made>: record k2 ({server.url('/records/k2')}): its schema 42 is not a URL"]


def test_deletions_and_bodies_of_other_shapes_are_not_checked(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    feed = LinkedPagesFeed(server, pages=1, per_page=0)
    feed.add_entities(
        entity(1, body=linked_record("k1", {"year": 1}, schema)),
        entity(2, body=b'["schema", 1]'),  # JSON, but no record
        entity(3, body=b'"schema" of a text', content_type="text/plain"),
        entity(4, key="k1", operation="http-equiv=DELETE"))
    result = check_feed(feed.latest)
    assert result.problems == []
    assert "1 record checked against 1 record schema" in result.notes


def test_a_schema_fetch_that_spends_the_last_request_stops_the_walk_cleanly(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    feed = linked_feed(server, [{"year": 1}, {"year": 2}], schema)
    # Two requests: the entry point's redirect and the newest page, none left for its schema.
    result = check_feed(feed.latest, limits=Limits(max_requests=2), http_checks=False)
    assert not result.complete
    assert result.problems == []
    assert any("stopped early" in note for note in result.notes)


# Hand-made Atom feeds: describedby, and --fetch-records ---------------------------------


def describe(server: FeedServer, href: str, paths=("/feed",)) -> None:
    """A describedby link to `href` on each document at `paths`."""
    link = (f'<link rel="describedby" type="application/schema+json" href="{href}"/>'
            "<entry>").encode()
    for path in paths:
        document = server.documents[path]
        document.body = document.body.replace(b"<entry>", link, 1)


def test_an_atom_feed_whose_describedby_schema_is_one_is_clean_and_it_is_fetched_once(
        server):
    feed = LinkedFeed(server, pages=3)
    schema = serve_schema(server, "/schema", SCHEMA)
    describe(server, schema, paths=("/feed", "/archives/1", "/archives/2", "/archives/3"))
    result = check_feed(feed.subscription, sample=0)
    assert result.problems == []
    assert result.notes == [  # why none was, and how
        "0 records checked against 1 record schema (an entry carries no metadata, and "
        "--sample is 0: --fetch-records reads every live record's JSON, one request a record)"]
    assert server.requested("/schema") == 1


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"", 404, "schema.unresolved"),
    (b"{}{}", 200, "schema.invalid"),
    ({"properties": {"year": {"type": 5}}}, 200, "schema.invalid"),
], ids=["404", "not-json", "not-a-schema"])
def test_it_reports_a_describedby_schema_that_is_not_one(server, body, status, code):
    feed = LinkedFeed(server, pages=2)
    schema = serve_schema(server, "/schema", body, status=status)
    describe(server, schema)
    result = check_feed(feed.subscription, sample=0)
    assert codes(result) == {(code, "/feed")}
    assert messages(result, code)[0].startswith(f"describedby {schema} ")


def test_a_describedby_link_of_another_type_is_not_a_schema(server):
    feed = LinkedFeed(server, pages=2)
    document = server.documents["/feed"]
    document.body = document.body.replace(
        b"<entry>", b'<link rel="describedby" type="application/rdf+xml" href="/void"/><entry>',
        1)
    assert check_feed(feed.subscription, sample=0).problems == []
    assert server.requested("/void") == 0


def atom_record(server: FeedServer, n: int, metadata, schema: str | None) -> None:
    """Record n of a LinkedFeed (urn:x:n) served as feedpub's record JSON."""
    body = linked_record(f"k{n}", metadata, schema)
    server.documents[f"/records/{n}"] = Document(body, content_type="application/json")


def test_fetch_records_checks_every_live_record_against_its_schema(server):
    feed = LinkedFeed(server, pages=3)  # records 1 to 7, at /records/<n>
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    for n in range(1, 8):
        atom_record(server, n, {"year": n}, schema)
    atom_record(server, 6, {"year": "six"}, schema)
    result = check_feed(feed.subscription, fetch_records=True)
    assert codes(result) == {("schema.record", "/records/6")}
    assert messages(result, "schema.record") == [
        f"record k6 does not match its schema {schema}: "
        'metadata.year: "six" is not of type "integer"']
    assert "7 records checked against 1 record schema" in result.notes
    assert all(server.requested(f"/records/{n}") == 1 for n in range(1, 8))
    assert all(headers["Accept"] == "application/json" for _, path, headers in server.requests
               if path.startswith("/records/"))


def test_by_default_the_samples_records_are_checked_against_the_feeds_schema(server):
    feed = LinkedFeed(server, pages=3)  # records 1 to 7, at /records/<n>
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    describe(server, schema, paths=("/feed", "/archives/1", "/archives/2", "/archives/3"))
    for n in range(1, 8):
        atom_record(server, n, {"year": "unknown" if n == 6 else n}, schema)
    result = check_feed(feed.subscription, sample=7, http_checks=False)

    assert codes(result) == {("schema.record", "/records/6")}
    assert result.notes == [
        "7 records checked against 1 record schema (a sample of the live records, --sample 7; "
        "--fetch-records reads every live record's JSON, one request a record)"]
    # 4 documents, the schema, and a GET per sampled record where a HEAD was: no more.
    assert result.requests == 4 + 1 + 7
    assert all(server.requested(f"/records/{n}") == 1 for n in range(1, 8))


def test_fetch_records_reads_other_shapes_without_a_problem_and_reports_every_dead_link(
        server):
    feed = LinkedFeed(server, pages=2)  # records at /records/<n> answer <record/>
    assert check_feed(feed.subscription, fetch_records=True).problems == []
    del server.documents["/records/2"]
    del server.documents["/records/4"]
    result = check_feed(feed.subscription, fetch_records=True)
    assert codes(result) == {("pmh.alternate", "/archives/1"), ("pmh.alternate", "/archives/2")}


def test_fetch_records_is_for_feeds_whose_entries_link_their_records(server):
    feed = LinkedPagesFeed(server, pages=1)
    with pytest.raises(CheckFailed, match="fetching records is for Atom feeds only"):
        check_feed(feed.latest, fetch_records=True)
    atom = LinkedFeed(server, pages=1)
    with pytest.raises(CheckFailed, match="a metadata prefix and a set are for OAI-PMH only"):
        check_feed(atom.subscription, set_spec="books")


# Hand-made OAI-PMH repositories -----------------------------------------------------------

OAI_NS = "http://www.openarchives.org/OAI/2.0/"


def oai_answer(verb: str, inner: str) -> Document:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><OAI-PMH xmlns="{OAI_NS}">'
            "<responseDate>2024-01-01T00:00:00Z</responseDate>"
            f'<request verb="{verb}">http://repository.example/oai</request>'
            f"<{verb}>{inner}</{verb}></OAI-PMH>")
    return Document(body.encode(), content_type="text/xml; charset=utf-8")


def oai_error(code: str) -> Document:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><OAI-PMH xmlns="{OAI_NS}">'
            "<responseDate>2024-01-01T00:00:00Z</responseDate>"
            '<request>http://repository.example/oai</request>'
            f'<error code="{code}">as said</error></OAI-PMH>')
    return Document(body.encode(), content_type="text/xml; charset=utf-8")


def oai_record(n: int, metadata, schema: str | None, *, deleted: bool = False) -> str:
    status = ' status="deleted"' if deleted else ""
    header = (f"<header{status}>"
              f"<identifier>oai:hand-made:k{n}</identifier>"
              f"<datestamp>2024-01-01T00:0{n}:00Z</datestamp></header>")
    if deleted:
        return f"<record>{header}</record>"
    return (f"<record>{header}<metadata>"
            '<record xmlns="urn:feedpub:oai-record:1">'
            f"<key>k{n}</key><url>https://records.example/k{n}</url><title>record {n}</title>"
            f"<metadata>{escape(json.dumps(metadata))}</metadata>"
            + (f"<schema>{escape(schema)}</schema>" if schema is not None else "")
            + "</record></metadata></record>")


def repository(server: FeedServer, pages: list[list[str]], *,
               prefixes=("oai_dc", "feedpub")) -> str:
    """A repository at /oai listing `pages` of records along resumptionTokens t1, t2...;
    its base URL (which answers a badVerb error, as a repository does)."""
    server.documents["/oai"] = oai_error("badVerb")
    server.documents["/oai?verb=Identify"] = oai_answer(
        "Identify", "<repositoryName>Hand-made</repositoryName>"
        "<granularity>YYYY-MM-DDThh:mm:ssZ</granularity>")
    server.documents["/oai?verb=ListMetadataFormats"] = oai_answer("ListMetadataFormats", "".join(
        f"<metadataFormat><metadataPrefix>{prefix}</metadataPrefix></metadataFormat>"
        for prefix in prefixes))
    for number, records in enumerate(pages):
        path = ("/oai?verb=ListRecords&metadataPrefix=feedpub" if number == 0
                else f"/oai?verb=ListRecords&resumptionToken=t{number}")
        token = f"t{number + 1}" if number < len(pages) - 1 else ""
        server.documents[path] = oai_answer(
            "ListRecords", "".join(records) + f"<resumptionToken>{token}</resumptionToken>")
    return server.url("/oai")


def test_an_oai_repository_whose_feedpub_records_match_their_schema_is_clean(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    base = repository(server, [[oai_record(1, {"year": 1}, schema),
                                oai_record(2, {"year": 2}, None)],
                               [oai_record(3, {"year": 3}, schema),
                                oai_record(4, None, None, deleted=True)]])
    result = check_feed(base, format="oai-pmh")
    assert result.problems == []
    assert result.documents == 4  # Identify, ListMetadataFormats, two lists
    assert "2 records checked against 1 record schema" in result.notes
    assert server.requested("/schemas/1") == 1


def test_it_reports_an_oai_record_that_does_not_match_its_schema(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    base = repository(server, [[oai_record(1, {"year": 1}, schema)],
                               [oai_record(2, {"year": 2, "creators": [{"name": None}]},
                                           schema)]])
    result = check_feed(f"{base}?verb=Identify")  # told by the URL
    assert codes(result) == {("schema.record", "/oai?verb=ListRecords&resumptionToken=t1")}
    assert messages(result, "schema.record") == [
        "oai:hand-made:k2: record k2 (https://records.example/k2) does not match its schema "
        f'{schema}: metadata.creators[0].name: null is not of type "string"']


def test_it_reports_an_oai_records_schema_that_does_not_resolve(server):
    base = repository(server, [[oai_record(1, {"year": 1}, server.url("/schemas/9")),
                                oai_record(2, {"year": 2}, server.url("/schemas/9"))]])
    result = check_feed(base)  # told by its first answer (a badVerb error)
    assert codes(result) == {
        ("schema.unresolved", "/oai?verb=ListRecords&metadataPrefix=feedpub")}
    assert server.requested("/schemas/9") == 1


def test_it_reports_what_stops_an_oai_harvester(server):
    base = repository(server, [[oai_record(1, {}, None)], [oai_record(2, {}, None)]])
    server.documents["/oai?verb=ListRecords&resumptionToken=t1"] = oai_answer(
        "ListRecords", oai_record(2, {}, None).replace("<metadata>{}", "<metadata>{oops", 1)
        + "<resumptionToken>t1</resumptionToken>")
    result = check_feed(base, format="oai-pmh")
    assert codes(result) == {("oai.record", "/oai?verb=ListRecords&resumptionToken=t1"),
                             ("oai.resumption", "/oai?verb=ListRecords&resumptionToken=t1")}
    server.documents["/oai?verb=ListRecords&resumptionToken=t1"] = oai_error("badResumptionToken")
    result = check_feed(base, format="oai-pmh")
    assert messages(result, "oai.error") == ["badResumptionToken: as said"]


def test_an_empty_oai_list_is_clean_and_a_repository_without_feedpub_says_so(server):
    base = repository(server, [[]], prefixes=("oai_dc",))
    server.documents["/oai?verb=ListRecords&metadataPrefix=oai_dc"] = oai_error(
        "noRecordsMatch")
    result = check_feed(base, format="oai-pmh")
    assert result.problems == []
    assert any("offers no feedpub format" in note for note in result.notes)


def test_a_url_that_is_no_oai_repository_cannot_be_checked_as_one(server):
    with pytest.raises(CheckFailed, match="not an OAI-PMH repository"):
        check_feed(server.url("/nothing"), format="oai-pmh")


def test_the_checkfeed_command_checks_one_oai_set(server):
    schema = serve_schema(server, "/schemas/1", SCHEMA)
    repository(server, [[oai_record(1, {"year": 1}, schema)]])
    server.documents["/oai?verb=ListRecords&metadataPrefix=feedpub&set=books"] = oai_answer(
        "ListRecords", oai_record(2, {"year": "two"}, schema))
    out, errors = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_status:
        call_command("checkfeed", server.url("/oai"), "--format", "oai-pmh", "--set", "books",
                     stdout=out, stderr=errors)
    assert exit_status.value.code == 1
    assert "schema.record: oai:hand-made:k2: record k2" in out.getvalue()


# The formats checked ----------------------------------------------------------------------

FORMAT_SAMPLES = {
    "date": ["2024-02-29", "2023-02-29", "2024-1-1", "24-01-01", 2024],
    "time": ["12:00:00", "23:59:59", "24:00:00", "12:00", "12:00:00Z"],
    "date-time": ["2024-01-01T00:00:00Z", "2024-01-01 00:00:00+01:00", "2024-02-30T00:00:00Z",
                  "2024-01-01T00:00:00", "2024-01-01"],
    "email": ["a@example.org", "no-at-sign"],
    "ipv4": ["192.0.2.1", "256.0.0.1", "::1"],
    "ipv6": ["::1", "2001:db8::1", "192.0.2.1"],
    "uuid": ["6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b8109dad11d180b400c04fd430c8", "x"],
    "regex": ["^a+$", "(", "[a-"],
    "uri": ["https://example.org/a b", "https://example.org/a", "urn:isbn:0451450523",
            "/relative", "no scheme"],
}


def test_the_consumer_and_the_server_give_every_record_the_same_verdict():
    """checkfeed compiles a schema as the write path does: the same refusals, word for word,
    for every format and for values of the wrong type."""
    for name, values in FORMAT_SAMPLES.items():
        schema = {"type": "object", "properties": {"v": {"type": "string", "format": name}}}
        server = check_record_schema(schema)
        consumer = recordschemas.compile_schema(schema, "https://example.org/schema")
        verdicts = [recordschemas.mismatches(consumer, {"v": value}) for value in values]
        assert verdicts == [server.errors({"v": value}) for value in values], name
        assert [] in verdicts, name  # each sample tells both ways
        assert any(verdicts), name


