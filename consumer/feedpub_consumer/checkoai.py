"""checkfeed for OAI-PMH 2.0 repositories, usable against any server: it reads a repository
as the harvester does (consumer/feedpub_consumer/oai.py: `Identify`, `ListMetadataFormats`, then
`ListRecords` along its resumptionTokens), reports what stops a harvester, and checks each
record of feedpub's `feedpub` format that names its schema against it. It is no validator
of the protocol's every rule (an answer is not checked against the OAI-PMH XML Schema):

- `oai.error`: an answer that is not OAI-PMH (an HTTP status other than 200, not XML,
  another root element) or that carries an error code (`noRecordsMatch` to the first
  ListRecords excepted: the list is empty).
- `oai.record`: a record without a header identifier, or whose feedpub metadata is not JSON.
- `oai.resumption`: a resumptionToken that comes twice (the list loops).
- `schema.*` (consumer/feedpub_consumer/recordschemas.py): a `feedpub` record whose `<schema>` names
  the version of its feed's record schema must match it.
"""

from __future__ import annotations

from urllib.parse import urlencode

from lxml import etree

from .check import CheckFailed, CheckResult, HttpChecks
from .http import FetchError, HttpClient, Response, RunLimitReached
from .oai import (
    ACCEPT_XML,
    FEEDPUB,
    FP,
    OAI,
    OAI_DC,
    Answer,
    OaiError,
    base_and_arguments,
    read_answer,
    record_row,
)


class OaiChecker(HttpChecks):
    def __init__(self, *, client: HttpClient | None = None, metadata_prefix: str | None = None,
                 set_spec: str | None = None):
        super().__init__(client=client)
        self.metadata_prefix = metadata_prefix
        self.set_spec = set_spec
        self.answers = 0  # OAI-PMH answers read: the documents of the summary

    def run(self, url: str, first: Response | None = None) -> CheckResult:
        """Check the repository at `url` (its base URL, or a request URL whose query's
        `metadataPrefix` and `set` serve when none is given); `first`: its answer to a GET
        already made. Raises CheckFailed when the repository does not answer Identify."""
        base, arguments = base_and_arguments(url)
        prefix = self.metadata_prefix or arguments.get("metadataPrefix")
        set_spec = self.set_spec if self.set_spec is not None else arguments.get("set")
        try:
            self._identify(base, first)
            prefix = prefix or self._choose_prefix(base)
            if prefix is not None:
                self._list_records(base, prefix, set_spec)
        except RunLimitReached as error:
            self._stopped(error)
        return self._result(self.answers)

    # Requests -------------------------------------------------------------------------

    @staticmethod
    def _url(base: str, verb: str, **arguments: str | None) -> str:
        return f"{base}?" + urlencode({"verb": verb, **{
            name: value for name, value in arguments.items() if value}})

    def _ask(self, url: str, verb: str) -> Answer:
        """The answer to `url`; FetchError and OaiError go to the caller."""
        answer = read_answer(self.client.fetch(url, headers={"Accept": ACCEPT_XML}), url, verb)
        self.answers += 1
        return answer

    def _identify(self, base: str, first: Response | None) -> None:
        """An Identify answer, `first` if it is one: a repository that gives none cannot be
        checked (CheckFailed)."""
        if first is not None:
            try:
                read_answer(first, first.url, "Identify")
                self.answers += 1
                self._checked(0)
                return
            except OaiError:  # an answer to another request (a badVerb to the base URL)
                pass
        try:
            self._ask(self._url(base, "Identify"), "Identify")
        except RunLimitReached:
            raise
        except (FetchError, OaiError) as error:
            raise CheckFailed(f"not an OAI-PMH repository: {error}") from error
        self._checked(0)

    def _choose_prefix(self, base: str) -> str | None:
        """feedpub if the repository offers it, else oai_dc, which names no schema."""
        url = self._url(base, "ListMetadataFormats")
        try:
            answer = self._ask(url, "ListMetadataFormats")
        except RunLimitReached:
            raise
        except (FetchError, OaiError) as error:
            self._problem(url, "oai.error", said(error, url))
            return None
        self._checked(0)
        prefixes = {(prefix.text or "").strip() for prefix in answer.verb.iterfind(
            f"{OAI}metadataFormat/{OAI}metadataPrefix")}
        if FEEDPUB in prefixes:
            return FEEDPUB
        self.notes.append(f"{url} offers no feedpub format: the records were read in "
                          "oai_dc, which names no schema")
        return OAI_DC

    def _list_records(self, base: str, prefix: str, set_spec: str | None) -> None:
        token, tokens_seen, first = None, set(), True
        while True:
            url = (self._url(base, "ListRecords", metadataPrefix=prefix, set=set_spec) if first
                   else self._url(base, "ListRecords", resumptionToken=token))
            try:
                answer = self._ask(url, "ListRecords")
            except RunLimitReached:
                raise
            except OaiError as error:
                if not (first and error.code == "noRecordsMatch"):  # else: an empty list
                    self._problem(url, "oai.error", said(error, url))
                return
            except FetchError as error:
                self._problem(url, "oai.error", said(error, url))
                return
            first = False
            records = answer.verb.findall(f"{OAI}record")
            for record in records:
                self._check_record(url, record)
            self._checked(len(records))
            token = (answer.verb.findtext(f"{OAI}resumptionToken") or "").strip()
            if not token:
                return
            if token in tokens_seen:
                self._problem(url, "oai.resumption",
                              f"the resumptionToken {token!r} came twice: the list loops")
                return
            tokens_seen.add(token)

    # Records --------------------------------------------------------------------------

    def _check_record(self, url: str, record: etree._Element) -> None:
        try:
            identifier, deleted, row = record_row(record, url)
        except OaiError as error:
            header = (record.findtext(f"{OAI}header/{OAI}identifier") or "?").strip()
            self._problem(url, "oai.record", f"the record {header}: {error}")
            return
        schema = record.find(f"{OAI}metadata/{FP}record/{FP}schema")
        if deleted or schema is None:
            return
        label = f"{identifier}: record {row.get('key')}" + (
            f" ({row['alternate']})" if row.get("alternate") else "")
        self.schemas.check_record(row.get("metadata"), (schema.text or "").strip(),
                                  where=url, record=label)


def said(error: Exception, url: str) -> str:
    """An error's message without the URL it begins with (a problem line names it)."""
    text = str(error)
    for prefix in (f"{url}: ", f"{url} "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text
