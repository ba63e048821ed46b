"""Long polling (RFC 7240 `Prefer: wait=N`) through a real uvicorn and a real HTTP client
(httpx, in threads): a held poll answers 200 with the new entry soon after a write, 304 when
its time is up, at once when the client's copy is stale or the preference is not one it
applies. On PostgreSQL waiters are woken by NOTIFY, on SQLite by re-reading the head."""

from __future__ import annotations

import asyncio
import gzip
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection
from lxml import etree

from archives.log import publishing
from archives.serving import longpoll
from archives.serving.longpoll import LongPolling, Watcher, requested_wait

from .asgi_server import AsgiServer
from .factories import FeedFactory, record_data
from .walking import NS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(settings, monkeypatch):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    # As deploy/entrypoint.sh runs it: Django serves each ASGI request in a thread of its
    # own, whose connection must close with the request.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    running = AsgiServer().start()
    yield running
    running.stop()


@pytest.fixture
def books(transactional_db):
    feed = FeedFactory(slug="books", title="Books", page_size=10)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    return feed


def get(server, path="/feeds/books/", timeout=40, **headers) -> tuple[httpx.Response, float]:
    """The response and the seconds it took."""
    began = time.monotonic()
    response = httpx.get(server.url + path, headers=headers, timeout=timeout)
    return response, time.monotonic() - began


def current_etag(server, path="/feeds/books/", **headers) -> str:
    response, _ = get(server, path, **headers)
    assert response.status_code == 200
    return response.headers["ETag"]


def titles(body: bytes) -> list[str]:
    return [title.text for title in
            etree.fromstring(body).findall("a:entry/a:title", NS)]


def test_a_waiting_poll_gets_the_new_document_soon_after_a_write(server, books):
    etag = current_etag(server)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(get, server, **{"If-None-Match": etag, "Prefer": "wait=20"})
        server.wait_for_waiters("books", 1)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        committed = time.monotonic()
        response, _ = waiting.result(timeout=25)
    told = time.monotonic() - committed
    assert response.status_code == 200
    assert response.headers["Preference-Applied"] == "wait=20"
    assert response.headers["ETag"] != etag
    assert titles(response.content) == ["Record 2", "Record 1"]
    assert told < 2  # NOTIFY: milliseconds; SQLite: the head is re-read every 0.5 s


def test_a_poll_whose_time_is_up_gets_304(server, books):
    etag = current_etag(server)
    response, took = get(server, **{"If-None-Match": etag, "Prefer": "wait=1"})
    assert response.status_code == 304
    assert response.headers["ETag"] == etag
    assert response.headers["Preference-Applied"] == "wait=1"
    assert 1 <= took < 3
    assert server.waiting("books") == 0


def test_a_stale_copy_is_answered_at_once(server, books):
    response, took = get(server, **{"If-None-Match": '"old"', "Prefer": "wait=20"})
    assert response.status_code == 200
    assert "Preference-Applied" not in response.headers
    assert titles(response.content) == ["Record 1"]
    assert took < 2


def test_the_wait_is_capped(server, books, settings):
    settings.FEEDPUB_LONG_POLL_MAX_WAIT = 1
    etag = current_etag(server)
    response, took = get(server, **{"If-None-Match": etag, "Prefer": "wait=3600"})
    assert response.status_code == 304
    assert response.headers["Preference-Applied"] == "wait=1"
    assert 1 <= took < 3


def test_a_poll_with_a_repeated_parameter_is_refused_at_once(server, books):
    etag = current_etag(server)
    response, took = get(server, "/feeds/books/?format=atom&format=html",
                         **{"If-None-Match": etag, "Prefer": "wait=20"})
    assert response.status_code == 400
    assert response.text == "The parameter format is given more than once; give it once."
    assert "Preference-Applied" not in response.headers
    assert took < 10


def holds(server, monkeypatch) -> list[str]:
    """The feeds of the requests the server held (LongPolling.hold), as they come: a
    request never held is answered at once, which no bound on the time taken can tell
    on a busy machine (a 0.9 s one failed there)."""
    held = []
    hold = server.application.hold

    async def counted(slug, *args):
        held.append(slug)
        return await hold(slug, *args)

    monkeypatch.setattr(server.application, "hold", counted)
    return held


