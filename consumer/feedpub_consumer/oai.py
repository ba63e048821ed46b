"""A harvesting client for OAI-PMH 2.0 repositories, usable against any server.

`harvest` (consumer/feedpub_consumer/harvesting.py) hands a base URL here when told `--format
oai-pmh`, when the state file is an OAI-PMH one, when the URL carries a `verb=` argument,
or when the first answer is an OAI-PMH document (root `{http://www.openarchives.org/OAI/
2.0/}OAI-PMH`: a base URL asked without a verb answers with a `badVerb` error in one).

One run: `Identify` (for the datestamp granularity), `ListMetadataFormats` on a first run
without a prefix (`feedpub` if the repository offers it, else `oai_dc`), then `ListRecords`,
following resumptionTokens until none is left. A record replaces any earlier one with its
identifier; a header with `status="deleted"` removes it. `noRecordsMatch` means nothing
changed; any other error code fails the run (with its code and message).

Incremental: the state file keeps the `responseDate` of the first response of the last
complete harvest, and the next run sends it as `from` (its date part when the repository's
granularity is days). The first, not the last: a repository whose list is a snapshot taken
at its first answer lists none of the changes made while the list was read, and they are
all stamped after that first answer's date (feedpub's own /oai would allow the last one
too; records delivered again cost little). A run that stops half-way (an error,
`--deadline`, `--max-requests`) keeps the records it applied but not a new `from`: the next
run starts again from the previous one, and records delivered twice are harmless, missed
ones would not be.

Memory stays flat: one response is in memory at a time, the records live in SQLite.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from lxml import etree

from .atom import parse_timestamp
from .harvest import HarvestFailed, HarvestResult, HarvestRun, LiveRecords, Meter, show_progress
from .http import FetchError, Response
from .records import shaped
from .state import STATE_VERSION, StateError, read_meta

OAI_PMH = "oai-pmh"  # the format's name for `harvest` and the state file
OAI_NS = "http://www.openarchives.org/OAI/2.0/"
OAI_DC_NS = "http://www.openarchives.org/OAI/2.0/oai_dc/"
DC_NS = "http://purl.org/dc/elements/1.1/"
FEEDPUB_NS = "urn:feedpub:oai-record:1"  # feedpub's lossless metadata format
OAI, DC, FP = f"{{{OAI_NS}}}", f"{{{DC_NS}}}", f"{{{FEEDPUB_NS}}}"
OAI_DC, FEEDPUB = "oai_dc", "feedpub"  # metadata prefixes read field by field
DAY_GRANULARITY = "YYYY-MM-DD"
ACCEPT_XML = "text/xml, application/xml;q=0.9, */*;q=0.1"

# Answers come from strangers: no network, no giant trees, no external entities.
_PARSER = etree.XMLParser(resolve_entities="internal", no_network=True, huge_tree=False)


# Telling the format ----------------------------------------------------------------------

def is_oai_url(url: str) -> bool:
    """A URL that names an OAI-PMH request (it has a `verb` argument)."""
    return "verb" in parse_qs(urlsplit(url).query)


def is_oai_pmh(response: Response) -> bool:
    """An answer whose root element is OAI-PMH's (read up to the root's start tag only)."""
    try:
        for _, element in etree.iterparse(BytesIO(response.body), events=("start",),
                                          resolve_entities=False, no_network=True):
            return element.tag == f"{OAI}OAI-PMH"
    except etree.XMLSyntaxError:
        return False
    return False


def base_and_arguments(url: str) -> tuple[str, dict[str, str]]:
    """The base URL (the URL without its query) and the query's arguments."""
    parts = urlsplit(url)
    arguments = {name: values[0] for name, values in parse_qs(parts.query).items()}
    return urlunsplit(parts._replace(query="", fragment="")), arguments


# Answers ---------------------------------------------------------------------------------

class OaiError(Exception):
    """An answer that is not a usable OAI-PMH response: an error code, or not OAI-PMH."""

    def __init__(self, message: str, code: str | None = None,
                 response_date: str | None = None):
        super().__init__(message)
        self.code = code
        self.response_date = response_date


@dataclass
class Answer:
    response_date: str | None
    verb: etree._Element  # the element named after the verb (ListRecords, Identify, ...)


