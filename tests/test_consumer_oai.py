"""The harvester on OAI-PMH 2.0 repositories, against a server nobody here wrote:
`oaipmh.server` (of oaipmh, pyoai's maintained fork), over a small in-memory repository,
served by the standard library's http.server on a free port."""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from feedpub_consumer.cli import harvest_main
from feedpub_consumer.harvest import HarvestFailed
from feedpub_consumer.harvesting import harvest
from feedpub_consumer.http import HttpClient, Limits
from feedpub_consumer.state import StateError
from lxml.etree import SubElement
from oaipmh import common, error
from oaipmh import server as oai_server
from oaipmh.metadata import MetadataRegistry
from oaipmh_scythe import Scythe

SECONDS, DAYS = "YYYY-MM-DDThh:mm:ssZ", "YYYY-MM-DD"
FEEDPUB_NS = "urn:feedpub:oai-record:1"


# A repository behind oaipmh's server -------------------------------------------------------

@dataclass
class Item:
    identifier: str
    datestamp: datetime  # naive UTC, as oaipmh wants it
    sets: list[str]
    fields: dict[str, list[str]]  # Dublin Core; feedpub's record is made from them too
    deleted: bool = False


@dataclass
class Repository:
    """The IBatchingOAI interface of oaipmh, over a dict: what BatchingServer pages through."""

    base_url: str = ""
    granularity: str = SECONDS
    prefixes: tuple[str, ...] = ("oai_dc",)
    items: dict[str, Item] = field(default_factory=dict)

    def put(self, oai_id: str, title: str, /, *, sets: tuple[str, ...] = (),
            stamp: datetime | None = None, **fields: list[str]) -> None:
        self.items[oai_id] = Item(oai_id, stamp or now(), list(sets),
                                  {"title": [title], **fields})

    def delete(self, identifier: str) -> None:
        item = self.items[identifier]
        item.deleted, item.datestamp, item.fields = True, now(), {}

    def live(self) -> dict[str, str]:
        return {item.identifier: item.fields["title"][0]
                for item in self.items.values() if not item.deleted}

    # The interface oaipmh calls ----------------------------------------------------------

    def identify(self):
        return common.Identify(
            repositoryName="A repository nobody here wrote", baseURL=self.base_url,
            protocolVersion="2.0", adminEmails=["admin@example.org"],
            earliestDatestamp=datetime(2020, 1, 1), deletedRecord="persistent",  # noqa: DTZ001
            granularity=self.granularity, compression=["identity"],
            toolkit_description=False)

    def listMetadataFormats(self, identifier=None):  # noqa: N802 (oaipmh's names)
        schemas = {"oai_dc": ("http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
                              oai_server.NS_OAIDC),
                   "feedpub": ("https://feedpub.example.org/oai-record.xsd", FEEDPUB_NS)}
        return [(prefix, *schemas[prefix]) for prefix in self.prefixes]

    def listSets(self, cursor=0, batch_size=10):  # noqa: N802
        specs = sorted({spec for item in self.items.values() for spec in item.sets})
        return [(spec, spec.title(), None) for spec in specs][cursor:cursor + batch_size]

    def _matching(self, metadataPrefix, set=None, from_=None, until=None):  # noqa: A002, N803
        if metadataPrefix not in self.prefixes:
            raise error.CannotDisseminateFormatError(f"no {metadataPrefix} here")
        items = sorted(self.items.values(), key=lambda item: (item.datestamp, item.identifier))
        return [item for item in items
                if (from_ is None or item.datestamp >= from_)
                and (until is None or item.datestamp <= until)
                and (set is None or set in item.sets)]

    def listRecords(self, metadataPrefix, set=None, from_=None, until=None,  # noqa: A002, N802, N803
                    cursor=0, batch_size=10):
        return [self._record(item) for item in self._matching(
            metadataPrefix, set, from_, until)[cursor:cursor + batch_size]]

    def listIdentifiers(self, metadataPrefix, set=None, from_=None, until=None,  # noqa: A002, N802, N803
                        cursor=0, batch_size=10):
        return [header for header, _, _ in self.listRecords(
            metadataPrefix, set, from_, until, cursor, batch_size)]

    def getRecord(self, metadataPrefix, identifier):  # noqa: N802, N803
        if identifier not in self.items:
            raise error.IdDoesNotExistError(identifier)
        return self._record(self.items[identifier])

    def _record(self, item: Item):
        header = common.Header(None, item.identifier, item.datestamp, item.sets, item.deleted)
        return header, common.Metadata(None, item.fields), None


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def old(day: int) -> datetime:
    return datetime(2020, 1, day, 12)  # noqa: DTZ001 (oaipmh's datestamps are naive UTC)


