"""The deploy nginx (deploy/nginx/feedpub.conf.template), run for real in front of the live
server: what a client gets through it, with its cache, after the origin's documents change.

The cache must never make things worse than asking feedpub itself: no expired copy while
feedpub answers, no 304 to a client whose copy is outdated, `immutable` only on the bytes
that are final. Needs nginx (tests/nginx_server.py: skipped without it, an error in CI).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import resource
import socket
import threading
import time
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from django.urls import reverse

from archives.documents import kinds
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed

from . import nginx_server
from .factories import FeedFactory, record_data
from .nginx_server import Nginx, require_nginx
from .test_kinds import sample_arguments

MAX_AGE = 2  # seconds: FEEDPUB_MAX_AGE, short so that copies expire within a test
NEXT_ARCHIVE = b'rel="next-archive"'
FEED = "/feeds/deployed/"
PAGE_1 = "/feeds/deployed/archives/1/"


@pytest.fixture
def deployed(live_server, settings, transactional_db, tmp_path):
    """nginx with the deploy template in front of the live server."""
    require_nginx()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{live_server.thread.port}")
    settings.FEEDPUB_MAX_AGE = MAX_AGE
    settings.FEEDPUB_BASE_URL = nginx.url  # before any page is sealed: pages keep it
    nginx.start()
    yield nginx
    nginx.stop()


def write(feed: Feed, numbers) -> None:
    """Puts through the write path, then seal every full page."""
    for n in numbers:
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(Feed.objects.get(pk=feed.pk))


def wait_until_expired(response) -> None:
    """Sleep until nginx's copy of `response` has expired. nginx counts in whole seconds
    from when it stored the copy (its Date): fresh while its clock is at most Date +
    max-age, so expired from Date + max-age + 1."""
    stored = parsedate_to_datetime(response.header("Date")).timestamp()
    delay = stored + MAX_AGE + 1 + 0.05 - time.time()
    if delay > 0:
        time.sleep(delay)


def start_of_a_second() -> None:
    time.sleep(1.01 - time.time() % 1)


def describe(response) -> str:
    return f"{response.status} {dict(response.headers)}"


# (1) A page that gains its next-archive link -------------------------------------------

@pytest.mark.parametrize("validator", ["If-Modified-Since", "If-None-Match"])
def test_a_page_that_gained_next_archive_is_never_304_on_its_old_validators(deployed,
                                                                           validator):
    feed = FeedFactory(slug="deployed", page_size=3)
    write(feed, range(3))  # page 1 is sealed and is the newest page
    first = deployed.request(PAGE_1)
    assert first.status == 200
    assert NEXT_ARCHIVE not in first.body
    assert "immutable" not in first.header("Cache-Control")

    write(feed, range(3, 6))  # page 2 is sealed: page 1 gains its next-archive link
    wait_until_expired(first)
    if validator == "If-Modified-Since":
        # Its Last-Modified; without one, when it was received (what caches then send).
        value = first.header("Last-Modified") or first.header("Date")
    else:
        value = first.header("ETag")
    again = deployed.request(PAGE_1, {validator: value})

    assert again.status == 200, describe(again)
    assert again.header("X-Cache-Status") in {"EXPIRED", "MISS"}, describe(again)
    assert NEXT_ARCHIVE in again.body
    assert again.header("Cache-Control") == "public, max-age=31536000, immutable"
    assert again.header("ETag") != first.header("ETag")
    # From now on nginx answers from its copy, which is final.
    cached = deployed.request(PAGE_1)
    assert cached.header("X-Cache-Status") == "HIT"
    assert cached.body == again.body


# (2) A write in the second of a poll ---------------------------------------------------

def test_a_write_in_the_same_second_as_a_poll_is_never_hidden_by_a_304(deployed):
    feed = FeedFactory(slug="deployed", page_size=100)
    write(feed, range(2))
    start_of_a_second()  # so that the poll and the write fall within one second
    first = deployed.request(FEED)
    publishing.put_record(feed=feed, key="late", data=record_data(99, title="Written late"))
    assert first.status == 200
    assert b"Written late" not in first.body

    wait_until_expired(first)
    since = first.header("Last-Modified") or first.header("Date")
    again = deployed.request(FEED, {"If-Modified-Since": since})

    assert again.status == 200, describe(again)
    assert b"Written late" in again.body
    assert again.header("X-Cache-Status") in {"EXPIRED", "MISS"}, describe(again)


def test_the_open_linked_page_is_never_304_on_a_date(deployed):
    """Its Last-Modified is its newest entity's (the linked-pages format's rule), so two
    versions within one second share it: only its ETag can tell them apart."""
    feed = FeedFactory(slug="deployed", page_size=100)
    start_of_a_second()
    write(feed, [1])
    first = deployed.request("/feeds/deployed/pages/1")
    write(feed, [2])  # the same second: the page gains an entity under the same date
    assert first.status == 200
    assert b"/records/k2" not in first.body

    wait_until_expired(first)
    since = first.header("Last-Modified") or first.header("Date")
    again = deployed.request("/feeds/deployed/pages/1", {"If-Modified-Since": since})

    assert again.status == 200, describe(again)
    assert b"/records/k2" in again.body


# (3) A final page from nginx's cache ---------------------------------------------------

def test_a_final_page_is_served_from_the_cache_with_304s(deployed):
    feed = FeedFactory(slug="deployed", page_size=3)
    write(feed, range(6))  # pages 1 and 2: page 1 has its next-archive link
    first = deployed.request(PAGE_1)
    assert first.status == 200
    assert NEXT_ARCHIVE in first.body
    assert first.header("Cache-Control") == "public, max-age=31536000, immutable"

    second = deployed.request(PAGE_1)
    assert second.header("X-Cache-Status") == "HIT"
    assert second.body == first.body
    assert second.header("ETag") == first.header("ETag")

    by_etag = deployed.request(PAGE_1, {"If-None-Match": first.header("ETag")})
    assert by_etag.status == 304, describe(by_etag)
    assert by_etag.header("X-Cache-Status") == "HIT"
    assert by_etag.body == b""


def test_documents_are_cached_gzipped_and_plain_and_revalidate_in_either(deployed):
    feed = FeedFactory(slug="deployed", page_size=3)
    write(feed, range(6))
    for _ in range(2):  # filled, then both from the cache
        zipped = deployed.request(PAGE_1, {"Accept-Encoding": "gzip, deflate, br"})
        plain = deployed.request(PAGE_1)
    assert zipped.header("Content-Encoding") == "gzip"
    assert plain.header("Content-Encoding") is None
    assert gzip.decompress(zipped.body) == plain.body
    assert (zipped.header("X-Cache-Status"), plain.header("X-Cache-Status")) == ("HIT", "HIT")
    assert "Accept-Encoding" in zipped.header("Vary")
    # feedpub's own: each its file's (archives/storage/export.py), the second and each length
    assert zipped.header("ETag").split("-")[0] == plain.header("ETag").split("-")[0]
    assert zipped.header("ETag") != plain.header("ETag")
    for headers in ({"Accept-Encoding": "gzip", "If-None-Match": zipped.header("ETag")},
                    {"If-None-Match": plain.header("ETag")}):
        again = deployed.request(PAGE_1, headers)
        assert again.status == 304, describe(again)


@pytest.mark.parametrize(("accept_encoding", "gzipped"), [
    ("gzip", True), ("x-gzip", True), ("deflate, GZIP;q=0.5", True), ("br,gzip", True),
    ("gzip;q=0", False), ("gzip;q=0.0, br", False), ("identity", False), ("*", False),
    ("br, gzipped", False),
])
def test_nginx_reads_accept_encoding_as_feedpub_does(deployed, accept_encoding, gzipped):
    feed = FeedFactory(slug="deployed", page_size=3)
    write(feed, range(6))
    response = deployed.request(PAGE_1, {"Accept-Encoding": accept_encoding})
    assert (response.header("Content-Encoding") == "gzip") is gzipped


BROWSER_ACCEPT = ("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,"
                  "image/webp,*/*;q=0.8")


def test_people_and_readers_each_get_their_variant_from_the_cache(deployed):
    feed = FeedFactory(slug="deployed", page_size=3)
    write(feed, range(6))
    for _ in range(2):  # filled, then both from the cache, neither evicting the other
        page = deployed.request(PAGE_1, {"Accept": BROWSER_ACCEPT})
        atom = deployed.request(PAGE_1)
    assert page.header("Content-Type").startswith("text/html")
    assert atom.header("Content-Type").startswith("application/atom+xml")
    assert (page.header("X-Cache-Status"), atom.header("X-Cache-Status")) == ("HIT", "HIT")
    assert "Accept" in page.header("Vary")
    assert "Accept" in atom.header("Vary")


# The proxy's own behaviour, in front of a stub upstream --------------------------------

STUB_DATE = "Mon, 01 Jan 2024 00:00:00 GMT"


class StubHandler(BaseHTTPRequestHandler):
    """/echo: the request's headers as JSON; /typed?type=T: 4 KB of type T; anything
    under /feeds/: one fixed, cacheable document with an ETag and a Last-Modified."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        headers = {"Content-Type": "text/plain"}
        if url.path == "/echo":
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        elif url.path == "/typed":
            headers["Content-Type"] = parse_qs(url.query)["type"][0]
            body = b"<item>compressible</item>\n" * 160
        elif url.path.startswith("/feeds/"):
            body = b"<feed>version 1</feed>\n"
            headers.update({"Content-Type": "application/atom+xml", "ETag": '"v1"',
                            "Last-Modified": STUB_DATE, "Cache-Control": "public, max-age=60"})
        else:
            self.send_error(404)
            return
        self.send_response(200)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def stub_nginx(stub_upstream, tmp_path):
    require_nginx()
    nginx = Nginx(tmp_path / "nginx", stub_upstream).start()
    yield nginx
    nginx.stop()


