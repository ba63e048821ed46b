"""The answer to each OAI-PMH verb, as the bytes of one OAI-PMH document.

`answer(params)` is the whole protocol: it checks the request (archives/oai/protocol.py),
reads what the verb asks for (repository.py), and writes the response, errors included,
which the protocol sends with HTTP 200 like any other answer. The document is lxml's; the
records in it are text (metadata.py says why), which a verb returns beside its element and
`answer` puts at the start of that element's content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

from archives.conf import settings
from archives.documents.atom import escape_text
from archives.documents.urls import url
from archives.models import Feed

from . import repository
from .metadata import DC, FORMATS, OAI_DC, OAI_DC_SCHEMA, SCHEMA_LOCATION, XSI, MetadataFormat
from .protocol import NAMESPACE, OAIError, Request, datestamp, make_token, parse
from .repository import Item, SafePoint

OAI = f"{{{NAMESPACE}}}"
OAI_IDENTIFIER = "http://www.openarchives.org/OAI/2.0/oai-identifier"


def base_url() -> str:
    return url("archives:oai")


@dataclass
class Body:
    """What a verb answers: its element, the responseDate (a UNIX second), and the records
    (as text) that open the element's content."""

    element: etree._Element
    second: int
    records: str = ""


def answer(params: Mapping[str, Sequence[str]], *, refused: OAIError | None = None) -> bytes:
    """The OAI-PMH document that answers a request's parameters (or says why the request
    was `refused` before they could be read)."""
    safe = repository.SafePoint.now()  # before any read: see repository.py
    second = safe.response_second
    root = etree.Element(f"{OAI}OAI-PMH", nsmap={None: NAMESPACE, "xsi": XSI})
    root.set(SCHEMA_LOCATION, f"{NAMESPACE} http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd")
    response_date = etree.SubElement(root, f"{OAI}responseDate")
    request_element = etree.SubElement(root, f"{OAI}request")
    request_element.text = base_url()
    request = None
    try:
        if refused is not None:
            raise refused
        request = parse(params)
        body = VERBS[request.verb](request, safe)
        root.append(body.element)
        second = body.second
    except OAIError as error:
        body = None
        etree.SubElement(root, f"{OAI}error", code=error.code).text = error.message
        second = error.response_second or second
        if not error.echoes_arguments:
            request = None
    if request is not None:
        request_element.set("verb", request.verb)
        for name, value in request.arguments.items():
            request_element.set(name, value)
    response_date.text = datestamp(datetime.fromtimestamp(second, UTC))
    if body is None or not body.records:
        return etree.tostring(root, xml_declaration=True, encoding="UTF-8")
    body.element.text = ""  # so that it is written <Verb></Verb>, never <Verb/>
    document = etree.tostring(root, xml_declaration=True, encoding="UTF-8")
    # The verb's start tag: the only one (in <request>, the verb is an attribute's value).
    opening = f"<{etree.QName(body.element).localname}>".encode()
    at = document.index(opening) + len(opening)
    return b"".join((document[:at], body.records.encode(), document[at:]))


def identify(request: Request, safe: SafePoint) -> Body:
    element = etree.Element(f"{OAI}Identify")
    for name, text in (
        ("repositoryName", settings.FEEDPUB_OAI_REPOSITORY_NAME),
        ("baseURL", base_url()),
        ("protocolVersion", "2.0"),
        ("adminEmail", settings.FEEDPUB_OAI_ADMIN_EMAIL),
        ("earliestDatestamp", datestamp(repository.earliest_datestamp())),
        # The log keeps every deletion, for ever.
        ("deletedRecord", "persistent"),
        ("granularity", "YYYY-MM-DDThh:mm:ssZ"),
    ):
        etree.SubElement(element, f"{OAI}{name}").text = text
    description = etree.SubElement(element, f"{OAI}description")
    scheme = etree.SubElement(description, f"{{{OAI_IDENTIFIER}}}oai-identifier",
                              nsmap={None: OAI_IDENTIFIER})
    scheme.set(SCHEMA_LOCATION, f"{OAI_IDENTIFIER} {OAI_IDENTIFIER}.xsd")
    for name, text in (("scheme", "oai"),
                       ("repositoryIdentifier", settings.FEEDPUB_OAI_REPOSITORY_ID),
                       ("delimiter", ":"), ("sampleIdentifier", repository.sample_identifier())):
        etree.SubElement(scheme, f"{{{OAI_IDENTIFIER}}}{name}").text = text
    return Body(element, safe.response_second)


def list_metadata_formats(request: Request, safe: SafePoint) -> Body:
    identifier = request.arguments.get("identifier")
    if identifier is not None and _item(identifier).is_deleted:
        raise OAIError("noMetadataFormats", f"{identifier} is deleted: no metadata of it "
                                            "can be disseminated any more.")
    element = etree.Element(f"{OAI}ListMetadataFormats")
    for metadata_format in FORMATS.values():
        item = etree.SubElement(element, f"{OAI}metadataFormat")
        for name, text in (("metadataPrefix", metadata_format.prefix),
                           ("schema", metadata_format.schema()),
                           ("metadataNamespace", metadata_format.namespace)):
            etree.SubElement(item, f"{OAI}{name}").text = text
    return Body(element, safe.response_second)