def read_answer(response: Response, url: str, verb: str) -> Answer:
    """The verb's element of an OAI-PMH answer; OaiError for an error code or anything else."""
    if response.status != 200:
        retry = response.header("Retry-After")
        raise OaiError(f"{url} answered HTTP {response.status}"
                       + (f" (Retry-After: {retry})" if retry else ""))
    try:
        root = etree.fromstring(response.body, _PARSER, base_url=url)  # noqa: S320 - hardened
    except etree.XMLSyntaxError as error:
        raise OaiError(f"{url}: not well-formed XML: {error}") from None
    if root.tag != f"{OAI}OAI-PMH":
        raise OaiError(f"{url}: the root element is {root.tag!r}, not OAI-PMH")
    date = (root.findtext(f"{OAI}responseDate") or "").strip() or None
    errors = root.findall(f"{OAI}error")
    if errors:
        codes = [(error.get("code") or "?", " ".join("".join(error.itertext()).split()))
                 for error in errors]
        raise OaiError(f"{url}: " + "; ".join(f"{code}: {message}" if message else code
                                              for code, message in codes),
                       codes[0][0], date)
    element = root.find(f"{OAI}{verb}")
    if element is None:
        raise OaiError(f"{url}: an OAI-PMH answer without {verb}")
    return Answer(date, element)


def from_argument(response_date: str, granularity: str | None) -> str:
    """A responseDate as the next `from`: whole seconds in UTC, or the day."""
    moment = parse_timestamp(response_date)
    text = moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else response_date
    return text[:10] if granularity == DAY_GRANULARITY else text


# Records ---------------------------------------------------------------------------------

def _text(element: etree._Element | None) -> str | None:
    return None if element is None else _all_text(element)


def _all_text(element: etree._Element) -> str:
    return "".join(element.itertext()).strip()


def record_row(record: etree._Element, source: str) -> tuple[str, bool, dict[str, Any]]:
    """(identifier, deleted, the record as written out) of a ListRecords <record>."""
    header = record.find(f"{OAI}header")
    identifier = None if header is None else _text(header.find(f"{OAI}identifier"))
    if header is None or not identifier:
        raise OaiError("a record without a header identifier")
    deleted = header.get("status") == "deleted"
    row: dict[str, Any] = {
        "id": identifier, "updated": _text(header.find(f"{OAI}datestamp")) or "",
        "source": source, "sets": [_text(spec) for spec in header.iterfind(f"{OAI}setSpec")],
        "title": "", "summary": "", "links": [], "alternate": None, "language": "",
    }
    container = record.find(f"{OAI}metadata")
    metadata = None if container is None else next(iter(container.iterchildren(etree.Element)),
                                                   None)
    if deleted or metadata is None:
        return identifier, deleted, row
    if metadata.tag == f"{{{OAI_DC_NS}}}dc":
        row.update(_dublin_core(metadata))
    elif metadata.tag == f"{FP}record":
        row.update(_feedpub(metadata))
    else:  # a format read as is: its XML
        row["metadata_xml"] = etree.tostring(metadata, encoding="unicode")
    return identifier, deleted, row


def _dublin_core(dc: etree._Element) -> dict[str, Any]:
    fields: dict[str, list[str]] = {}
    for element in dc.iterchildren(etree.Element):
        if element.tag.startswith(DC):
            fields.setdefault(element.tag[len(DC):], []).append(_all_text(element))
    hrefs = [value for value in fields.get("identifier", [])
             if value.lower().startswith(("http://", "https://"))]
    return {"title": fields.get("title", [""])[0],
            "summary": fields.get("description", [""])[0],
            "links": [{"href": href} for href in hrefs],
            "alternate": hrefs[0] if hrefs else None,
            "language": fields.get("language", [""])[0], "metadata": fields}


def _feedpub(record: etree._Element) -> dict[str, Any]:
    text = record.findtext(f"{FP}metadata")
    try:
        metadata = json.loads(text) if text and text.strip() else {}
    except ValueError as error:
        raise OaiError(f"its feedpub metadata is not JSON ({error})") from None
    return {"key": _text(record.find(f"{FP}key")),
            "title": _text(record.find(f"{FP}title")) or "",
            "summary": _text(record.find(f"{FP}summary")) or "",
            "links": [{name: link.get(name) for name in ("href", "rel", "type", "title")
                       if link.get(name) is not None}
                      for link in record.iterfind(f"{FP}link")],
            "alternate": _text(record.find(f"{FP}url")),
            "atom_id": _text(record.find(f"{FP}atomId")),
            "language": _text(record.find(f"{FP}language")) or "", "metadata": metadata}