def test_the_forwarded_scheme_is_nginx_own_not_the_client_claim(stub_nginx):
    claims = {"X-Forwarded-Proto": "https", "X-Forwarded-Ssl": "on",
              "X-Forwarded-Protocol": "ssl"}  # the last two: gunicorn believes them too
    seen = json.loads(stub_nginx.request("/echo", claims).body)
    assert seen["x-forwarded-proto"] == "http"
    assert "x-forwarded-ssl" not in seen
    assert "x-forwarded-protocol" not in seen


def trust_localhost(text: str) -> str:
    edited = text.replace("    default 0;\n", "    default 0;\n    127.0.0.1/32 1;\n", 1)
    assert edited != text
    return edited


def test_forwarded_for_is_passed_on_only_from_a_trusted_proxy(stub_upstream, tmp_path):
    require_nginx()
    claimed = {"X-Forwarded-For": "203.0.113.5"}
    for trusted, seen in (("", "127.0.0.1"), ("127.0.0.1", "203.0.113.5, 127.0.0.1")):
        nginx = Nginx(tmp_path / f"nginx{bool(trusted)}", stub_upstream,
                      trusted_proxies=trusted).start()
        try:
            assert json.loads(nginx.request("/echo", claimed).body)["x-forwarded-for"] == seen
        finally:
            nginx.stop()