def list_sets(request: Request, safe: SafePoint) -> Body:
    page = repository.set_page(request.list_state, safe=safe)
    if page is None and request.resuming:  # the feeds after its position were deleted
        raise OAIError("badResumptionToken", "No set is left after this token's position: "
                                             "the feeds after it were deleted.")
    if page is None:
        raise OAIError("noSetHierarchy", "This repository has no feed yet, so no set.")
    element = etree.Element(f"{OAI}ListSets")
    for feed in page.items:
        _set(element, feed)
    _resumption(element, request, page)
    return Body(element, page.response_second)


def _set(parent: etree._Element, feed: Feed) -> None:
    item = etree.SubElement(parent, f"{OAI}set")
    etree.SubElement(item, f"{OAI}setSpec").text = feed.slug
    etree.SubElement(item, f"{OAI}setName").text = feed.title
    if feed.subtitle:
        description = etree.SubElement(item, f"{OAI}setDescription")
        dc = etree.SubElement(description, f"{{{OAI_DC}}}dc", nsmap={"oai_dc": OAI_DC, "dc": DC})
        dc.set(SCHEMA_LOCATION, f"{OAI_DC} {OAI_DC_SCHEMA}")
        etree.SubElement(dc, f"{{{DC}}}description").text = feed.subtitle


def list_identifiers(request: Request, safe: SafePoint) -> Body:
    return _list(request, safe, with_metadata=False)


def list_records(request: Request, safe: SafePoint) -> Body:
    return _list(request, safe, with_metadata=True)


def _list(request: Request, safe: SafePoint, *, with_metadata: bool) -> Body:
    metadata_format = _format(request.list_state.prefix)
    page = repository.record_page(request.list_state, safe=safe, with_metadata=with_metadata)
    if page is None:  # a resumed list keeps the responseDate it promised (repository.py)
        raise OAIError("noRecordsMatch", "No record matches these arguments"
                       + (" any more." if request.resuming else "."),
                       response_second=min(safe.response_second,
                                           request.list_state.floor or safe.response_second))
    element = etree.Element(f"{OAI}{request.verb}")
    write = (lambda item: _record(item, metadata_format)) if with_metadata else _header
    _resumption(element, request, page)
    return Body(element, page.response_second, "".join(map(write, page.items)))


def get_record(request: Request, safe: SafePoint) -> Body:
    metadata_format = _format(request.arguments["metadataPrefix"])
    item = _item(request.arguments["identifier"])
    return Body(etree.Element(f"{OAI}GetRecord"), safe.response_second,
                _record(item, metadata_format))


def _format(prefix: str) -> MetadataFormat:
    try:
        return FORMATS[prefix]
    except KeyError:
        raise OAIError("cannotDisseminateFormat",
                       f"{prefix!r} is not a format of this repository; it offers "
                       f"{' and '.join(FORMATS)} (ListMetadataFormats).") from None


def _item(identifier: str) -> Item:
    item = repository.item_by_identifier(identifier)
    if item is None:
        raise OAIError("idDoesNotExist", f"{identifier} is not an identifier of this "
                                         "repository.")
    return item


# A header and a record as text, in the answer's default namespace (OAI-PMH's). A slug and
# an identifier need no escaping (their patterns have no & < > "), a datestamp neither.

def _header(item: Item, stamp: str | None = None) -> str:
    return "".join((
        '<header status="deleted">' if item.is_deleted else "<header>",
        f"<identifier>{escape_text(repository.identifier(item.feed_uuid, item.key))}"
        f"</identifier><datestamp>{stamp or datestamp(item.datestamp)}</datestamp>"
        f"<setSpec>{item.slug}</setSpec></header>",
    ))


def _record(item: Item, metadata_format: MetadataFormat) -> str:
    stamp = datestamp(item.datestamp)
    if item.is_deleted:
        return f"<record>{_header(item, stamp)}</record>"
    # (dc:date is the record's last change, which a move of the service is not)
    changed = stamp if item.updated == item.datestamp else datestamp(item.updated)
    return (f"<record>{_header(item, stamp)}<metadata>{metadata_format.write(item, changed)}"
            "</metadata></record>")


def _resumption(element: etree._Element, request: Request, page: repository.Page) -> None:
    """A token when the list goes on; an empty one when a resumed list ends (3.5)."""
    if page.resume is None and not request.resuming:
        return  # the whole list in one answer
    token = etree.SubElement(element, f"{OAI}resumptionToken",
                             completeListSize=str(page.size), cursor=str(page.cursor))
    if page.resume is not None:
        token.text = make_token(page.resume)


VERBS: dict[str, Callable[[Request, SafePoint], Body]] = {
    "Identify": identify,
    "ListMetadataFormats": list_metadata_formats,
    "ListSets": list_sets,
    "ListIdentifiers": list_identifiers,
    "ListRecords": list_records,
    "GetRecord": get_record,
}
