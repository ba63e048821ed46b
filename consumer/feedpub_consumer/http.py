"""HTTP for the consumer tools: limits, a client that keeps them (a request budget, a
deadline, timeouts, a size cap, http(s) only, redirects followed by hand), responses, and
the Link header.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from email.message import Message
from functools import partial
from http.client import HTTPException
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlsplit

if TYPE_CHECKING:
    pass  # the caller's progress bar, if any


USER_AGENT = "feedpub-consumer/0.1 (+RFC 5005 harvester)"
MISSING_STATUSES = (403, 404, 410)  # RFC 5005 4.1: a publisher may refuse or lose archives
ATOM, LINKED_PAGES = "atom", "linked-pages"  # the formats `harvest` reads


# Limits and HTTP -------------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What one run may spend (RFC 5005 section 6: feeds can be crafted to never end)."""

    max_requests: int = 10_000
    max_bytes: int = 20 * 1024 * 1024  # per document, after decompression
    timeout: float = 30.0  # seconds for a whole fetch: connect, headers, body, redirects
    deadline: float | None = None  # seconds for the whole run (from the client's creation)


class FetchError(Exception):
    """A document could not be fetched: network error, timeout, too large, bad URL."""


class RunLimitReached(FetchError):
    """The run has spent its requests or its time: no later fetch will succeed."""


class RequestBudgetExceeded(RunLimitReached):
    """The run has made its maximum number of requests."""


class RunDeadlineExceeded(RunLimitReached):
    """The run's deadline has passed."""


@dataclass
class Response:
    url: str  # after redirects
    status: int
    headers: Message
    body: bytes
    seconds: float

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def etag(self) -> str | None:
        return self.header("ETag")

    @property
    def last_modified(self) -> str | None:
        return self.header("Last-Modified")

    @property
    def cache_control(self) -> dict[str, str | None]:
        return cache_directives(self.header("Cache-Control"))


def is_multipart(response: Response) -> bool:
    """A linked-pages page (multipart/*), not an Atom document."""
    content_type = response.header("Content-Type") or ""
    return content_type.strip().lower().startswith("multipart/")


def cache_directives(value: str | None) -> dict[str, str | None]:
    """`Cache-Control: public, max-age=60` -> {"public": None, "max-age": "60"}."""
    directives: dict[str, str | None] = {}
    for part in (value or "").split(","):
        name, _, argument = part.strip().partition("=")
        if name:
            directives[name.lower()] = argument.strip('"') if argument else None
    return directives


@dataclass(frozen=True)
class HeaderLink:
    """One link of a Link header (RFC 8288): its relation type (lower-case), its target
    resolved against the response's URL, and its target attributes (lower-case names,
    in order; a `*` attribute's value decoded per RFC 8187)."""

    rel: str
    href: str
    attributes: tuple[tuple[str, str], ...] = ()

    def attribute(self, name: str) -> str | None:
        """The first value of attribute `name` (a title* wins over a title: RFC 8288 3.4.1)."""
        values = dict(reversed(self.attributes))
        return values.get(name + "*", values.get(name))


_OWS = " \t"


def parse_links(value: str | None, base: str) -> list[HeaderLink]:
    """Every link of a Link header value, by RFC 8288 Appendix B.2's algorithm: link-values
    separated by commas (commas and semicolons inside quoted strings and targets are
    theirs), parameters as tokens or quoted strings; parsing stops at the first
    link-value that does not start with `<`, as the algorithm does."""
    text, links, at = value or "", [], 0
    while at < len(text):
        at = _skip(text, at, _OWS + ",")
        if at >= len(text) or text[at] != "<":
            break
        end = text.find(">", at + 1)
        if end < 0:
            break
        target = text[at + 1:end].strip()
        parameters, at = _parameters(text, end + 1)
        try:
            href = urljoin(base, target)
        except ValueError:  # not a URL: it cannot match the document's links either
            href = target
        rels = next((value for name, value in parameters if name == "rel"), "")
        attributes = tuple((name, value) for name, value in parameters
                           if name not in ("rel", "anchor"))
        links += [HeaderLink(rel.lower(), href, attributes) for rel in rels.split()]
    return links


def _skip(text: str, at: int, characters: str) -> int:
    while at < len(text) and text[at] in characters:
        at += 1
    return at