def feedpub_writer(element, metadata) -> None:
    """feedpub's lossless format, as its OAI-PMH server writes it."""
    fields = metadata.getMap()
    record = SubElement(element, f"{{{FEEDPUB_NS}}}record", nsmap={None: FEEDPUB_NS})
    for name, value in (("key", fields["key"][0]), ("url", fields["identifier"][0]),
                        ("atomId", fields["atom_id"][0]), ("title", fields["title"][0]),
                        ("summary", fields["description"][0])):
        SubElement(record, f"{{{FEEDPUB_NS}}}{name}").text = value
    SubElement(record, f"{{{FEEDPUB_NS}}}link", href=fields["identifier"][1], rel="related",
               title="Landing page")
    SubElement(record, f"{{{FEEDPUB_NS}}}link", href=fields["identifier"][0])
    for name in ("created", "updated"):
        SubElement(record, f"{{{FEEDPUB_NS}}}{name}").text = "2026-11-22T08:04:15.755573Z"
    SubElement(record, f"{{{FEEDPUB_NS}}}metadata").text = fields["json"][0]


@dataclass
class OaiServer:
    url: str
    repository: Repository
    requests: list[dict[str, str]]  # the arguments of every request received
    break_tokens: bool = False  # send the server a garbled resumptionToken

    def list_records_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if r.get("verb") == "ListRecords"]


@pytest.fixture
def oai():
    repository = Repository()
    registry = MetadataRegistry()
    registry.registerWriter("oai_dc", oai_server.oai_dc_writer)
    registry.registerWriter("feedpub", feedpub_writer)
    server = oai_server.BatchingServer(repository, metadata_registry=registry,
                                      resumption_batch_size=3)
    received: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            query = urllib.parse.urlsplit(self.path).query
            arguments = {name: values[0] for name, values in
                         urllib.parse.parse_qs(query, keep_blank_values=True).items()}
            received.append(dict(arguments))
            if served.break_tokens and "resumptionToken" in arguments:
                arguments["resumptionToken"] = "garbled"
            body = server.handleRequest(arguments)
            self.send_response(200)
            self.send_header("Content-Type", "text/xml; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    repository.base_url = f"http://127.0.0.1:{httpd.server_port}/oai"
    served = OaiServer(repository.base_url, repository, received)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,),
                              daemon=True)
    thread.start()
    yield served
    httpd.shutdown()
    httpd.server_close()


def books(repository: Repository, count: int) -> None:
    for number in range(1, count + 1):
        repository.put(f"oai:example.org:book-{number}", f"Book {number}", stamp=old(number),
                       sets=("books", "odd" if number % 2 else "even"),
                       description=[f"About book {number}"],
                       identifier=[f"https://example.org/books/{number}", f"isbn-{number}"],
                       creator=["Someone", "Someone else"])


def titles(result) -> dict[str, str]:
    return {record["id"]: record["title"] for record in result.records}


# Harvesting -------------------------------------------------------------------------------

def test_a_first_harvest_returns_exactly_the_live_records_in_dublin_core(oai, tmp_path):
    books(oai.repository, 5)
    oai.repository.delete("oai:example.org:book-2")

    result = harvest(oai.url, format="oai-pmh", state_path=tmp_path / "oai.state")

    assert result.complete, result.warnings
    assert titles(result) == oai.repository.live()
    first = next(iter(result.records))
    assert first == {
        "id": "oai:example.org:book-1", "updated": "2020-01-01T12:00:00Z", "source": oai.url,
        "sets": ["books", "odd"], "title": "Book 1", "summary": "About book 1",
        "links": [{"href": "https://example.org/books/1"}],
        "alternate": "https://example.org/books/1",
        "metadata": {"title": ["Book 1"], "creator": ["Someone", "Someone else"],
                     "description": ["About book 1"],
                     "identifier": ["https://example.org/books/1", "isbn-1"]},
        "key": None, "atom_id": None,  # not in Dublin Core
        "language": "",  # no dc:language
    }
    assert [r["metadataPrefix"] for r in oai.list_records_requests()[:1]] == ["oai_dc"]
    assert result.summary.live_records == 4


def test_resumption_tokens_are_followed_across_several_batches(oai):
    books(oai.repository, 10)  # batches of 3: four answers

    result = harvest(oai.url, format="oai-pmh")

    assert result.complete, result.warnings
    assert titles(result) == oai.repository.live()
    asked = oai.list_records_requests()
    assert len(asked) == 4
    assert ["resumptionToken" in request for request in asked] == [False, True, True, True]
    assert result.summary.entries_applied == 10