class OaiRecords:
    """The live records by OAI identifier, in SQLite: a deleted header removes its row
    (a list delivers each record's current state, so no tombstone is needed)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS oai_records (identifier TEXT PRIMARY KEY, "
                   "datestamp TEXT NOT NULL, record TEXT NOT NULL)")
        db.execute("CREATE INDEX IF NOT EXISTS oai_records_datestamp "
                   "ON oai_records (datestamp, identifier)")

    def put(self, identifier: str, record: dict[str, Any]) -> bool:
        """Set a record; whether it changed."""
        text = json.dumps(record, sort_keys=True)
        before = self.db.execute("SELECT record FROM oai_records WHERE identifier = ?",
                                 (identifier,)).fetchone()
        self.db.execute("INSERT OR REPLACE INTO oai_records VALUES (?, ?, ?)",
                        (identifier, record["updated"], text))
        return before is None or before[0] != text

    def delete(self, identifier: str) -> bool:
        """Remove a record; whether there was one."""
        return self.db.execute("DELETE FROM oai_records WHERE identifier = ?",
                               (identifier,)).rowcount > 0

    def live(self) -> Iterator[dict[str, Any]]:
        for (text,) in self.db.execute(
                "SELECT record FROM oai_records ORDER BY datestamp, identifier"):
            yield shaped(json.loads(text))

    def count_live(self) -> int:
        return self.db.execute("SELECT count(*) FROM oai_records").fetchone()[0]


class OaiState:
    """What an OAI-PMH harvester keeps between runs, in a state file like the Atom
    harvester's (state.open_state): base URL, prefix, set, the next `from`, the records."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        meta = read_meta(db, kind=OAI_PMH)
        self.records = OaiRecords(db)
        self.base: str | None = meta.get("base") or None
        self.prefix: str | None = meta.get("prefix") or None
        self.set_spec: str | None = meta.get("set") if "set" in meta else None
        # The responseDate of the first answer of the last complete harvest; "" before one.
        self.since: str = meta.get("from", "")

    def save(self) -> None:
        """Commit the run (and release the file)."""
        meta = {"version": str(STATE_VERSION), "format": OAI_PMH, "base": self.base or "",
                "prefix": self.prefix or "", "set": self.set_spec or "", "from": self.since}
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


# The harvester ---------------------------------------------------------------------------

@dataclass
class OaiHarvestResult(HarvestResult):
    metadata_prefix: str = ""
    set_spec: str | None = None
    sent_from: str | None = None  # the `from` this run sent (None: a whole harvest)
    next_from: str | None = None  # the `from` the next run sends

    @property
    def details(self) -> dict[str, Any]:
        """What a run says besides its summary (`--summary-json`)."""
        return {"metadata_prefix": self.metadata_prefix, "set": self.set_spec,
                "from": self.sent_from, "next_from": self.next_from}