def test_a_trusted_proxy_forwarded_scheme_is_passed_on(stub_upstream, tmp_path):
    require_nginx()
    nginx = Nginx(tmp_path / "nginx", stub_upstream, edit=trust_localhost).start()
    try:
        def scheme(claimed):
            headers = {"X-Forwarded-Proto": claimed} if claimed else {}
            return json.loads(nginx.request("/echo", headers).body)["x-forwarded-proto"]
        assert scheme("https") == "https"
        assert scheme("http") == "http"
        assert scheme(None) == "http"
        assert scheme("gopher") == "http"  # only http or https, even from a trusted proxy
    finally:
        nginx.stop()


@pytest.mark.parametrize("content_type", [
    "application/atom+xml; charset=utf-8", "application/rss+xml; charset=utf-8",
    "application/json", "application/xml",
])
def test_feeds_and_json_are_gzipped(stub_nginx, content_type):
    path = "/typed?type=" + quote(content_type)
    answer = stub_nginx.request(path, {"Accept-Encoding": "gzip", "Via": "1.1 a-proxy"})
    assert answer.header("Content-Encoding") == "gzip"
    assert answer.header("Vary") == "Accept-Encoding"
    assert gzip.decompress(answer.body).startswith(b"<item>")


SNAPSHOT = "/feeds/x/snapshots/0b9d4a8e-5d1f-4b8e-9a41-2f7c3c1d9e10/"


def test_a_date_revalidates_documents_exactly_but_never_linked_pages(stub_nginx):
    """`if_modified_since exact` under /feeds/, `off` for the linked pages, whose open page
    changes without its Last-Modified moving, and for snapshots, whose links change under
    their dates when rerender_documents follows a move."""
    by_etag_only = ("/feeds/x/pages/1", SNAPSHOT, SNAPSHOT + "pages/1")
    for path in ("/feeds/x/", *by_etag_only):
        assert stub_nginx.request(path).status == 200
        assert stub_nginx.request(path).header("X-Cache-Status") == "HIT"
    exact = {"If-Modified-Since": STUB_DATE}
    later = {"If-Modified-Since": "Tue, 02 Jan 2024 00:00:00 GMT"}
    assert stub_nginx.request("/feeds/x/", exact).status == 304
    assert stub_nginx.request("/feeds/x/", later).status == 200
    for path in by_etag_only:
        assert stub_nginx.request(path, exact).status == 200, path
        assert stub_nginx.request(path, {"If-None-Match": '"v1"'}).status == 304, path