def _parameters(text: str, at: int) -> tuple[list[tuple[str, str]], int]:
    """RFC 8288 B.3: the `; name=value` parameters from `at`, and where they end."""
    parameters: list[tuple[str, str]] = []
    while True:
        at = _skip(text, at, _OWS)
        if at >= len(text) or text[at] != ";":
            return parameters, at
        at = _skip(text, at + 1, _OWS)
        start = at
        while at < len(text) and text[at] not in _OWS + "=;,":
            at += 1
        name = text[start:at].lower()
        at = _skip(text, at, _OWS)
        parameter = ""
        if at < len(text) and text[at] == "=":
            at = _skip(text, at + 1, _OWS)
            if at < len(text) and text[at] == '"':
                parameter, at = _quoted_string(text, at + 1)
            else:
                start = at
                while at < len(text) and text[at] not in ";,":
                    at += 1
                parameter = text[start:at].rstrip(_OWS)
            if name.endswith("*"):
                parameter = _extended_value(parameter)
        parameters.append((name, parameter))


def _quoted_string(text: str, at: int) -> tuple[str, int]:
    """RFC 8288 B.4, from just after the opening quote: the unescaped string and where
    it ends (after the closing quote)."""
    characters = []
    while at < len(text):
        character = text[at]
        if character == "\\" and at + 1 < len(text):
            characters.append(text[at + 1])
            at += 2
            continue
        at += 1
        if character == '"':
            break
        characters.append(character)
    return "".join(characters), at


def _extended_value(value: str) -> str:
    """An RFC 8187 ext-value (`UTF-8'en'%E2%82%AC`) decoded; as it is if it is not one."""
    charset, _, rest = value.partition("'")
    _, _, encoded = rest.partition("'")
    try:
        return unquote(encoded, encoding=charset or "utf-8", errors="strict")
    except (LookupError, UnicodeDecodeError):
        return value


def parse_link_header(value: str | None, base: str) -> list[tuple[str, str]]:
    """(rel, absolute href) pairs of an RFC 8288 Link header; a rel list gives one pair each."""
    return [(link.rel, link.href) for link in parse_links(value, base)]