def test_a_second_harvest_sends_the_last_response_date_as_from_and_applies_only_changes(
        oai, tmp_path):
    books(oai.repository, 7)
    state = tmp_path / "oai.state"
    first = harvest(oai.url, format="oai-pmh", state_path=state)
    assert first.complete, first.warnings
    last_response_date = first.next_from

    oai.repository.put("oai:example.org:book-3", "Book 3, second edition")
    oai.repository.put("oai:example.org:book-8", "Book 8")
    oai.repository.delete("oai:example.org:book-5")
    oai.requests.clear()
    again = harvest(oai.url, state_path=state)  # the state file says OAI-PMH

    (asked, *_) = oai.list_records_requests()
    assert asked["from"] == last_response_date
    assert len(last_response_date) == len("2026-01-01T00:00:00Z")
    assert again.summary.entries_applied == 3
    assert again.summary.deletions == 1
    assert titles(again) == oai.repository.live()
    assert "oai:example.org:book-5" not in titles(again)


def test_nothing_changed_is_a_complete_run_that_moves_from(oai, tmp_path):
    books(oai.repository, 2)
    state = tmp_path / "oai.state"
    harvest(oai.url, format="oai-pmh", state_path=state)

    again = harvest(oai.url, state_path=state)  # oaipmh answers noRecordsMatch

    assert again.complete, again.warnings
    assert again.summary.entries_applied == 0
    assert again.next_from >= again.sent_from
    assert titles(again) == oai.repository.live()


def test_a_repository_of_day_granularity_gets_the_date_part_as_from(oai, tmp_path):
    oai.repository.granularity = DAYS
    books(oai.repository, 2)
    state = tmp_path / "oai.state"
    first = harvest(oai.url, format="oai-pmh", state_path=state)
    oai.repository.put("oai:example.org:book-9", "Book 9")

    again = harvest(oai.url, state_path=state)

    assert oai.list_records_requests()[-1]["from"] == first.next_from
    assert len(first.next_from) == len("2026-01-01")
    assert titles(again) == oai.repository.live()


@pytest.mark.parametrize("stop", ["badResumptionToken", "max-requests"])
def test_a_run_that_stops_half_way_is_incomplete_and_keeps_the_previous_from(oai, tmp_path,
                                                                            stop):
    books(oai.repository, 2)
    state = tmp_path / "oai.state"
    first = harvest(oai.url, format="oai-pmh", state_path=state)
    for number in range(10, 17):  # three batches
        oai.repository.put(f"oai:example.org:book-{number}", f"Book {number}")

    oai.break_tokens = stop == "badResumptionToken"
    limits = Limits(max_requests=3 if stop == "max-requests" else 100)  # Identify + 2 lists
    stopped = harvest(oai.url, state_path=state, limits=limits)

    assert not stopped.complete
    assert stopped.sent_from == first.next_from
    assert stopped.next_from == first.next_from
    if stop == "badResumptionToken":
        assert any("badResumptionToken" in warning for warning in stopped.warnings)
    else:
        assert any("request budget of 3" in warning for warning in stopped.warnings)
    oai.break_tokens = False
    oai.requests.clear()
    again = harvest(oai.url, state_path=state)
    assert again.complete, again.warnings
    assert oai.list_records_requests()[0]["from"] == first.next_from
    assert titles(again) == oai.repository.live()


def test_an_error_code_on_the_first_list_fails_the_run_with_its_code_and_message(oai):
    books(oai.repository, 2)
    with pytest.raises(HarvestFailed, match="cannotDisseminateFormat: no marc21 here"):
        harvest(oai.url, format="oai-pmh", metadata_prefix="marc21")


def test_the_feedpub_format_is_preferred_when_the_repository_offers_it(oai):
    oai.repository.prefixes = ("oai_dc", "feedpub")
    oai.repository.put("oai:feedpub:demo:isbn-1", "A book", stamp=old(1), sets=("demo",),
                       key=["isbn-1"], description=["Its summary"],
                       identifier=["http://host/feeds/demo/records/isbn-1",
                                   "https://data.example.org/isbn-1"],
                       atom_id=["urn:uuid:6d0b"], json=['{"year": 2016, "tags": ["a"]}'])

    (record,) = harvest(oai.url).records  # told OAI-PMH by the answer to the base URL

    assert oai.list_records_requests()[0]["metadataPrefix"] == "feedpub"
    assert record == {
        "id": "oai:feedpub:demo:isbn-1", "updated": "2020-01-01T12:00:00Z",
        "source": oai.url, "sets": ["demo"], "key": "isbn-1", "title": "A book",
        "summary": "Its summary", "alternate": "http://host/feeds/demo/records/isbn-1",
        "atom_id": "urn:uuid:6d0b", "metadata": {"year": 2016, "tags": ["a"]},
        "links": [{"href": "https://data.example.org/isbn-1", "rel": "related",
                   "title": "Landing page"},
                  {"href": "http://host/feeds/demo/records/isbn-1"}],
        "language": "",  # none of its own: its feed's
    }


