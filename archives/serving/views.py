"""The documents consumers read. Thin: find the document (archives/documents/base.py), answer
304 when the client's copy is current, else serve its bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured, ObjectDoesNotExist, ValidationError
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseGone,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import get_conditional_response
from django.utils.http import parse_header_parameters
from django.utils.text import compress_sequence
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST, require_safe

from archives.conf import settings
from archives.db.heads import heads
from archives.documents import atom, base, feeds, kinds, linked
from archives.documents.base import Document
from archives.documents.feeds import (
    ArchiveDocument,
    FeedDocument,
    PagedPageDocument,
    RssArchiveDocument,
    SubscriptionDocument,
)
from archives.documents.kinds import Kind
from archives.documents.records import RecordDocument
from archives.documents.schemas import CurrentSchemaDocument, SchemaVersionDocument
from archives.html import pages
from archives.html.activity import ActivityChart
from archives.models import ArchivePage, Feed, Record, RecordSchema, Snapshot
from archives.parameters import single
from archives.push import hub
from archives.validation import clean_key

from .negotiation import error_response, negotiated

AFeedDocument = TypeVar("AFeedDocument", bound=FeedDocument)

MAX_PAGE_NUMBER = 2**31 - 1  # the column's range: no page can have a larger number


def read_only(view: Callable) -> Callable:
    """GET and HEAD only: anything else is a 405 with `Allow`. Exempt from CSRF, which
    would otherwise answer a write method with an HTML 403 before the 405; these views
    change nothing."""
    return csrf_exempt(require_safe(view))


def document_view(kind: Kind, find: Callable[..., Document]) -> Callable[..., HttpResponseBase]:
    """The view of a kind of document that its URL's arguments alone find (`find`, the
    kind's): its document served, or a 404 when there is none."""

    @read_only
    def view(request: HttpRequest, **arguments) -> HttpResponseBase:
        try:
            document = find(**arguments)
        except ObjectDoesNotExist:
            raise Http404(not_found(kind, arguments)) from None
        return serve(request, document)

    view.__name__ = view.__qualname__ = kind.name.replace("-", "_")
    return view


def not_found(kind: Kind, arguments: dict) -> str:
    slug, *rest = arguments.values()
    if not rest:
        return f"No feed {slug!r}"
    return f"Feed {slug!r} has no {kind.label} {', '.join(str(value) for value in rest)}"


FEEDS_PER_INDEX_PAGE = 50


@read_only
def index(request: HttpRequest) -> HttpResponseBase:
    """Every feed, by slug, a page of them at a time (a host may hold 100,000)."""
    feeds = Paginator(Feed.objects.order_by("slug"), FEEDS_PER_INDEX_PAGE).get_page(
        single(request.GET, "page"))
    return render(request, "archives/index.html", {"feeds": feeds})


@read_only
@negotiated("atom", "html")
def subscription(request: HttpRequest, slug: str, format: str | None) -> HttpResponseBase:
    document = _feed_document(SubscriptionDocument, slug)
    if format == "html":
        return serve(request, pages.FeedPage(document, page=single(request.GET, "page")))
    return serve(request, document)


@read_only
@negotiated("atom", "html")
def archive(request: HttpRequest, slug: str, number: int, format: str | None) -> HttpResponseBase:
    if not 1 <= number <= MAX_PAGE_NUMBER:
        raise Http404(f"There is no archive page {number}")
    document: Document
    try:
        if format == "html":
            document = pages.ArchivePageHTML.for_page(slug, number, read_at=base.now())
        else:
            document = ArchiveDocument.for_page(slug, number)
    except ArchivePage.DoesNotExist:
        raise Http404(f"Feed {slug!r} has no archive page {number}") from None
    return serve(request, document)


@read_only
def newest_linked_page(request: HttpRequest, slug: str) -> HttpResponseBase:
    """The linked-pages entry point: a short-lived redirect to the newest page."""
    try:
        number, links = linked.newest_linked_page(slug)
    except ArchivePage.DoesNotExist as error:
        raise Http404(str(error)) from None
    response = _short_lived(HttpResponseRedirect(
        reverse("archives:linked-page", args=[slug, number])))
    response["Link"] = atom.link_header(links)
    return response


@read_only
def newest_snapshot(request: HttpRequest, slug: str) -> HttpResponseBase:
    newest = (Snapshot.objects.filter(feed__slug=slug, complete=True)
              .order_by("-created").values_list("uuid", flat=True).first())
    if newest is None:
        raise Http404(f"Feed {slug!r} has no snapshot yet")
    return _short_lived(HttpResponseRedirect(
        reverse("archives:snapshot", args=[slug, str(newest)])))


def _short_lived(response: HttpResponse) -> HttpResponseBase:
    response["Cache-Control"] = f"public, max-age={settings.FEEDPUB_MAX_AGE}"
    return response


