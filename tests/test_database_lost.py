"""A lost database connection is never a 500 (feedpub/reconnect.py).

A web worker keeps its connection between requests (CONN_MAX_AGE); after a failover, a
restart or pg_terminate_backend, the first request that used it failed: a 500 for feeds
and pages (a 503 for the API) on every worker, until each had opened a new one. Now a
safe request is run once more on a fresh connection, a write checks its connection before
use, and a request that still cannot reach the database gets 503 with Retry-After.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.db import OperationalError, connection, connections
from django.test import Client
from rest_framework.test import APIClient

from archives.api import exceptions as api_exceptions
from archives.db import fastsql
from archives.log.publishing import put_record

from .asgi_server import AsgiServer
from .factories import FeedFactory, record_data, token_for

ROOT = Path(__file__).resolve().parent.parent


def terminate_every_other_backend() -> int:
    """pg_terminate_backend of every connection to the test database but a new one's own:
    the requests' (kept between requests) and the heads' listener."""
    killer = connections.create_connection("default")
    try:
        with killer.cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]
    finally:
        killer.close()


@pytest.fixture
def books(transactional_db):
    feed = FeedFactory(slug="books", title="Books", page_size=3)
    for n in range(4):
        put_record(feed=feed, key=f"k{n}", data=record_data(n))
    return feed


@pytest.fixture
def writer(transactional_db) -> APIClient:
    user = User.objects.create_user("producer")
    user.user_permissions.set(Permission.objects.filter(codename__endswith="_record"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


@pytest.fixture(autouse=True)
def _no_dead_connection_left(transactional_db):
    yield
    for each in connections.all(initialized_only=True):  # before the test's flush
        if each.connection is not None and not each.is_usable():
            each.close()


READS = ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/records/k1", "/api/feeds/",
         "/api/feeds/books/records/k1", "/oai?verb=Identify", "/healthz"]


@pytest.mark.postgres
@pytest.mark.parametrize("path", READS)
def test_a_terminated_backend_is_not_a_500_for_a_reader(books, path):
    client = Client(raise_request_exception=False)
    assert client.get(path).status_code == 200  # the connection the next request reuses
    assert terminate_every_other_backend() >= 1
    assert client.get(path).status_code == 200


@pytest.mark.postgres
def test_a_write_after_a_terminated_backend_is_applied(books, writer):
    """A write is not run twice (it may have been applied before the connection died):
    its connection is checked before it is used instead."""
    assert writer.get("/api/feeds/books/records/k1").status_code == 200
    terminate_every_other_backend()
    response = writer.put("/api/feeds/books/records/k9", record_data(9), format="json")
    assert response.status_code == 201, response.content


@pytest.mark.postgres
def test_a_write_request_checks_its_connection_without_a_round_trip_until_it_is_lost(
        books, monkeypatch):
    """The check before a write polls the socket: a round trip only when the server has
    said something on it (as it does when it ends the connection)."""
    from feedpub.reconnect import close_lost_connections

    db = connections["default"]
    asked = []
    is_usable = db.is_usable
    monkeypatch.setattr(db, "is_usable", lambda: asked.append(db.alias) or is_usable())
    db.ensure_connection()
    assert close_lost_connections(check=True) == 0
    assert asked == []
    terminate_every_other_backend()
    time.sleep(0.2)  # the server's goodbye reaches the socket
    assert close_lost_connections(check=True) == 1
    assert asked == ["default"]
    assert db.connection is None


@pytest.fixture
def unreachable_database():
    """The database's address, a port nobody listens on, for the requests' connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    default = connections["default"]
    saved = dict(default.settings_dict)
    default.close()
    default.settings_dict.update({"HOST": "127.0.0.1", "PORT": str(port)})
    try:
        yield
    finally:
        default.close()
        default.settings_dict.clear()
        default.settings_dict.update(saved)


@pytest.mark.postgres
@pytest.mark.parametrize(("path", "accept", "content_type"), [
    ("/feeds/books/", "application/atom+xml", "text/plain"),
    ("/feeds/books/records/k1", "application/json", "application/json"),
    ("/api/feeds/", "text/html", "application/json"),  # the API's errors are JSON always
    ("/oai?verb=Identify", "", "text/plain"),
])
def test_an_unreachable_database_is_a_503_with_retry_after(books, unreachable_database, path,
                                                           accept, content_type):
    response = Client(raise_request_exception=False).get(path, HTTP_ACCEPT=accept)
    assert response.status_code == 503
    assert response["Retry-After"] == str(api_exceptions.RETRY_AFTER_SECONDS)
    assert response["Content-Type"].startswith(content_type)
    assert b"database is unavailable" in response.content
    assert "no-store" in response["Cache-Control"]  # never kept by nginx or a CDN


@pytest.mark.postgres
def test_a_write_to_an_unreachable_database_is_a_503(books, writer, unreachable_database):
    response = writer.put("/api/feeds/books/records/k9", record_data(9), format="json")
    assert response.status_code == 503
    assert response["Retry-After"] == str(api_exceptions.RETRY_AFTER_SECONDS)


@pytest.mark.parametrize(("accept", "content_type"), [
    ("application/atom+xml", "text/plain"), ("application/json", "application/json")])
def test_a_feed_whose_database_is_lost_is_a_503_on_any_database(
        transactional_db, monkeypatch, accept, content_type):
    """Whatever the backend: a database error that means "unavailable" is a 503, here one
    that stays on the fresh connection too."""
    FeedFactory(slug="books")

    def lost(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(fastsql, "_feed_by", lost)
    response = Client(raise_request_exception=False).get("/feeds/books/", HTTP_ACCEPT=accept)
    assert response.status_code == 503
    assert response["Retry-After"] == str(api_exceptions.RETRY_AFTER_SECONDS)
    assert response["Content-Type"].startswith(content_type)


@pytest.mark.postgres
def test_a_long_poll_outlives_a_terminated_backend(books, monkeypatch):
    """The long-poll service (connections closed after each request, the heads' listener
    and reader of their own): a poll held across the loss still gets the next change."""
    import httpx

    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)  # as deployed
    server = AsgiServer().start()
    try:
        url = server.url + "/feeds/books/"
        etag = httpx.get(url, timeout=10).headers["ETag"]
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(httpx.get, url, timeout=30,
                               headers={"If-None-Match": etag, "Prefer": "wait=20"})
            server.wait_for_waiters("books", 1)
            assert terminate_every_other_backend() >= 2  # the test's and the listener's
            connection.close()
            assert httpx.get(url, timeout=10).status_code == 200
            put_record(feed=books, key="k9", data=record_data(9))
            answer = held.result(timeout=30)
    finally:
        server.stop()
    assert answer.status_code == 200
    assert answer.headers["ETag"] != etag
    assert b"Record 9" in answer.content


def test_a_database_that_never_answers_fails_a_connection_within_its_timeout():
    """A server whose address still takes connections but never answers (a stopped
    container's, a failover half done): the connection gives up after
    DATABASE_CONNECT_TIMEOUT, so the request can be a 503, instead of holding the worker
    until the kernel gives up (minutes)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes connections; nobody ever answers them
        port = silent.getsockname()[1]
        env = {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/feedpub",
               "DATABASE_CONNECT_TIMEOUT": "2"}
        started = time.monotonic()
        run = subprocess.run(  # noqa: S603
            [sys.executable, "manage.py", "shell", "-c",
             "from django.db import connection; connection.ensure_connection()"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "OperationalError" in run.stderr, run.stderr[-2000:]
    assert "timeout" in run.stderr, run.stderr[-2000:]
    assert time.monotonic() - started < 30