def test_a_request_url_is_taken_as_oai_pmh_with_its_prefix_and_set(oai, tmp_path):
    books(oai.repository, 6)
    client = HttpClient()

    result = harvest(f"{oai.url}?verb=ListRecords&metadataPrefix=oai_dc&set=even",
                     client=client, state_path=tmp_path / "oai.state")

    assert sorted(titles(result).values()) == ["Book 2", "Book 4", "Book 6"]
    assert oai.list_records_requests()[0]["set"] == "even"
    assert [url.split("?")[1].split("&")[0] for _, url, _ in client.log] == [
        "verb=Identify", "verb=ListRecords"]  # no ListMetadataFormats: the prefix was given


def test_the_state_file_refuses_another_base_url_prefix_or_set(oai, tmp_path):
    books(oai.repository, 2)
    state = tmp_path / "oai.state"
    harvest(oai.url, format="oai-pmh", set_spec="odd", state_path=state)

    with pytest.raises(StateError, match="for set odd, not set even"):
        harvest(oai.url, set_spec="even", state_path=state)
    with pytest.raises(StateError, match="for metadata prefix oai_dc, not metadata prefix x"):
        harvest(oai.url, metadata_prefix="x", state_path=state)
    with pytest.raises(StateError, match="not base"):
        harvest(oai.url + "2", state_path=state)
    with pytest.raises(StateError, match="in the oai-pmh format, not atom"):
        harvest(oai.url, format="atom", state_path=state)
    with sqlite3.connect(state) as db:
        meta = dict(db.execute("SELECT key, value FROM meta"))
    assert {name: meta[name] for name in ("format", "base", "prefix", "set")} == {
        "format": "oai-pmh", "base": oai.url, "prefix": "oai_dc", "set": "odd"}


def test_what_we_harvest_is_what_another_harvester_lists(oai):
    """oaipmh-scythe, a harvester nobody here wrote, sees the same live records."""
    books(oai.repository, 8)
    oai.repository.delete("oai:example.org:book-4")
    with Scythe(oai.url) as scythe:
        theirs = {record.header.identifier for record in
                  scythe.list_records(metadata_prefix="oai_dc", ignore_deleted=True)}
    assert set(titles(harvest(oai.url, format="oai-pmh"))) == theirs


# The command line -------------------------------------------------------------------------

def test_feedpub_harvest_writes_the_records_as_json_lines(oai, tmp_path, capsys):
    books(oai.repository, 4)
    output = tmp_path / "x.jsonl"

    status = harvest_main([oai.url, "--format", "oai-pmh", "--state",
                           str(tmp_path / "oai.state"), "--output", str(output)])

    assert status == 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["id"] for line in lines] == [f"oai:example.org:book-{n}" for n in range(1, 5)]
    summary = capsys.readouterr().err
    assert "4 records applied (0 deletions), 4 records changed, 4 live records" in summary
    assert "a whole harvest, the next from " in summary


def test_feedpub_harvest_exits_non_zero_on_an_error_code(oai, tmp_path, capsys):
    books(oai.repository, 8)
    oai.break_tokens = True
    status = harvest_main([oai.url, "--format", "oai-pmh", "-o", str(tmp_path / "x.jsonl")])
    assert status == 1
    err = capsys.readouterr().err
    assert "warning: " in err
    assert "badResumptionToken" in err
    assert "INCOMPLETE" in err

    status = harvest_main([oai.url, "--metadata-prefix", "marc21", "--summary-json"])
    assert status == 2
    assert "harvest failed: " in capsys.readouterr().err


def test_feedpub_harvest_help_names_the_oai_pmh_options(capsys):
    with pytest.raises(SystemExit) as exit_status:
        harvest_main(["--help"])
    assert exit_status.value.code == 0
    text = capsys.readouterr().out
    assert "--set SPEC" in text
    assert "--metadata-prefix PREFIX" in text
    assert "oai-pmh" in text