def test_a_client_sending_both_validators_gets_304_when_both_match(stub_nginx):
    """Browsers, feed readers and caches send If-None-Match and If-Modified-Since together;
    nginx's `if_modified_since off` would answer every such request in full."""
    assert stub_nginx.request("/feeds/x/").status == 200
    both = {"If-None-Match": '"v1"', "If-Modified-Since": STUB_DATE}
    assert stub_nginx.request("/feeds/x/", both).status == 304
    assert stub_nginx.request("/feeds/x/", {**both, "If-None-Match": '"v0"'}).status == 200


def test_without_nginx_these_tests_skip_but_fail_in_ci(monkeypatch):
    monkeypatch.setattr(nginx_server, "nginx_binary", lambda: None)
    monkeypatch.delenv("FEEDPUB_REQUIRE_NGINX", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_nginx()
    monkeypatch.setenv("FEEDPUB_REQUIRE_NGINX", "1")  # .ci/run sets it
    with pytest.raises(pytest.fail.Exception):
        require_nginx()


# Long polls go to the ASGI service, uncached --------------------------------------------

class NamedStubHandler(StubHandler):
    """The stub's fixed document, saying which upstream answered and how often."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests += 1
        body = self.server.name.encode()
        self.send_response(200)
        for name, value in {"Content-Type": "application/atom+xml", "ETag": '"v1"',
                            "Cache-Control": "public, max-age=60",
                            "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def two_upstreams(tmp_path):
    require_nginx()
    servers = {}
    for name in ("web", "longpoll"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), NamedStubHandler)
        server.name, server.requests = name, 0
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{servers['web'].server_address[1]}",
                  long_poll=f"127.0.0.1:{servers['longpoll'].server_address[1]}").start()
    yield nginx, servers
    nginx.stop()
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("path", "prefer", "upstream"), [
    ("/feeds/x/", "wait=10", "longpoll"),
    ("/feeds/x/rss/", "wait=10", "longpoll"),
    ("/feeds/x/", "respond-async, WAIT = 10", "longpoll"),
    ("/feeds/x/", None, "web"),
    ("/feeds/x/", "respond-async", "web"),
    ("/feeds/x/", "handling=strict; wait=10", "web"),  # a parameter, not a preference
    ("/feeds/x/archives/1/", "wait=10", "web"),  # only subscription documents wait
    ("/feeds/x/paged/", "wait=10", "web"),
])
def test_long_polls_and_only_they_go_to_the_asgi_service(two_upstreams, path, prefer,
                                                          upstream):
    nginx, servers = two_upstreams
    headers = {"Prefer": prefer} if prefer else {}
    answers = [nginx.request(path, headers) for _ in range(2)]
    assert [answer.body.decode() for answer in answers] == [upstream, upstream]
    # Documents are cached as ever; a long poll's answer never is.
    assert servers[upstream].requests == (2 if upstream == "longpoll" else 1)


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_nginx_sends_long_polls_of_exactly_the_long_polled_kinds(two_upstreams, kind):
    """The template against the registry of document kinds (archives/documents/kinds.py),
    by a request for each kind (tests/test_kinds.py reads the template's map the same)."""
    nginx, _ = two_upstreams
    path = reverse(kind.route, args=sample_arguments(kind.pattern))
    answer = nginx.request(path, {"Prefer": "wait=10"})
    assert answer.body.decode() == ("longpoll" if kind.long_polled else "web")


def test_a_long_poll_through_nginx_is_answered_when_the_feed_changes(live_server, settings,
                                                                     transactional_db,
                                                                     tmp_path, monkeypatch):
    from django.db import connection

    from .asgi_server import AsgiServer

    require_nginx()
    settings.FEEDPUB_SEAL_ON_WRITE = False
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)  # as the service runs
    feed = FeedFactory(slug="deployed", page_size=10)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    asgi = AsgiServer().start()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{live_server.thread.port}",
                  long_poll=f"127.0.0.1:{asgi.port}").start()
    try:
        etag = nginx.request(FEED).header("ETag")
        answers = []
        waiting = threading.Thread(target=lambda: answers.append(
            nginx.request(FEED, {"If-None-Match": etag, "Prefer": "wait=20"})))
        waiting.start()
        asgi.wait_for_waiters("deployed", 1)
        publishing.put_record(feed=feed, key="k2", data=record_data(2))
        waiting.join(timeout=25)
        answer, = answers
        assert answer.status == 200
        assert answer.header("Preference-Applied") == "wait=20"
        assert b"Record 2" in answer.body
        assert answer.header("ETag") != etag
    finally:
        nginx.stop()
        asgi.stop()