@pytest.mark.parametrize("prefer", ["wait=abc", "wait=", "wait=-1", "wait=1.5", "wait=0",
                                    "respond-async", "handling=lenient",
                                    "wait=" + "9" * 5000, "wait=1234567890"])
def test_a_preference_it_does_not_apply_is_ignored(server, books, prefer, monkeypatch):
    etag = current_etag(server)
    held = holds(server, monkeypatch)
    response, _ = get(server, **{"If-None-Match": etag, "Prefer": prefer})
    assert response.status_code == 304
    assert "Preference-Applied" not in response.headers
    assert held == []


def test_without_if_none_match_nothing_waits(server, books, monkeypatch):
    held = holds(server, monkeypatch)
    response, _ = get(server, Prefer="wait=20")
    assert response.status_code == 200
    assert "Preference-Applied" not in response.headers
    assert held == []


@pytest.mark.parametrize(("prefer", "wait"), [("respond-async, wait=1", 1),
                                              ('WAIT="1"; foo=bar', 1),
                                              ("wait=1, wait=30", 1)])
def test_wait_is_read_as_rfc_7240_writes_it(prefer, wait):
    assert requested_wait([(b"prefer", prefer.encode())]) == wait
    assert requested_wait([(b"prefer", b"return=minimal"), (b"prefer", prefer.encode())]) \
        == wait


def test_the_rss_subscription_and_head_requests_wait_too(server, books):
    etag = current_etag(server, "/feeds/books/rss/")
    with ThreadPoolExecutor(2) as pool:
        rss = pool.submit(get, server, "/feeds/books/rss/",
                          **{"If-None-Match": etag, "Prefer": "wait=20"})
        head = pool.submit(lambda: httpx.head(
            server.url + "/feeds/books/", timeout=40,
            headers={"If-None-Match": current_etag(server), "Prefer": "wait=20"}))
        server.wait_for_waiters("books", 2)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        response, _ = rss.result(timeout=25)
        head_response = head.result(timeout=25)
    assert response.status_code == 200
    assert b"<title>Record 2</title>" in response.content
    assert head_response.status_code == 200
    assert head_response.content == b""
    assert head_response.headers["Preference-Applied"] == "wait=20"


def test_a_head_long_poll_warns_nothing(server, books, recwarn):
    # Django warns when an ASGI server consumes a synchronous stream (the HEAD answer of
    # a document whose length is not known without rendering it). recwarn records the
    # warnings of the server's thread too: the filters are the process's.
    etag = current_etag(server)
    with ThreadPoolExecutor(1) as pool:
        head = pool.submit(lambda: httpx.head(
            server.url + "/feeds/books/", timeout=40,
            headers={"If-None-Match": etag, "Prefer": "wait=20"}))
        server.wait_for_waiters("books", 1)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        held = head.result(timeout=25)
    unheld = httpx.head(server.url + "/feeds/books/", timeout=10)
    assert (held.status_code, unheld.status_code) == (200, 200)
    assert held.headers["ETag"] == unheld.headers["ETag"] != etag
    assert "Content-Length" not in held.headers
    assert [str(warning.message) for warning in recwarn
            if "StreamingHttpResponse" in str(warning.message)] == []


def test_waiters_of_each_encoding_get_their_own_bytes(server, books):
    plain_etag = current_etag(server, **{"Accept-Encoding": "identity"})
    gzip_etag = current_etag(server, **{"Accept-Encoding": "gzip"})
    assert plain_etag != gzip_etag
    with ThreadPoolExecutor(6) as pool:
        plain = [pool.submit(get, server, **{"If-None-Match": plain_etag, "Prefer": "wait=20",
                                             "Accept-Encoding": "identity"})
                 for _ in range(3)]
        gzipped = [pool.submit(get, server, **{"If-None-Match": gzip_etag,
                                               "Prefer": "wait=20",
                                               "Accept-Encoding": "gzip"})
                   for _ in range(3)]
        server.wait_for_waiters("books", 6)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        plain = [future.result(timeout=25)[0] for future in plain]
        gzipped = [future.result(timeout=25)[0] for future in gzipped]
    assert {response.headers.get("Content-Encoding") for response in plain} == {None}
    assert {response.headers["Content-Encoding"] for response in gzipped} == {"gzip"}
    # httpx decodes gzip: the same document either way, under ETags of their own.
    assert len({response.content for response in plain + gzipped}) == 1
    assert titles(plain[0].content) == ["Record 2", "Record 1"]
    assert gzip.decompress(gzip.compress(plain[0].content)) == gzipped[0].content
    assert plain[0].headers["ETag"] != gzipped[0].headers["ETag"]


