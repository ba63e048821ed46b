"""The documents consumers read. Thin: look up, answer 304 when possible, else serve bytes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from django.conf import settings
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseGone,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.http import http_date
from django.views.decorators.http import require_safe

from . import atom
from .models import ArchivePage, Feed, Record
from .pagecache import FrozenPage, frozen_pages, subscription_documents
from .publishing import record_etag

MAX_PAGE_NUMBER = 2**31 - 1  # the column's range; larger numbers would be a database error
IMMUTABLE = "public, max-age=31536000, immutable"


def revalidate() -> str:
    return f"public, max-age={settings.FEEDPUB_MAX_AGE}"


@require_safe
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "archives/index.html", {"feeds": Feed.objects.all()})


@require_safe
def subscription(request: HttpRequest, slug: str) -> HttpResponse:
    feed = _feed_or_404(slug)
    headers = {
        "ETag": subscription_etag(feed),
        "Last-Modified": http_date(feed.modified.timestamp()),
        "Cache-Control": revalidate(),
        "Link": atom.link_header(atom.subscription_links(feed)),
    }
    not_modified = _not_modified(request, headers)
    if not_modified or request.method == "HEAD":
        return not_modified or _head(headers)
    return _document(request, _subscription_body(feed, headers), headers)


def _subscription_body(feed: Feed, headers: dict[str, str]) -> bytes:
    cached = subscription_documents.get(feed.slug)
    if cached is not None and cached.etag == headers["ETag"]:
        return cached.body
    rows = atom.entry_rows(feed, feed.sealed_seq + 1, feed.last_seq, newest_first=True)
    body = atom.render_subscription(feed, rows)
    subscription_documents.put(feed.slug, FrozenPage(
        body, headers["ETag"], int(feed.modified.timestamp()), headers["Link"]))
    return body


def _feed_or_404(slug: str) -> Feed:
    try:
        return Feed.objects.get_by_slug(slug)
    except Feed.DoesNotExist:
        raise Http404(f"No feed {slug!r}") from None


def subscription_etag(feed: Feed) -> str:
    """Follows from the Feed row alone: a poll that finds nothing new renders nothing."""
    state = (feed.uuid, feed.slug, feed.title, feed.subtitle, feed.author, feed.last_seq,
             feed.sealed_pages, settings.FEEDPUB_BASE_URL)
    return '"' + hashlib.sha256(repr(state).encode()).hexdigest()[:32] + '"'


@require_safe
def archive(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    if not 1 <= number <= MAX_PAGE_NUMBER:
        raise Http404(f"There is no archive page {number}")
    page = frozen_pages.get((slug, number)) or _load_page(slug, number)
    headers = {
        "ETag": page.etag,
        "Last-Modified": http_date(page.last_modified),
        "Cache-Control": IMMUTABLE if page.final else revalidate(),
        "Link": page.link_header,
    }
    not_modified = _not_modified(request, headers)
    return not_modified or _document(request, page.body, headers)


def _load_page(slug: str, number: int) -> FrozenPage:
    """A page from the database, read in one query so that its body, ETag and links
    agree; a final page (it has its next-archive link) is kept in memory from then on."""
    try:
        body, etag, has_next, last_updated = (
            ArchivePage.objects.filter(feed__slug=slug, number=number)
            .values_list("body", "etag", "has_next", "last_updated").get()
        )
    except ArchivePage.DoesNotExist:
        raise Http404(f"Feed {slug!r} has no archive page {number}") from None
    links = atom.link_header(atom.archive_links(slug, number, has_next=has_next))
    page = FrozenPage(bytes(body), etag, int(last_updated.timestamp()), links, final=has_next)
    if page.final:
        frozen_pages.put((slug, number), page)
    return page


@require_safe
def archive_by_date(request: HttpRequest, slug: str, year: str, month: str, day: str | None = None):
    """Redirect to the sealed page holding the first entry at or after a UTC date."""
    try:
        instant = datetime(int(year), int(month), int(day or 1), tzinfo=UTC)
    except ValueError:
        raise Http404(f"{year}-{month}-{day} is not a date") from None
    feed = _feed_or_404(slug)
    number = (
        feed.pages.filter(last_updated__gte=instant)
        .order_by("number").values_list("number", flat=True).first()
    )
    if number is None:  # not sealed yet: what exists of it is in the subscription document
        return HttpResponseRedirect(reverse("archives:subscription", args=[slug]))
    # Permanent: the first sealed page with an entry at or after an instant never changes.
    return HttpResponsePermanentRedirect(reverse("archives:archive", args=[slug, number]))


@require_safe
def record(request: HttpRequest, slug: str, key: str) -> HttpResponse:
    record = get_object_or_404(Record.objects.select_related("feed"), feed__slug=slug, key=key)
    if record.is_deleted:
        return HttpResponseGone(f"Record {key!r} was deleted.", content_type="text/plain")
    wants = request.get_preferred_type([atom.RECORD_ENTRY_TYPE, "application/json"])
    if request.GET.get("format") == "json":
        wants = "application/json"
    etag = record_etag(record)
    headers = {
        # One ETag per representation: the Atom and the JSON bodies differ.
        "ETag": etag[:-1] + ("-json" if wants == "application/json" else "") + '"',
        "Last-Modified": http_date(record.updated.timestamp()),
        "Cache-Control": revalidate(),
        "Link": atom.link_header([("self", atom.record_url(slug, key)),
                                  ("up", atom.subscription_url(slug))]),
    }
    not_modified = _not_modified(request, headers)
    if not_modified:
        response = not_modified
    elif wants == "application/json":
        body = json.dumps(record.as_json(), ensure_ascii=False, indent=2).encode()
        response = _document(request, body, headers, content_type="application/json")
    else:
        body = atom.render_record(record)
        response = _document(request, body, headers, content_type=atom.ATOM_ENTRY_TYPE)
    patch_vary_headers(response, ["Accept"])
    return response


def _not_modified(request: HttpRequest, headers: dict[str, str]) -> HttpResponse | None:
    """A 304 carrying `headers` when the client's ETag still matches, else None.

    If-Modified-Since is not honoured: Last-Modified is the newest entry's time, as the
    linked-page rules require, not the time the bytes last changed. A seal, a retitle or
    a page's next-archive link change a document without moving that date, and a
    one-second date cannot tell two writes in one second apart; a 304 on it would leave a
    client with stale bytes (or mark them immutable). Every document has an ETag.
    """
    response = get_conditional_response(request, etag=headers["ETag"])
    if response is not None:
        for name, value in headers.items():
            response[name] = value
    return response


def _document(request, body: bytes, headers: dict[str, str], content_type=atom.ATOM_TYPE):
    """The whole document in one piece (one write), or for HEAD its headers alone."""
    headers = {**headers, "Content-Length": str(len(body))}
    if request.method == "HEAD":
        return HttpResponse(b"", content_type=content_type, headers=headers)
    return HttpResponse(body, content_type=content_type, headers=headers)


def _head(headers: dict[str, str]) -> HttpResponse:
    # An empty stream: CommonMiddleware would otherwise claim Content-Length: 0 for a
    # document whose length we do not know without rendering it.
    return StreamingHttpResponse(iter(()), content_type=atom.ATOM_TYPE, headers=headers)