class _NoRedirectErrors(urllib.request.HTTPErrorProcessor):
    """Hand every status back as a response: 304, 404 and 410 are answers, not errors."""

    def http_response(self, request, response):
        if response.status in (301, 302, 303, 307, 308):
            return super().http_response(request, response)  # let the redirect handler act
        return response

    https_response = http_response


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to http(s) URLs only (urllib would also follow one to ftp://).

    To any host: a publisher may move its archive pages to a CDN, and a feed's links can
    name any host anyway, so refusing other hosts here would protect nothing.
    """

    def http_error_302(self, req, fp, code, msg, headers):
        target = urljoin(req.full_url, headers.get("Location") or headers.get("URI") or "")
        if urlsplit(target).scheme.lower() not in ("http", "https"):
            fp.close()
            raise FetchError(f"refusing the redirect from {req.full_url} to {target}: only "
                             "http and https are followed")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        redirected = super().redirect_request(req, fp, code, msg, headers, newurl)
        if redirected is not None and req.get_method() == "HEAD":
            redirected.method = "HEAD"  # urllib before Python 3.12 follows a HEAD with a GET
        return redirected


class _Deadline:
    """Cuts the connections of one fetch when its time is up.

    A socket timeout bounds each read, so a server sending a byte a second would hold a
    fetch for ever; shutting its sockets from a timer bounds the whole fetch.
    """

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        """Watch a socket (urllib drops the connection's reference once the headers are in)."""
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:  # it expired while the connection was being made
            _cut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    """Wake a read blocked on this socket (shutdown, unlike close, is safe across threads;
    a socket closed since has no descriptor left, so this can never hit another one)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # also under TLS


class _WatchedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()  # the TCP connect itself is bounded by the socket timeout
        self.deadline.watch(self.sock)


class _WatchedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        # HTTPSConnection.connect's own steps, on the private attributes it keeps (typeshed
        # leaves them out).
        context = self._context  # type: ignore[attr-defined]
        tunnel_host = self._tunnel_host  # type: ignore[attr-defined]
        self.sock = context.wrap_socket(self.sock, server_hostname=tunnel_host or self.host,
                                        do_handshake_on_connect=False)
        self.deadline.watch(self.sock)  # before the handshake, which can be trickled too
        self.sock.do_handshake()


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, client: HttpClient):
        super().__init__()
        self.client = client

    def http_open(self, req):
        return self.do_open(
            partial(_WatchedHTTPConnection, deadline=self.client.fetch_deadline), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, client: HttpClient):
        super().__init__()
        self.client = client

    def https_open(self, req):
        # The handler's TLS context, a private attribute as in HTTPSHandler.https_open
        # (typeshed leaves it out).
        context = self._context  # type: ignore[attr-defined]
        return self.do_open(
            partial(_WatchedHTTPSConnection, deadline=self.client.fetch_deadline), req,
            context=context)


class HttpClient:
    """urllib with a request budget, deadlines, a size limit, gzip, and request accounting."""

    def __init__(self, limits: Limits | None = None, *, user_agent: str = USER_AGENT):
        self.limits = limits or Limits()
        self.user_agent = user_agent
        self.requests = 0
        self.bytes_received = 0
        self.log: list[tuple[str, str, int]] = []  # (method, url, status) of every request
        self.fetch_deadline = _Deadline(self.limits.timeout)  # the current fetch's
        self._run_ends = (None if self.limits.deadline is None
                          else time.monotonic() + self.limits.deadline)
        self._opener = urllib.request.build_opener(
            _NoRedirectErrors(), _HttpOnlyRedirects(), _WatchedHTTPHandler(self),
            _WatchedHTTPSHandler(self))

    def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
              max_bytes: int | None = None) -> Response:
        try:
            scheme = urlsplit(url).scheme
        except ValueError as error:  # e.g. "http://[oops": a link that is not a URL
            raise FetchError(f"refusing to fetch {url!r}: not a URL ({error})") from None
        if scheme not in ("http", "https"):
            raise FetchError(f"refusing to fetch {url!r}: only http and https URLs are followed")
        if self.requests >= self.limits.max_requests:
            raise RequestBudgetExceeded(
                f"request budget of {self.limits.max_requests} spent before {url}")
        seconds, by_run = self._seconds_for(url)
        self.requests += 1
        request = urllib.request.Request(url, method=method, headers={  # noqa: S310 - checked above
            "User-Agent": self.user_agent,
            "Accept": "application/atom+xml, application/xml;q=0.9, */*;q=0.1",
            "Accept-Encoding": "gzip",
            **(headers or {}),
        })
        started = time.monotonic()
        self.fetch_deadline = _Deadline(seconds)
        try:
            with self.fetch_deadline, self._opener.open(request, timeout=seconds) as answer:
                body = self._read(answer, url, max_bytes or self.limits.max_bytes)
                if self.fetch_deadline.expired:  # the body may have been cut short
                    raise TimeoutError
                status, final_url, answer_headers = answer.status, answer.geturl(), answer.headers
        except urllib.error.HTTPError as error:  # raised for too many redirects and the like
            status, final_url, answer_headers, body = error.code, url, error.headers, b""
        except (FetchError, urllib.error.URLError, HTTPException, OSError, ValueError) as error:
            self.log.append((method, url, 0))
            reason = getattr(error, "reason", None) or error
            if self.fetch_deadline.expired or isinstance(reason, TimeoutError):
                raise self._timed_out(url, seconds, by_run) from error
            if isinstance(error, FetchError):
                raise
            raise FetchError(f"could not fetch {url}: {reason}") from error
        self.log.append((method, url, status))
        return Response(final_url, status, answer_headers, body, time.monotonic() - started)

    def _seconds_for(self, url: str) -> tuple[float, bool]:
        """Seconds the next fetch may take, and whether the run's deadline is what limits it."""
        if self._run_ends is None:
            return self.limits.timeout, False
        left = self._run_ends - time.monotonic()
        if left <= 0:
            raise RunDeadlineExceeded(
                f"the run deadline of {self.limits.deadline:g} s passed before {url}")
        return min(left, self.limits.timeout), left < self.limits.timeout

    def _timed_out(self, url: str, seconds: float, by_run: bool) -> FetchError:
        if by_run:
            return RunDeadlineExceeded(f"could not fetch {url}: timed out: the run deadline of "
                                       f"{self.limits.deadline:g} s passed")
        return FetchError(f"could not fetch {url}: timed out after {seconds:g} s")

    def _read(self, answer, url: str, max_bytes: int) -> bytes:
        length = answer.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"{url} is {length} bytes, more than the limit of {max_bytes}")
        raw = answer.read(max_bytes + 1)
        self.bytes_received += len(raw)
        if (answer.headers.get("Content-Encoding") or "").lower() == "gzip":
            decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                raw = decompressor.decompress(raw, max_bytes + 1)
            except zlib.error as error:
                raise FetchError(f"{url}: bad gzip body ({error})") from error
        if len(raw) > max_bytes:
            raise FetchError(f"{url} is larger than the limit of {max_bytes} bytes")
        return raw