# The scheme in the cache key --------------------------------------------------------------

class SecureStubHandler(BaseHTTPRequestHandler):
    """As feedpub with SECURE_SSL_REDIRECT: plain http (by X-Forwarded-Proto) is redirected,
    https gets a cacheable document with HSTS."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get("X-Forwarded-Proto") == "https":
            self.send_response(200)
            headers = {"Content-Type": "application/atom+xml", "ETag": '"v1"',
                       "Cache-Control": "public, max-age=60",
                       "Strict-Transport-Security": "max-age=3600"}
            body = b"<feed/>"
        else:
            self.send_response(301)
            headers = {"Location": f"https://feeds.example.org{self.path}"}
            body = b""
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_plain_http_request_gets_the_redirect_not_the_cached_https_page(tmp_path):
    """Behind a TLS terminator nginx's own scheme is always http: keyed on it, the https
    page (with HSTS) was the cached answer to plain http too, which feedpub redirects."""
    require_nginx()
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), SecureStubHandler)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{upstream.server_address[1]}",
                  edit=trust_localhost).start()
    try:
        for _ in range(2):  # stored, then from the cache
            https = nginx.request("/feeds/x/", {"X-Forwarded-Proto": "https"})
        plain = nginx.request("/feeds/x/", {"X-Forwarded-Proto": "http"})
    finally:
        nginx.stop()
        upstream.shutdown()
        upstream.server_close()
    assert https.status == 200
    assert https.header("X-Cache-Status") == "HIT"
    assert https.header("Strict-Transport-Security") == "max-age=3600"
    assert plain.status == 301, describe(plain)
    assert plain.header("Location") == "https://feeds.example.org/feeds/x/"
    assert plain.header("Strict-Transport-Security") is None


# Rates per client behind two proxies ------------------------------------------------------

def test_one_client_throttled_behind_two_proxies_leaves_the_other_alone(deployed, settings):
    """A TLS terminator in front of nginx appends the client's address to X-Forwarded-For,
    nginx appends the terminator's: with FEEDPUB_API_PROXIES=2 each client is counted by
    its own address. With 1 (nginx alone) both counted as the terminator, and one client's
    429 was the other's. Only a trusted proxy's X-Forwarded-For is passed on
    (FEEDPUB_TRUSTED_PROXIES): anyone else's is replaced by their own address."""
    from django.core.cache import cache

    settings.FEEDPUB_API_ANON_RATE = "2/hour"
    FeedFactory(slug="deployed")
    alice, bob = {"X-Forwarded-For": "203.0.113.5"}, {"X-Forwarded-For": "198.51.100.7"}

    def codes(proxies, *clients):
        cache.clear()
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": proxies}
        return [deployed.request("/api/feeds/", client).status for client in clients]

    # Not from a trusted proxy: the header is not believed, both are 127.0.0.1.
    assert codes(2, alice, alice, bob) == [200, 200, 429]
    deployed.stop()
    deployed.trusted_proxies = "127.0.0.1"  # the terminator
    deployed.start()
    assert codes(2, alice, alice, alice, bob) == [200, 200, 429, 200]
    assert codes(1, alice, alice, bob) == [200, 200, 429]  # why the setting matters


# Upstreams resolved while nginx runs ------------------------------------------------------

class DnsStub:
    """A DNS server answering A queries for the names in `addresses` (TTL 1 s), NXDOMAIN
    for any other: the part of Docker's DNS that nginx's resolver uses."""

    def __init__(self):
        self.addresses: dict[str, str] = {}
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                query, peer = self.socket.recvfrom(512)
            except OSError:
                return
            self.socket.sendto(self.answer(query), peer)

    def answer(self, query: bytes) -> bytes:
        labels, at = [], 12
        while query[at]:
            labels.append(query[at + 1:at + 1 + query[at]].decode())
            at += query[at] + 1
        question = query[12:at + 5]
        address = self.addresses.get(".".join(labels).lower())
        if int.from_bytes(query[at + 1:at + 3], "big") != 1:  # not an A query
            address = None
        header = query[:2] + bytes([0x81, 0x80 if address else 0x83])  # answer / NXDOMAIN
        header += (1).to_bytes(2, "big") + (1 if address else 0).to_bytes(2, "big") + bytes(4)
        record = b""
        if address:
            record = (b"\xc0\x0c" + (1).to_bytes(2, "big") * 2 + (1).to_bytes(4, "big")
                      + (4).to_bytes(2, "big") + socket.inet_aton(address))
        return header + question + record

    def close(self):
        self.socket.close()


