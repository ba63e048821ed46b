"""Development only: a request for another scheme, host or port than FEEDPUB_BASE_URL's is
answered 421 Misdirected Request, saying what to set, instead of documents whose links all
lead elsewhere. Only another loopback name for the same server (http://localhost:8000 for
http://127.0.0.1:8000, as people type it) is redirected there, for GET and HEAD.

Why refuse rather than follow the request: every link in a document is built from the one
setting, because sealed pages are rendered once, by whatever process seals them (a write,
`demo_feed` before the server even starts, the sealer), and never again. A base URL taken
from a request or from runserver's address would freeze into each page whichever address
its sealer happened to know, mixing addresses within one feed. So the setting must say
where the server is; this makes a wrong one impossible to miss while developing. With
DEBUG off (behind proxies, health checks, several names) it is not installed at all.

Whatever DEBUG, a write or seal refused for the base URL the feeds are sealed under
(archives/db/address.py) is answered 503 saying why (`WrongBaseUrlMiddleware`).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from django.core.exceptions import MiddlewareNotUsed
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from archives.conf import settings
from archives.db.address import WrongBaseURL

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": ":80", "https": ":443"}
EXEMPT_PATHS = ("/healthz",)  # container health checks ask by the container's address
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}


class BaseUrlCheckMiddleware:
    def __init__(self, get_response):
        if not settings.DEBUG:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        wanted = origin(settings.FEEDPUB_BASE_URL)
        here = origin(f"{request.scheme}://{request.get_host()}")
        if here == wanted or request.path_info in EXEMPT_PATHS:
            return self.get_response(request)
        if request.method in ("GET", "HEAD") and same_loopback_server(here, wanted):
            return HttpResponseRedirect(settings.FEEDPUB_BASE_URL.rstrip("/")
                                        + request.get_full_path())
        logger.warning("a request for %s, but FEEDPUB_BASE_URL is %s: refused (421)", here,
                       wanted)
        return HttpResponse(misdirected(here, request.get_full_path()), status=421,
                            content_type="text/plain; charset=utf-8")


def origin(url: str) -> str:
    """scheme://host[:port] of a URL, without a default port, in lower case."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return f"{scheme}://{parts.netloc.lower().removesuffix(DEFAULT_PORTS.get(scheme, ''))}"


def same_loopback_server(here: str, wanted: str) -> bool:
    """Two origins naming this machine's loopback by different names, on one scheme and port:
    the same development server."""
    a, b = urlsplit(here), urlsplit(wanted)
    try:
        same_port = (a.scheme, a.port) == (b.scheme, b.port)
    except ValueError:  # a Host's port out of range (Django lets any digits through)
        return False
    return same_port and {_host_name(a.hostname), _host_name(b.hostname)} <= LOOPBACK_NAMES


def _host_name(hostname: str | None) -> str | None:
    """A URL's host as a Host header names it: an IPv6 address in brackets."""
    return f"[{hostname}]" if hostname is not None and ":" in hostname else hostname


def misdirected(here: str, path: str) -> str:
    base = settings.FEEDPUB_BASE_URL
    return (
        f"421 Misdirected Request: this server is feedpub at {base} (FEEDPUB_BASE_URL), but "
        f"this request came to {here}.\n\n"
        "Every link in feedpub's feeds and pages is built from FEEDPUB_BASE_URL, and sealed "
        "archive pages keep the links they were sealed with, so served here they would all "
        f"lead to {base}, and a harvester would stop part-way.\n\n"
        f"Either open {base}{path}\n"
        "or serve feedpub where you mean to, with the setting saying so, e.g.\n"
        f"    FEEDPUB_BASE_URL={here} .venv/bin/python manage.py runserver "
        f"{urlsplit(here).netloc}\n"
        "and move the pages sealed so far (demo_feed seals some) to that address once:\n"
        f"    FEEDPUB_BASE_URL={here} .venv/bin/python manage.py rerender_documents\n\n"
        "(This check runs only with DEBUG on; see the FEEDPUB_BASE_URL setting in "
        "docs/deploying/settings.md.)\n"
    )


class WrongBaseUrlMiddleware:
    """Every process: a write or seal refused because this process has another base URL
    than the feed is sealed under (archives/db/address.py) is answered 503 saying so, both
    addresses and what to do, rather than 500 (the admin's saves, deletions and actions;
    the API answers its own JSON)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, WrongBaseURL):
            return None
        logger.error("%s %s refused: %s", request.method, request.path, exception)
        return HttpResponse(f"503 Service Unavailable: {exception}\n", status=503,
                            content_type="text/plain; charset=utf-8")
