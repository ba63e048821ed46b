"""`/metrics` (feedpub/metrics.py), read as Prometheus reads it: the text format, parsed by
prometheus-client's own parser. What the database says (unsealed entries and seal lag per
feed, the export backlog, WebSub, the sealer's last pass) in a bounded number of queries;
requests by view and status; who may read it (loopback and the networks of
FEEDPUB_METRICS_NETWORKS, else a bearer token); and several gunicorn workers' counts added up
(multiprocess mode)."""

from __future__ import annotations

import io
import ipaddress
import os
import signal
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Entry, Subscription
from archives.storage.export import export_pending
from feedpub import metrics

from .asgi_server import AsgiServer
from .factories import FeedFactory, record_data
from .nginx_server import free_port
from .test_deploy import manage, production_environment
from .test_shared_throttles import ENTRYPOINT, ROOT, server_environment, start_server

PUBLIC = "203.0.113.9"  # an address of the internet (documentation's, not a private one)


def samples(text: str) -> dict[tuple, float]:
    """Every sample of a scrape: (name, (label, value)...) -> value."""
    return {(sample.name, *sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(client, **headers) -> dict[tuple, float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    assert response["Cache-Control"].startswith("max-age=0")
    return samples(response.content.decode())


def requests_of(scraped, view, status, method="GET") -> float:
    return scraped.get(("feedpub_http_requests_total", ("method", method),
                        ("status", str(status)), ("view", view)), 0)


def write(feed, count, start=1):
    for n in range(start, start + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))


# What the database says ----------------------------------------------------------------


def test_a_page_filled_with_sealing_off_shows_as_unsealed_entries_and_seal_lag(
        client, db, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    books = FeedFactory(slug="books", page_size=3)
    FeedFactory(slug="empty", page_size=3)
    write(books, 4)  # page 1 full (entries 1..3), entry 4 on the next
    filled = Entry.objects.get(feed=books, seq=3).updated

    time.sleep(0.2)
    before = timezone.now()
    scraped = scrape(client)
    after = timezone.now()

    assert scraped[("feedpub_feed_unsealed_entries", ("feed", "books"))] == 4
    assert scraped[("feedpub_feed_unsealed_entries", ("feed", "empty"))] == 0
    lag = scraped[("feedpub_feed_seal_lag_seconds", ("feed", "books"))]
    assert (before - filled).total_seconds() <= lag <= (after - filled).total_seconds()
    assert lag >= 0.2
    assert scraped[("feedpub_feed_seal_lag_seconds", ("feed", "empty"))] == 0

    seal_feed(books)
    scraped = scrape(client)
    assert scraped[("feedpub_feed_unsealed_entries", ("feed", "books"))] == 1
    assert scraped[("feedpub_feed_seal_lag_seconds", ("feed", "books"))] == 0


def test_sealed_pages_wait_for_their_export_until_a_pass_writes_them(
        client, db, settings, request):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    books = FeedFactory(slug="books", page_size=3)
    write(books, 7)
    seal_feed(books)  # pages 1 and 2, which the sealer's next pass exports

    scraped = scrape(client)
    assert scraped[("feedpub_export_pages_pending",)] == 2
    assert scraped[("feedpub_export_oldest_pending_seconds",)] >= 0

    request.getfixturevalue("settled")  # their Last-Modified second passed: a pass exports
    assert export_pending() == 2
    scraped = scrape(client)
    assert scraped[("feedpub_export_pages_pending",)] == 0
    assert scraped[("feedpub_export_oldest_pending_seconds",)] == 0


def test_with_exports_off_no_backlog_is_reported(client, db, settings):
    settings.FEEDPUB_EXPORT_PAGES = False
    assert not any(key[0].startswith("feedpub_export_") for key in scrape(client))


def test_websub_subscriptions_and_their_deliveries(client, db):
    books = FeedFactory(slug="books", page_size=3)
    write(books, 1)
    now = timezone.now()
    later = now + timedelta(days=1)

    def subscription(n, **fields):
        return Subscription.objects.create(
            feed=books, format="atom", topic="http://127.0.0.1:8000/feeds/books/",
            callback=f"https://subscriber.example/{n}", **fields)

    subscription(1, expires_at=later)  # active, never delivered: pending
    subscription(2, expires_at=later, attempts=3, last_error="503")  # failing, pending
    delivered = subscription(3, expires_at=later)  # active, up to date
    books.refresh_from_db()
    Subscription.objects.filter(pk=delivered.pk).update(
        delivered_modified=books.subscription_modified, delivered_seq=books.last_seq,
        delivered_sealed=books.sealed_pages)
    subscription(4, intent="subscribe", intent_at=now)  # awaiting verification
    subscription(5, expires_at=now - timedelta(seconds=1))  # lease expired

    scraped = scrape(client)
    assert scraped[("feedpub_websub_subscriptions", ("state", "active"))] == 3
    assert scraped[("feedpub_websub_subscriptions", ("state", "verifying"))] == 1
    assert scraped[("feedpub_websub_deliveries_pending",)] == 2
    assert scraped[("feedpub_websub_deliveries_failing",)] == 1


def test_the_sealers_last_pass_is_its_watch_loops_last_completed_pass(
        client, db, monkeypatch):
    from archives.management.commands import seal_archives

    assert not any(key[0] == "feedpub_sealer_last_pass_timestamp_seconds"
                   for key in scrape(client))  # no sealer yet: absent, not 0

    def sleep(seconds):
        raise KeyboardInterrupt  # after the first pass

    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    started = time.time()
    with pytest.raises(KeyboardInterrupt):
        call_command("seal_archives", "--watch", "5", stdout=io.StringIO(),
                     stderr=io.StringIO())

    last = scrape(client)[("feedpub_sealer_last_pass_timestamp_seconds",)]
    assert started - 1 <= last <= time.time()


def test_a_scrape_costs_the_same_few_queries_for_one_feed_as_for_forty(
        client, db, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False

    def queries() -> int:
        client.get("/metrics")  # sessions, the cache: whatever a first request opens
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/metrics").status_code == 200
        return len(captured)

    write(FeedFactory(slug="feed-0", page_size=2), 3)
    one = queries()
    for n in range(1, 40):
        write(FeedFactory(slug=f"feed-{n}", page_size=2), 3)  # each with a page to seal
    forty = queries()
    assert one == forty == metrics.QUERIES
    scraped = scrape(client)
    assert sum(1 for key in scraped if key[0] == "feedpub_feed_seal_lag_seconds") == 40
    assert all(value > 0 for key, value in scraped.items()
               if key[0] == "feedpub_feed_seal_lag_seconds")


# Requests ------------------------------------------------------------------------------


def test_requests_are_counted_by_view_and_status(client, db):
    FeedFactory(slug="books", page_size=3)
    before = scrape(client)
    for _ in range(3):
        assert client.get("/feeds/books/").status_code == 200
    assert client.get("/feeds/no-such-feed/").status_code == 404
    assert client.get("/no/such/page").status_code == 404
    assert client.head("/healthz").status_code == 200
    after = scrape(client)

    def counted(view, status, method="GET"):
        return requests_of(after, view, status, method) - requests_of(before, view, status,
                                                                      method)

    assert counted("archives:subscription", 200) == 3
    assert counted("archives:subscription", 404) == 1
    assert counted("unresolved", 404) == 1  # by URL name: never a series per path
    assert counted("healthz", 200, "HEAD") == 1
    assert counted("metrics", 200) == 1  # the scrape before
    assert not any("no-such-feed" in str(key) or "/no/such" in str(key) for key in after)
    durations = after[("feedpub_http_request_duration_seconds_count",
                       ("view", "archives:subscription"))]
    assert durations - before.get(("feedpub_http_request_duration_seconds_count",
                                   ("view", "archives:subscription")), 0) == 4


def test_a_method_of_its_own_is_counted_as_other(client, db):
    before = scrape(client)
    client.generic("BREW", "/healthz")
    after = scrape(client)
    assert requests_of(after, "healthz", 405, "other") - requests_of(
        before, "healthz", 405, "other") == 1


# Who may read it -----------------------------------------------------------------------


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_loopback_needs_no_token(client, db, address):
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 200


# A host's client through Docker's published port arrives as the bridge's gateway; behind a
# TLS terminator nobody declared, every client is the terminator's address: private, both.
@pytest.mark.parametrize("address", ["172.19.0.1", "10.1.2.3", "192.168.1.20", "fd00::5",
                                     "::ffff:10.0.0.1"])
def test_a_private_address_is_refused_without_the_token(client, db, settings, address):
    settings.FEEDPUB_METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 403
    settings.FEEDPUB_METRICS_TOKEN = "s3cret-metrics-token"
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 401
    assert client.get("/metrics", REMOTE_ADDR=address,
                      HTTP_AUTHORIZATION="Bearer s3cret-metrics-token").status_code == 200


def test_a_listed_network_may_scrape_without_the_token(client, db, settings):
    settings.FEEDPUB_METRICS_NETWORKS = [ipaddress.ip_network("172.30.240.0/28"),
                                         ipaddress.ip_network("fd00:feed::/64")]
    assert [client.get("/metrics", REMOTE_ADDR=address).status_code for address in (
        "172.30.240.10", "::ffff:172.30.240.10", "fd00:feed::9",  # listed
        "172.30.240.16", "172.19.0.1", PUBLIC)] == [200, 200, 200, 403, 403, 403]


@pytest.mark.parametrize(("value", "networks"), [
    ("", []),
    ("172.30.240.0/28, fd00:feed::/64", ["172.30.240.0/28", "fd00:feed::/64"]),
    ("10.0.0.7", ["10.0.0.7/32"]),
])
def test_the_networks_setting_reads_cidrs(value, networks):
    result = manage("shell", "-c", "from django.conf import settings; "
                    "print('networks:', *settings.FEEDPUB_METRICS_NETWORKS)",
                    env=production_environment(FEEDPUB_METRICS_NETWORKS=value))
    assert result.stdout.splitlines()[-1].split() == ["networks:", *networks], result.stderr


@pytest.mark.parametrize("value", ["10.0.0.0/33", "10.0.0.1/8", "intranet", "10.0.0.0/8;"])
def test_a_bad_network_is_refused_at_start(value):
    result = manage("check", env=production_environment(FEEDPUB_METRICS_NETWORKS=value))
    assert result.returncode != 0
    assert "ImproperlyConfigured: FEEDPUB_METRICS_NETWORKS must list networks" in result.stderr
    assert repr(value) in result.stderr or value in result.stderr


def test_a_public_address_is_refused_when_no_token_is_set(client, db, settings):
    settings.FEEDPUB_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR=PUBLIC,
                          HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 403
    assert b"FEEDPUB_METRICS_TOKEN" in response.content
    assert b"feedpub_" not in response.content


def test_a_public_address_needs_the_bearer_token(client, db, settings):
    settings.FEEDPUB_METRICS_TOKEN = "s3cret-metrics-token"
    missing = client.get("/metrics", REMOTE_ADDR=PUBLIC)
    wrong = client.get("/metrics", REMOTE_ADDR=PUBLIC, HTTP_AUTHORIZATION="Bearer guess")
    other_scheme = client.get("/metrics", REMOTE_ADDR=PUBLIC,
                              HTTP_AUTHORIZATION="Token s3cret-metrics-token")
    assert [missing.status_code, wrong.status_code, other_scheme.status_code] == [401] * 3
    assert missing["WWW-Authenticate"] == 'Bearer realm="feedpub metrics"'
    assert b"feedpub_" not in wrong.content

    scraped = scrape(client, REMOTE_ADDR=PUBLIC,
                     HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert ("feedpub_websub_deliveries_failing",) in scraped


def test_behind_nginx_the_client_is_the_address_nginx_saw_not_nginx(client, db, settings):
    """nginx connects from loopback or the compose network, and appends the address it saw
    to X-Forwarded-For (FEEDPUB_API_PROXIES=1): that one decides, whatever came before it."""
    settings.FEEDPUB_METRICS_TOKEN = "s3cret-metrics-token"
    through_nginx = {"REMOTE_ADDR": "172.18.0.4"}
    public = client.get("/metrics", HTTP_X_FORWARDED_FOR=PUBLIC, **through_nginx)
    forged = client.get("/metrics", HTTP_X_FORWARDED_FOR=f"127.0.0.1, {PUBLIC}",
                        **through_nginx)
    settings.FEEDPUB_METRICS_NETWORKS = [ipaddress.ip_network("10.0.0.0/24")]
    # A listed client through a proxy that is not listed: both must be.
    through_unlisted = client.get("/metrics", HTTP_X_FORWARDED_FOR="10.0.0.7", **through_nginx)
    settings.FEEDPUB_METRICS_NETWORKS.append(ipaddress.ip_network("172.18.0.0/16"))
    inside = client.get("/metrics", HTTP_X_FORWARDED_FOR="10.0.0.7", **through_nginx)
    token = client.get("/metrics", HTTP_X_FORWARDED_FOR=PUBLIC,
                       HTTP_AUTHORIZATION="Bearer s3cret-metrics-token", **through_nginx)
    assert [public.status_code, forged.status_code, through_unlisted.status_code,
            inside.status_code, token.status_code] == [401, 401, 401, 200, 200]


def test_a_client_that_reaches_gunicorn_itself_cannot_forward_for_loopback(client, db):
    """Its X-Forwarded-For is its own writing: the peer's address must pass too."""
    for forwarded in ("127.0.0.1", "::1", f"{PUBLIC}, 127.0.0.1"):
        assert client.get("/metrics", REMOTE_ADDR=PUBLIC,
                          HTTP_X_FORWARDED_FOR=forwarded).status_code == 403, forwarded


def test_nginx_on_the_same_host_does_not_open_metrics_to_its_clients(client, db):
    """nginx beside gunicorn connects from loopback: the client it forwards for decides."""
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1",
                      HTTP_X_FORWARDED_FOR=PUBLIC).status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1",
                      HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 200


def test_metrics_stay_on_plain_http_when_https_is_enforced(client, db, settings):
    settings.SECURE_SSL_REDIRECT = True  # a Prometheus inside the network scrapes gunicorn
    assert client.get("/metrics").status_code == 200
    assert client.get("/feeds/").status_code == 301


def test_a_write_to_metrics_is_refused(client, db):
    assert client.post("/metrics").status_code == 405


# Long polls ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_held_long_polls_are_counted_while_they_wait(settings, monkeypatch):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    books = FeedFactory(slug="books", page_size=10)
    write(books, 1)
    server = AsgiServer().start()
    try:
        def held() -> float:
            text = httpx.get(server.url + "/metrics", timeout=10).text
            return samples(text)[("feedpub_long_polls_held",)]

        etag = httpx.get(server.url + "/feeds/books/", timeout=10).headers["ETag"]
        assert held() == 0
        with ThreadPoolExecutor(2) as pool:
            polls = [pool.submit(httpx.get, server.url + "/feeds/books/", timeout=30,
                                 headers={"If-None-Match": etag, "Prefer": "wait=20"})
                     for _ in range(2)]
            server.wait_for_waiters("books", 2)
            deadline = time.monotonic() + 5
            while held() < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert held() == 2
            write(books, 1, start=2)
            assert [poll.result(timeout=25).status_code for poll in polls] == [200, 200]
        assert held() == 0
    finally:
        server.stop()


# Several gunicorn workers --------------------------------------------------------------


def get(port: int, path: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",  # noqa: S310
                                     headers={"Connection": "close"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (loopback)
        return answer.status, answer.read().decode()


def test_two_gunicorn_workers_counts_add_up_even_after_one_dies(tmp_path):
    """deploy/gunicorn.conf.py as deployed, with two workers: whichever answers a scrape
    counts every worker's requests, a dead worker's included (multiprocess mode)."""
    env = server_environment(tmp_path, "database")
    metrics_dir = tmp_path / "metrics"
    env.update({"WEB_CONCURRENCY": "2", "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"")  # an earlier run's: removed at start
    subprocess.run([ENTRYPOINT, "migrate"], cwd=ROOT, env=env,  # noqa: S603
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    server = start_server(env, port, tmp_path / "server.log")
    try:
        with ThreadPoolExecutor(4) as pool:
            assert set(pool.map(lambda _: get(port, "/healthz")[0], range(20))) == {200}
        served = {int(path.stem.split("_")[-1]) for path in metrics_dir.glob("counter_*.db")}
        assert 1 not in served
        os.kill(min(served), signal.SIGKILL)  # gunicorn starts another in its place
        time.sleep(1)
        with ThreadPoolExecutor(4) as pool:
            assert set(pool.map(lambda _: get(port, "/healthz")[0], range(20))) == {200}
        writers = {path.stem.split("_")[-1] for path in metrics_dir.glob("counter_*.db")}
        totals = []
        for _ in range(4):  # each scrape answered by whichever worker: all agree
            status, text = get(port, "/metrics")
            assert status == 200
            totals.append(requests_of(samples(text), "healthz", 200))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(writers) >= 2
    assert totals == [40, 40, 40, 40]
    assert "Traceback" not in (tmp_path / "server.log").read_text()



def test_while_the_database_does_not_answer_a_scrape_is_a_503(client, db, monkeypatch):
    from django.db import OperationalError

    def lost(now):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(metrics, "feed_gauges", lost)
    response = client.get("/metrics")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