def named_server(address: str, port: int, name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), NamedStubHandler)
    server.name, server.requests = name, 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def until_let_go(answered: float) -> None:
    """Sleep until nginx's resolver no longer uses an answer it had by `answered` (valid=1s).
    It counts whole seconds: an answer got in second S is used while its clock reads at
    most S + 1, i.e. up to 2 s later (a fixed 1.5 s sleep often still met the old one)."""
    time.sleep(max(0.0, int(answered) + 2 + 0.01 - time.time()))


def test_nginx_starts_without_its_upstreams_and_follows_their_addresses(tmp_path):
    """docker-compose.yml's `web` and `longpoll` are names that Docker's DNS answers only
    while their containers exist, with a new address for a recreated one."""
    require_nginx()
    dns = DnsStub()
    port = nginx_server.free_port()
    nginx = Nginx(tmp_path / "nginx", f"web.feedpub.test:{port}",
                  resolver=f"127.0.0.1:{dns.port} valid=1s ipv6=off").start()
    servers = []
    try:
        assert nginx.request("/anything").status == 502  # started, though `web` is unknown
        answered = time.time()
        servers.append(named_server("127.0.0.1", port, "first"))
        dns.addresses["web.feedpub.test"] = "127.0.0.1"
        until_let_go(answered)  # the unknown name's answer expires (valid=1s)
        assert nginx.request("/anything").body == b"first"
        answered = time.time()
        # The container is recreated elsewhere: the same name, a new address.
        servers.append(named_server("127.0.0.2", port, "second"))
        servers[0].shutdown()
        servers[0].server_close()
        dns.addresses["web.feedpub.test"] = "127.0.0.2"
        until_let_go(answered)
        assert nginx.request("/anything").body == b"second"
    finally:
        nginx.stop()
        dns.close()
        for server in servers[1:]:
            server.shutdown()
            server.server_close()


# Many long polls through the deploy's nginx.conf ---------------------------------------------

class HeldPolls:
    """A long-poll service stand-in: holds every request until released, then answers 200."""

    def __init__(self):
        self.held = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.release = asyncio.run_coroutine_threadsafe(self._event(), self.loop).result()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.answer, "127.0.0.1", 0, backlog=4096), self.loop).result()
        self.port = self.server.sockets[0].getsockname()[1]

    async def _event(self):
        return asyncio.Event()

    async def answer(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        self.held += 1
        await self.release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    def answer_all(self):
        self.loop.call_soon_threadsafe(self.release.set)

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def poll(port: int) -> int:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /feeds/x/ HTTP/1.1\r\nHost: 127.0.0.1\r\nPrefer: wait=30\r\n\r\n")
        await writer.drain()
        status = int((await reader.readuntil(b"\r\n")).split()[1])
        writer.close()
        return status
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return 0  # refused, or closed without an answer


POLLS = 1500  # what the image's 1,024 connections a worker dropped a third of


def test_nginx_holds_every_long_poll_of_a_burst(tmp_path):
    """Each poll holds two nginx connections (the client's, the service's): with the image's
    nginx.conf (1,024 a worker) 542 of 1,500 polls were dropped. bench/longpoll.py
    --through-nginx measures 5,000."""
    require_nginx()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * POLLS + 200  # this process holds both ends
    if soft < needed:
        if hard < needed:
            pytest.skip(f"needs {needed} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    service = HeldPolls()
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9",
                  long_poll=f"127.0.0.1:{service.port}").start()
    try:
        async def burst():
            polls = [asyncio.ensure_future(poll(nginx.port)) for _ in range(POLLS)]
            deadline = time.monotonic() + 60
            while service.held < POLLS and time.monotonic() < deadline:
                if all(p.done() for p in polls):
                    break
                await asyncio.sleep(0.1)
            held = service.held
            service.answer_all()
            return held, await asyncio.gather(*polls)

        held, statuses = asyncio.run(burst())
    finally:
        nginx.stop()
        service.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert held == POLLS
    assert statuses.count(200) == POLLS, {s: statuses.count(s) for s in set(statuses)}