def _feed_document(document_class: type[AFeedDocument], slug: str) -> AFeedDocument:
    try:
        return document_class.for_slug(slug)
    except Feed.DoesNotExist:
        raise Http404(f"No feed {slug!r}") from None


def _feed_or_404(slug: str) -> Feed:
    try:
        return heads.feed_by_slug(slug)
    except Feed.DoesNotExist:
        raise Http404(f"No feed {slug!r}") from None


@read_only
def archive_by_date(request: HttpRequest, slug: str, year: str, month: str, day: str | None = None):
    """Redirect to the sealed page holding the first entry at or after a UTC date."""
    try:
        instant = datetime(int(year), int(month), int(day or 1), tzinfo=UTC)
    except ValueError:
        raise Http404(f"{year}-{month}-{day} is not a date") from None
    try:
        number = feeds.archive_holding(slug, instant)
    except Feed.DoesNotExist:
        raise Http404(f"No feed {slug!r}") from None
    if number is None:  # not sealed yet: what exists of it is in the subscription document
        return HttpResponseRedirect(reverse("archives:subscription", args=[slug]))
    # Permanent, and cacheable for ever: the first sealed page with an entry at or after
    # an instant never changes.
    return HttpResponsePermanentRedirect(reverse("archives:archive", args=[slug, number]),
                                         headers={"Cache-Control": base.IMMUTABLE})


@read_only
@negotiated("atom", "json", "html")
def record(request: HttpRequest, slug: str, key: str, format: str | None) -> HttpResponseBase:
    try:
        document = RecordDocument.for_key(slug, clean_key(key))
    except (ValidationError, Record.DoesNotExist):  # no record can have an invalid key
        raise Http404(f"Feed {slug!r} has no record {key!r}") from None
    if format == "html":
        page = pages.RecordPage(document, page=single(request.GET, "page"))
        if document.record.is_deleted:  # its history, with the Atom URL's status
            return HttpResponseGone(page.body(), content_type=page.content_type,
                                    headers={"Cache-Control": page.cache_control()})
        return serve(request, page)
    if document.record.is_deleted:
        return error_response(format, 410, f"Record {key!r} was deleted.")
    return serve(request, document.as_json() if format == "json" else document)


@read_only
def schema(request: HttpRequest, slug: str) -> HttpResponseBase:
    try:
        document = CurrentSchemaDocument.for_feed(_feed_or_404(slug))
    except RecordSchema.DoesNotExist:
        raise Http404(f"Feed {slug!r} has no record schema") from None
    response = serve(request, document)
    response["Content-Location"] = document.url()
    return response


@read_only
def schema_version(request: HttpRequest, slug: str, version: int) -> HttpResponseBase:
    if not 1 <= version <= MAX_PAGE_NUMBER:  # the column's range too
        raise Http404(f"Feed {slug!r} has no record schema version {version}")
    try:
        document = SchemaVersionDocument.for_version(_feed_or_404(slug), version)
    except RecordSchema.DoesNotExist:
        raise Http404(f"Feed {slug!r} has no record schema version {version}") from None
    return serve(request, document)


@read_only
def search(request: HttpRequest, slug: str) -> HttpResponseBase:
    """Records of a feed whose key or title contains `q`, for people."""
    context = pages.search(_feed_or_404(slug), single(request.GET, "q") or "",
                               single(request.GET, "page"))
    return _short_lived(render(request, "archives/search.html", context,
                               status=400 if context.get("invalid") else 200))


@read_only
def activity(request: HttpRequest, slug: str) -> HttpResponseBase:
    return serve(request, _feed_document(ActivityChart, slug))


@read_only
def rss_archive(request: HttpRequest, slug: str, number: int) -> HttpResponseBase:
    if not 1 <= number <= MAX_PAGE_NUMBER:
        raise Http404(f"There is no archive page {number}")
    try:
        document = RssArchiveDocument.for_page(slug, number)
    except ArchivePage.DoesNotExist:
        raise Http404(f"Feed {slug!r} has no archive page {number}") from None
    return serve(request, document)


# RFC 5005's complete and paged feeds ----------------------------------------------------

@read_only
def paged_page(request: HttpRequest, slug: str, number: int) -> HttpResponseBase:
    """Page n of the paged feed: archive page n's entries (the newest are at /paged/)."""
    if not 1 <= number <= MAX_PAGE_NUMBER:
        raise Http404(f"There is no paged feed page {number}")
    try:
        return serve(request, PagedPageDocument.for_page(slug, number))
    except ArchivePage.DoesNotExist:
        newest = reverse("archives:paged", args=[slug])
        raise Http404(f"Feed {slug!r} has no paged feed page {number} (the newest entries "
                      f"are at {newest})") from None