class OaiHarvester(HarvestRun):
    """One run: Identify, choose the prefix, ListRecords from `from` to the end of the list."""

    def run(self, url: str, *, first: Response | None = None, meter: Meter | None = None,
            metadata_prefix: str | None = None, set_spec: str | None = None) -> HarvestResult:
        """Harvest the repository at `url` (its base URL, or a request URL whose query's
        `metadataPrefix` and `set` serve when `metadata_prefix` and `set_spec` are None).
        `first`: the answer to a GET of `url` already made (used if it is an Identify)."""
        meter = meter or Meter.start(self.client)
        self.summary.pages_fetched += first is not None and first.status == 200
        base, arguments = base_and_arguments(url)
        self._remembered("base", self.state.base, base, None)
        prefix = self._remembered("metadata prefix", self.state.prefix,
                                  metadata_prefix or arguments.get("metadataPrefix"), None)
        set_spec = self._remembered("set", self.state.set_spec,
                                    set_spec if set_spec is not None else arguments.get("set"),
                                    "")
        self.state.base = base
        granularity = self._identify(base, first)
        self.state.prefix = prefix or self._choose_prefix(base)
        self.state.set_spec = set_spec or ""
        sent_from = (from_argument(self.state.since, granularity)
                     if self.state.since else None)
        last_date = self._list_records(base, sent_from)
        show_progress(self.progress, self.summary, self.client)
        meter.fill(self.summary, self.client)
        if self.summary.complete and last_date:
            self.state.since = last_date
        elif self.summary.complete:
            self._warn("the first answer had no responseDate: the next run sends the same "
                       "from again")
        else:
            self._warn("the harvest is incomplete: see the warnings above; the next run "
                       "starts again from "
                       + (f"from={sent_from}" if sent_from else "the beginning"))
        self.summary.live_records = self.state.records.count_live()
        return OaiHarvestResult(
            LiveRecords(self.state.records), self.summary, self.warnings,
            metadata_prefix=self.state.prefix, set_spec=self.state.set_spec or None,
            sent_from=sent_from, next_from=(from_argument(self.state.since, granularity)
                                            if self.state.since else None))

    def _remembered(self, what: str, stored: str | None, given: str | None,
                    unset: str | None) -> str | None:
        """The value a state file remembers, else the one given; a different one is refused."""
        if stored is None or stored == given or given is None:
            return given if stored is None else stored
        stored_text = f"no {what}" if stored == unset else f"{what} {stored}"
        raise StateError(f"the state file is for {stored_text}, not {what} {given}: use "
                         "another state file")

    # Requests ---------------------------------------------------------------------------

    def _ask(self, base: str, verb: str, **arguments: str | None) -> Answer:
        """One request; FetchError and OaiError go to the caller."""
        query = urlencode({"verb": verb, **{name: value for name, value in arguments.items()
                                            if value}})
        url = f"{base}?{query}"
        response = self.client.fetch(url, headers={"Accept": ACCEPT_XML})
        self.summary.pages_fetched += response.status == 200
        show_progress(self.progress, self.summary, self.client)
        return read_answer(response, url, verb)

    def _must_ask(self, base: str, verb: str, **arguments: str | None) -> Answer:
        try:
            return self._ask(base, verb, **arguments)
        except (FetchError, OaiError) as error:
            raise HarvestFailed(str(error)) from error

    def _identify(self, base: str, first: Response | None) -> str | None:
        """The repository's granularity (None: not said, taken as seconds). `first`, the
        answer to a GET of the URL given, serves if it is an Identify answer."""
        try:
            answer = read_answer(first, first.url, "Identify") if first else None
        except OaiError:
            answer = None
        answer = answer or self._must_ask(base, "Identify")
        granularity = answer.verb.findtext(f"{OAI}granularity")
        return granularity.strip() if granularity else None

    def _choose_prefix(self, base: str) -> str:
        answer = self._must_ask(base, "ListMetadataFormats")
        prefixes = {_text(prefix) for prefix in answer.verb.iterfind(
            f"{OAI}metadataFormat/{OAI}metadataPrefix")}
        return FEEDPUB if FEEDPUB in prefixes else OAI_DC

    def _list_records(self, base: str, sent_from: str | None) -> str | None:
        """Apply the records from `sent_from` on; the first answer's responseDate (None when
        the list was not read to its end, which makes the run incomplete)."""
        token, tokens_seen, first, since = None, set(), True, None
        while True:
            try:
                if first:
                    answer = self._ask(base, "ListRecords", metadataPrefix=self.state.prefix,
                                       set=self.state.set_spec, **{"from": sent_from})
                else:
                    answer = self._ask(base, "ListRecords", resumptionToken=token)
            except OaiError as error:
                if error.code == "noRecordsMatch" and first:  # nothing changed
                    return error.response_date
                self._stopped(str(error), first)
                return None
            except FetchError as error:
                self._stopped(str(error), first)
                return None
            if first:
                since = answer.response_date
            first = False
            try:
                self._apply(answer.verb, base)
            except OaiError as error:
                self._stopped(f"{base}: {error}", False)
                return None
            token = (answer.verb.findtext(f"{OAI}resumptionToken") or "").strip()
            if not token:
                return since
            if token in tokens_seen:
                self._stopped(f"loop: the resumptionToken {token!r} came twice", False)
                return None
            tokens_seen.add(token)

    def _stopped(self, message: str, first: bool) -> None:
        if first:
            raise HarvestFailed(message)
        self._warn(message)
        self.summary.complete = False
        return None

    def _apply(self, element: etree._Element, source: str) -> None:
        for record in element.iterfind(f"{OAI}record"):
            try:
                identifier, deleted, row = record_row(record, source)
            except OaiError as error:
                header = record.findtext(f"{OAI}header/{OAI}identifier") or "?"
                raise OaiError(f"the record {header.strip()}: {error}") from None
            self.summary.entries_applied += 1
            if deleted:
                self.summary.deletions += 1
                self.summary.records_changed += self.state.records.delete(identifier)
            else:
                self.summary.records_changed += self.state.records.put(identifier, row)