def test_a_client_that_leaves_is_no_longer_waited_on(server, books):
    etag = current_etag(server, **{"Accept-Encoding": "identity"})
    with socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(f"GET /feeds/books/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       f"If-None-Match: {etag}\r\nPrefer: wait=20\r\n\r\n".encode())
        server.wait_for_waiters("books", 1)
    deadline = time.monotonic() + 5
    while server.waiting("books"):
        assert time.monotonic() < deadline, "the waiter outlived its client"
        time.sleep(0.01)


def test_an_unknown_feed_is_a_404_at_once(server, books):
    response, took = get(server, "/feeds/nope/", **{"If-None-Match": '"x"',
                                                     "Prefer": "wait=20"})
    assert response.status_code == 404
    assert took < 2


def test_under_wsgi_a_long_poll_is_answered_at_once(client, books):
    etag = client.get("/feeds/books/")["ETag"]
    began = time.monotonic()
    response = client.get("/feeds/books/", HTTP_IF_NONE_MATCH=etag, HTTP_PREFER="wait=20")
    assert response.status_code == 304
    assert "Preference-Applied" not in response
    assert time.monotonic() - began < 1


def test_held_polls_are_answered_at_once_when_the_server_stops(server, books):
    etag = current_etag(server)
    with ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(get, server, **{"If-None-Match": etag, "Prefer": "wait=30"})
                   for _ in range(2)]
        server.wait_for_waiters("books", 2)
        began = time.monotonic()
        server.application.loop.call_soon_threadsafe(server.application.release)
        responses = [future.result(timeout=5)[0] for future in waiting]
    assert time.monotonic() - began < 2
    assert [response.status_code for response in responses] == [304, 304]
    # Once stopping, nothing is held.
    response, took = get(server, **{"If-None-Match": etag, "Prefer": "wait=30"})
    assert response.status_code == 304
    assert took < 2


def test_the_stopping_signals_release_held_polls_before_the_server_hears_them(monkeypatch):
    """As under uvicorn, whose own handlers wait for every request to be answered."""
    heard, released = [], []
    polling = LongPolling(app=None)
    monkeypatch.setattr(polling, "release", lambda: released.append(True))
    monkeypatch.setattr(longpoll, "STOPPING", (signal.SIGUSR2,))
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: heard.append(signum))

    async def start_then_stop():
        polling.release_on_signals()
        signal.raise_signal(signal.SIGUSR2)
        await asyncio.sleep(0.05)

    try:
        asyncio.run(start_then_stop())
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert heard == [signal.SIGUSR2]
    assert released == [True]


def test_waiters_credentials_are_not_sent_with_the_rendering_for_all(server, books):
    application = server.application
    seen = []
    django = application.app

    async def recording(scope, receive, send):
        seen.append(dict(scope["headers"]))
        await django(scope, receive, send)

    application.app = recording
    etag = current_etag(server)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(get, server, **{"If-None-Match": etag, "Prefer": "wait=20",
                                              "Cookie": "sessionid=secret",
                                              "Authorization": "Token secret"})
        server.wait_for_waiters("books", 1)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        response, _ = waiting.result(timeout=25)
    assert response.status_code == 200
    rendering = [headers for headers in seen if b"if-none-match" not in headers]
    assert rendering, "the change was not rendered once for all"
    assert all(b"cookie" not in headers and b"authorization" not in headers
               for headers in rendering)


def test_when_watching_fails_the_304_goes_out_without_preference_applied(server, books,
                                                                         monkeypatch):
    async def failing(self):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(Watcher, "wake", failing)
    etag = current_etag(server)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(get, server, **{"If-None-Match": etag, "Prefer": "wait=20"})
        server.wait_for_waiters("books", 1)
        publishing.put_record(feed=books, key="k2", data=record_data(2))
        response, took = waiting.result(timeout=25)
    assert response.status_code == 304
    assert "Preference-Applied" not in response.headers
    assert took < 5