# WebSub ---------------------------------------------------------------------------------

@csrf_exempt
@require_POST
def websub_hub(request: HttpRequest) -> HttpResponseBase:
    """The hub (W3C WebSub 5.1): a subscription request is checked and recorded, and the
    websub_worker verifies it with the callback (archives/push/)."""
    wait = hub.throttled(request)
    if wait is not None:
        return HttpResponse(f"Too many subscription requests from this address "
                            f"(FEEDPUB_WEBSUB_RATE): retry after {wait} seconds.\n",
                            status=429, headers={"Retry-After": str(wait)},
                            content_type="text/plain; charset=utf-8")
    try:
        hub.record_request(request.POST)
    except hub.HubRequestError as error:
        return HttpResponseBadRequest(f"{error}\n", content_type="text/plain; charset=utf-8")
    return HttpResponse("Accepted: the callback will be asked to confirm.\n", status=202,
                        content_type="text/plain; charset=utf-8")


# Serving a document -------------------------------------------------------------------

def accepts_gzip(request: HttpRequest) -> bool:
    """Whether Accept-Encoding admits gzip (RFC 9110 12.5.3): by name or by `*`, with a
    q-value above 0."""
    qualities = {}
    for coding in request.headers.get("Accept-Encoding", "").split(","):
        name, parameters = parse_header_parameters(coding)
        try:
            qualities[name] = float(parameters.get("q", 1))
        except ValueError:
            qualities[name] = 0.0
    return qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0.0))) > 0


class HeadersOnly(StreamingHttpResponse):
    """A HEAD answer for a document whose length is not known without rendering it: a
    stream, so that CommonMiddleware claims no Content-Length: 0, with nothing in it,
    iterated by WSGI and ASGI servers alike (an ordinary stream is of one kind, and
    Django warns when the other kind of server consumes it)."""

    def __init__(self, **kwargs):
        super().__init__((), **kwargs)

    def __iter__(self):
        return iter(())

    async def __aiter__(self) -> AsyncIterator[bytes]:
        nothing: tuple[bytes, ...] = ()
        for part in nothing:
            yield part


def serve(request: HttpRequest, document: Document) -> HttpResponseBase:
    """A document's answer: 304 when the client's validators match (If-None-Match, else
    If-Modified-Since, as RFC 9110 13.2.2 orders them), else its bytes in one piece,
    gzip-encoded for clients that accept it. HEAD renders nothing it can avoid."""
    headers = dict(document.headers())  # a final document's are shared: add to a copy
    headers["Vary"] = "Accept-Encoding"
    compress = accepts_gzip(request)
    if compress:
        headers["ETag"] = document.gzip_etag()
    last_modified = document.last_modified() if document.honours_if_modified_since else None
    response = get_conditional_response(
        request, etag=headers["ETag"], last_modified=last_modified)
    if response is not None:
        for name, value in headers.items():
            response[name] = value
        return response
    if compress:
        headers["Content-Encoding"] = "gzip"
    if request.method == "HEAD" and (document.streams or document.head_without_length):
        # (An open linked page is rendered even for HEAD: its boundary, in its
        # Content-Type, comes from its parts.)
        return HeadersOnly(content_type=document.content_type, headers=headers)
    if document.streams:  # too large to hold: sent as it is rendered, without a length
        stream = document.stream()
        return StreamingHttpResponse(compress_sequence(stream) if compress else stream,
                                     content_type=document.content_type, headers=headers)
    body = document.body()
    if compress:
        body = document.gzipped()
    headers["Content-Length"] = str(len(body))
    return HttpResponse(b"" if request.method == "HEAD" else body,
                        content_type=document.content_type, headers=headers)


# The views of the kinds of document (archives/documents/kinds.py) ------------------------

# Kinds served by a view of their own: they negotiate a page for people, redirect, or
# check their arguments before looking.
OWN_VIEWS: dict[str, Callable[..., HttpResponseBase]] = {
    "subscription": subscription, "archive": archive, "archive-rss": rss_archive,
    "linked-latest": newest_linked_page, "snapshot-latest": newest_snapshot,
    "paged-page": paged_page, "record": record, "schema": schema,
    "schema-version": schema_version,
}


def views_of_kinds() -> list[tuple[Kind, Callable[..., HttpResponseBase]]]:
    """Each kind of document and its view (the URLconf routes them)."""
    routed = []
    for kind in kinds.KINDS:
        view = OWN_VIEWS.get(kind.name)
        if view is None:
            if kind.find is None:
                raise ImproperlyConfigured(f"Document kind {kind.name!r} has neither `find` "
                                           f"nor a view of its own (archives/serving/views.py)")
            view = document_view(kind, kind.find)
        routed.append((kind, view))
    return routed
