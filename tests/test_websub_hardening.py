"""WebSub: what a hostile or broken subscriber, a broken notification channel or a second
worker must not do to the hub (each test here failed before its fix), against real local
callbacks (tests/callback_server.py)."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from archives import conf
from archives.log import publishing
from archives.models import Feed, Subscription
from archives.push import hub, listening, subscriptions
from archives.push import worker as hub_worker
from archives.push.worker import Worker

from .callback_server import CallbackServer
from .factories import FeedFactory
from .test_websub import (
    BASE,
    TOPIC,
    header_links,
    make_due,
    run_worker,
    subscribe,
    wait_until_listening,
    write,
)

LINKED = f"{BASE}/feeds/books/pages/latest"


@pytest.fixture(autouse=True)
def _local_callbacks(settings):
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True  # refused by default: see below


@pytest.fixture(autouse=True)
def _fresh_throttle(db):
    cache.clear()  # the hub's request counts (the shared cache, kept by transactional tests)
    yield
    cache.clear()


@pytest.fixture
def worker():
    worker = Worker()
    yield worker
    worker.close()


@pytest.fixture
def callback():
    with CallbackServer() as server:
        yield server


def active_subscription(feed: Feed, callback_url: str, **fields) -> Subscription:
    """A verified subscriber, up to date with the feed: as the hub leaves one (also for
    callbacks the hub would refuse now), with the hub's private-callback setting."""
    fields.setdefault("allow_private_callback", hub.private_callbacks_allowed())
    version = hub_worker.Version.of(Feed.objects.get(pk=feed.pk))
    return Subscription.objects.create(
        feed=feed, format="atom", topic=TOPIC.replace("books", feed.slug),
        named_topic=TOPIC.replace("books", feed.slug), callback=callback_url,
        expires_at=timezone.now() + timedelta(days=1), delivered_modified=version.modified,
        delivered_seq=version.seq, delivered_sealed=version.sealed, **fields)


# Bad input at the hub: 400 with the reason, never a 500 ----------------------------------

@pytest.mark.parametrize(("fields", "reason"), [
    ({"hub.callback": "http://127.0.0.1:99999/cb"}, "valid host and port"),
    ({"hub.callback": "http://127.0.0.1:0x50/cb"}, "valid host and port"),
    ({"hub.secret": "a\x00b"}, "hub.secret must not contain control characters"),
    ({"hub.callback": "http://127.0.0.1:9/c\x00b"}, "hub.callback must not contain control"),
    ({"hub.topic": f"{TOPIC}\x00"}, "hub.topic must not contain control characters"),
    ({"hub.topic": f"{BASE}//[x/feeds/books/"}, "is not a topic of this hub"),
    ({"hub.topic": f"{BASE}/feeds/books/pages/9"}, "is not a topic of this hub"),
])
def test_malformed_requests_are_refused_with_the_reason(client, feed, fields, reason):
    response = subscribe(client, "http://127.0.0.1:9/cb", **fields)
    assert response.status_code == 400
    assert reason in response.content.decode()
    assert not Subscription.objects.exists()


@pytest.mark.parametrize(("asked", "granted"), [("0", "60"), ("59", "60"),
                                                 ("99999999999", "31536000"),
                                                 ("9" * 40, "31536000")])
def test_a_lease_out_of_range_is_brought_within_it(client, feed, callback, worker, asked,
                                                   granted):
    assert subscribe(client, f"{callback.url}/cb",
                     **{"hub.lease_seconds": asked}).status_code == 202
    assert worker.run_round().verified == 1
    assert callback.verifications()[0].query["hub.lease_seconds"] == granted
    left = (Subscription.objects.get().expires_at - timezone.now()).total_seconds()
    assert int(granted) - 10 < left <= int(granted)


def test_the_hub_throttles_each_client_address(client, feed, settings):
    settings.FEEDPUB_WEBSUB_RATE = "2/minute"
    answers = [subscribe(client, f"http://127.0.0.1:9/cb{n}") for n in range(3)]
    assert [r.status_code for r in answers] == [202, 202, 429]
    assert int(answers[2]["Retry-After"]) > 0
    assert "FEEDPUB_WEBSUB_RATE" in answers[2].content.decode()
    other = client.post("/websub/", {"hub.mode": "subscribe", "hub.topic": TOPIC,
                                     "hub.callback": "http://127.0.0.1:9/cb9"},
                        HTTP_X_FORWARDED_FOR="10.0.0.2")  # as the deploy's nginx appends
    assert other.status_code == 202  # another address has its own count
    assert Subscription.objects.count() == 3


# Private addresses (SSRF) -----------------------------------------------------------------

def test_a_private_callback_address_is_refused_by_default(client, feed, settings):
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = False
    for url in ("http://127.0.0.1:9/cb", "http://10.1.2.3/cb", "http://[::1]:9/cb",
                "http://169.254.169.254/latest/meta-data", "http://[::ffff:192.168.0.1]/"):
        response = subscribe(client, url)
        assert response.status_code == 400, url
        assert "not a public address" in response.content.decode()
    assert subscribe(client, "http://93.184.215.14/cb").status_code == 202


def test_a_name_resolving_to_a_loopback_address_is_refused_when_connecting(
        client, feed, callback, worker, settings):
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = False
    port = callback.url.rsplit(":", 1)[1]
    assert subscribe(client, f"http://localhost:{port}/cb").status_code == 202  # a name
    assert worker.run_round().refused == 1
    assert not callback.calls  # never connected to
    # An active subscription whose name now resolves to a private address (rebinding).
    active_subscription(feed, f"http://localhost:{port}/cb")
    write(feed)
    assert worker.run_round().failed == 1
    assert not callback.calls
    assert "is not a public address" in Subscription.objects.get().last_error
    # Allowed at the hub now: the subscriber's next request records it.
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True
    assert subscribe(client, f"http://localhost:{port}/cb").status_code == 202
    assert worker.run_round().verified == 1
    make_due()
    assert worker.run_round().delivered == 1


def test_the_worker_calls_as_the_hub_allowed_whatever_its_own_setting(client, feed, callback,
                                                                      settings):
    # Private callbacks allowed for the web service only: what its hub accepted, the
    # worker calls (it used to refuse the verification, and the subscription was gone).
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True
    assert subscribe(client, f"{callback.url}/cb").status_code == 202
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = False  # the worker's environment
    worker = Worker()
    try:
        assert worker.run_round().verified == 1
        write(feed)
        assert worker.run_round().delivered == 1
        # Taken back at once, as docs/consuming/websub.md shows.
        Subscription.objects.update(allow_private_callback=False)
        write(feed, n=2)
        assert worker.run_round().failed == 1
    finally:
        worker.close()
    assert len(callback.deliveries()) == 1
    assert "is not a public address" in Subscription.objects.get().last_error


def test_a_callback_the_hub_took_as_public_only_stays_so_for_the_worker(client, feed, callback,
                                                                        settings):
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = False  # the web service's
    port = callback.url.rsplit(":", 1)[1]
    assert subscribe(client, f"http://localhost:{port}/cb").status_code == 202  # a name
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True  # the worker's environment
    worker = Worker()
    try:
        assert worker.run_round().refused == 1
    finally:
        worker.close()
    assert not callback.calls  # never connected to a private address


# Callbacks that make the client fail in other ways ------------------------------------------

def test_a_callback_the_client_cannot_even_call_fails_alone(feed, callback, worker):
    # As recorded before the hub refused such ports: aiohttp raises ValueError on it.
    active_subscription(feed, "http://127.0.0.1:99999/cb")
    active_subscription(feed, f"{callback.url}/cb")
    write(feed)
    report = worker.run_round()
    assert (report.delivered, report.failed) == (1, 1)
    assert len(callback.deliveries()) == 1
    bad = Subscription.objects.get(callback="http://127.0.0.1:99999/cb")
    assert bad.attempts == 1
    assert bad.last_error


def test_a_delivery_answer_with_an_endless_body_is_not_read(client, feed, worker, settings):
    settings.FEEDPUB_WEBSUB_TIMEOUT = 5
    with CallbackServer(statuses=[200], endless_deliveries=True) as callback:
        subscribe(client, f"{callback.url}/cb")
        worker.run_round()
        write(feed)
        started = time.monotonic()
        assert worker.run_round().delivered == 1  # its status is all the hub reads
        assert time.monotonic() - started < 3


def test_a_challenge_echoed_in_pieces_is_read_to_its_end(client, feed, worker):
    with CallbackServer(verify="split") as callback:
        subscribe(client, f"{callback.url}/cb")
        assert worker.run_round().verified == 1


def test_a_challenge_followed_by_endless_bytes_is_refused_promptly(client, feed, worker):
    with CallbackServer(verify="endless") as callback:
        subscribe(client, f"{callback.url}/cb")
        started = time.monotonic()
        assert worker.run_round().refused == 1
        assert time.monotonic() - started < 3
        assert not Subscription.objects.exists()


def test_a_non_ascii_callback_path_is_percent_encoded(client, feed, callback, worker):
    assert subscribe(client, f"{callback.url}/café?q=ü").status_code == 202
    assert worker.run_round().verified == 1
    write(feed)
    assert worker.run_round().delivered == 1
    for call in (callback.verifications()[0], callback.deliveries()[0]):
        assert call.path == "/caf%C3%A9"
        assert call.query["q"] == "ü"


# A worker killed after claiming ---------------------------------------------------------------

def test_a_killed_workers_claim_lapses_after_what_it_claimed_could_take(
        client, feed, callback, worker, settings, monkeypatch):
    subscribe(client, f"{callback.url}/cb")
    claimed_at = timezone.now()
    assert len(hub_worker.claim(Subscription.objects.all())) == 1  # then the worker dies
    lease = (Subscription.objects.get().claimed_until - claimed_at).total_seconds()
    # One call's timeout and the margin, not the 160 s a batch of 1,000 may need.
    assert lease < conf.settings.FEEDPUB_WEBSUB_TIMEOUT + subscriptions.CLAIM_MARGIN_SECONDS + 2
    assert worker.run_round().verified == 0  # still claimed: no other worker calls it
    later = claimed_at + timedelta(seconds=lease + 1)
    monkeypatch.setattr(hub_worker.timezone, "now", lambda: later)
    assert worker.run_round().verified == 1
    assert len(callback.verifications()) == 1


def test_a_larger_claim_lasts_as_long_as_its_rounds_of_calls(client, feed, settings):
    settings.FEEDPUB_WEBSUB_CONCURRENCY = 2
    for n in range(5):
        subscribe(client, f"http://127.0.0.1:9/cb{n}")
    claimed_at = timezone.now()
    assert len(hub_worker.claim(Subscription.objects.all())) == 5
    (until,) = set(Subscription.objects.values_list("claimed_until", flat=True))
    # 3 rounds of 2 calls, and one more: denials (a topic gone) go first, apart.
    assert (until - claimed_at).total_seconds() >= 4 * conf.settings.FEEDPUB_WEBSUB_TIMEOUT


# Delivery order, renewal, backoff ------------------------------------------------------------

def test_a_worker_holding_an_older_snapshot_sends_nothing_after_a_newer_one(
        client, feed, callback, worker, monkeypatch):
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    write(feed, "k1", 1)
    other = Worker()
    real = hub_worker.current_content
    raced = []

    def render_then_be_overtaken(feed_read, format):
        content = real(feed_read, format)
        if not raced:  # between this worker's read and its claim, another delivers newer
            raced.append(content)
            write(feed, "k2", 2)
            assert other.run_round().delivered == 1
        return content

    monkeypatch.setattr(hub_worker, "current_content", render_then_be_overtaken)
    try:
        worker.run_round()
    finally:
        other.close()
    bodies = [call.body for call in callback.deliveries()]
    assert bodies[0] == client.get("/feeds/books/").content  # the newer one, k2
    assert b"k2" in bodies[0]
    assert raced[0].body not in bodies  # the older one never follows it
    assert worker.run_round().delivered == 0


def test_a_successful_renewal_changes_secret_and_lease_and_deliveries_go_on(
        client, feed, callback, worker):
    subscribe(client, f"{callback.url}/cb", **{"hub.secret": "first",
                                               "hub.lease_seconds": "3600"})
    worker.run_round()
    first_expiry = Subscription.objects.get().expires_at
    write(feed)
    assert worker.run_round().delivered == 1
    subscribe(client, f"{callback.url}/cb", **{"hub.secret": "second",
                                               "hub.lease_seconds": "7200"})
    assert worker.run_round().verified == 1
    renewed = Subscription.objects.get()
    assert renewed.secret == "second"
    assert renewed.expires_at > first_expiry + timedelta(seconds=3500)
    assert worker.run_round().delivered == 0  # a renewal is no change of the topic
    write(feed, "k2", 2)
    assert worker.run_round().delivered == 1
    delivery = callback.deliveries()[-1]
    expected = hmac.new(b"second", delivery.body, hashlib.sha256).hexdigest()
    assert delivery.headers["x-hub-signature"] == f"sha256={expected}"


def test_the_backoff_doubles_is_capped_and_adds_up_as_documented(client, feed, worker,
                                                                 settings):
    settings.FEEDPUB_WEBSUB_MAX_ATTEMPTS = 10
    waits = []
    with CallbackServer(statuses=[500]) as callback:
        subscribe(client, f"{callback.url}/cb")
        worker.run_round()
        write(feed)
        while True:
            report = worker.run_round()
            if report.ended:
                break
            subscription = Subscription.objects.get()
            waits.append(round((subscription.next_attempt_at - timezone.now()).total_seconds()))
            make_due()
        assert len(callback.deliveries()) == 10
    assert waits == [10, 20, 40, 80, 160, 320, 640, 1280, 2560]
    assert sum(waits) == 5110  # docs/consuming/websub.md: ~1.4 hours
    assert not Subscription.objects.exists()
    settings.FEEDPUB_WEBSUB_MAX_ATTEMPTS = 1000
    assert [subscriptions.retry_delay(n) for n in (9, 10, 36, 999)] == [2560, 3600, 3600, 3600]


@pytest.mark.parametrize("name", ["CONCURRENCY", "TIMEOUT", "RETRY_SECONDS", "MAX_ATTEMPTS"])
def test_the_worker_refuses_settings_it_cannot_run_with(db, settings, name):
    setattr(settings, f"FEEDPUB_WEBSUB_{name}", 0)
    with pytest.raises(ImproperlyConfigured, match=f"FEEDPUB_WEBSUB_{name} must be at least 1"):
        Worker()


def test_resubscribing_after_a_rename_reaches_the_feed_that_has_the_url_now(
        client, db, callback, worker):
    renamed = FeedFactory(slug="books", page_size=3)
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    publishing.update_feed(feed=renamed, slug="novels")
    newcomer = FeedFactory(slug="books", page_size=3)
    write(newcomer)
    subscribe(client, f"{callback.url}/cb")  # before the worker denied the old one
    report = worker.run_round()
    assert (report.verified, report.denied) == (1, 0)
    assert Subscription.objects.get().feed == newcomer
    write(newcomer, "k2", 2)
    assert worker.run_round().delivered == 1
    assert callback.deliveries()[0].body == client.get("/feeds/books/").content


# The linked-pages topic, named by a page ----------------------------------------------------

def test_a_linked_page_names_the_entry_point_topic(client, feed, callback, worker):
    write(feed)
    page = f"{BASE}/feeds/books/pages/1"
    assert subscribe(client, f"{callback.url}/cb", topic=page).status_code == 202
    assert worker.run_round().verified == 1
    assert callback.verifications()[0].query["hub.topic"] == page  # as it asked
    subscription = Subscription.objects.get()
    assert (subscription.topic, subscription.format) == (LINKED, "linked")
    for n in range(2, 5):
        write(feed, f"k{n}", n)
    assert worker.run_round().delivered == 1
    delivery = callback.deliveries()[0]
    assert delivery.body == client.get("/feeds/books/pages/2").content  # the newest page
    assert header_links(delivery.headers["link"])["self"] == page
    # The entry point, or another page, is the same topic: the same subscription.
    subscribe(client, f"{callback.url}/cb", topic=LINKED)
    subscribe(client, f"{callback.url}/cb", topic=f"{BASE}/feeds/books/pages/2")
    assert Subscription.objects.count() == 1


# Idle rounds ---------------------------------------------------------------------------------

def idle_round_queries(idle: Worker, feeds: int) -> int:
    for n in range(feeds):
        feed = FeedFactory(slug=f"idle{Feed.objects.count()}-{n}")
        write(feed)
        active_subscription(feed, f"http://127.0.0.1:9/cb{n}")
    with CaptureQueriesContext(connection) as queries:
        report = idle.run_round()
    assert not report
    return len(queries)


def test_an_idle_round_costs_the_same_few_queries_whatever_the_topics(db, worker):
    few = idle_round_queries(worker, 3)
    many = idle_round_queries(worker, 60)  # now 63 topics with subscribers
    assert few == many
    assert many <= 6


# The worker's loop -------------------------------------------------------------------------

def test_a_failed_round_is_logged_and_the_loop_goes_on(client, feed, callback, monkeypatch,
                                                       caplog):
    subscribe(client, f"{callback.url}/cb")
    looping = Worker()
    rounds = []
    real = Worker.run_round

    def fails_once(self, *args, **kwargs):
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("something unforeseen")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Worker, "run_round", fails_once)
    try:
        looping.run(poll_seconds=0.05, stop=lambda: len(rounds) >= 2)
    finally:
        looping.close()
    assert "a round failed" in caplog.text
    assert Subscription.objects.get().is_active  # the second round verified it


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_listen_the_worker_polls_and_keeps_running(client, monkeypatch):
    feed = FeedFactory(slug="books", page_size=3)
    attempts = []

    def cannot_listen(self):
        attempts.append(1)
        return False

    monkeypatch.setattr(hub_worker.Listener, "connect", cannot_listen)
    stop = threading.Event()
    with CallbackServer() as callback:
        subscribe(client, f"{callback.url}/cb")
        worker = Worker()
        thread = threading.Thread(target=run_worker, args=(worker, stop, 0.2), daemon=True)
        thread.start()
        try:
            callback.wait_for(1, method="GET")
            write(feed)
            assert len(callback.wait_for(1, timeout=10)) == 1  # found by polling
            time.sleep(0.5)
            assert thread.is_alive()
            assert len(attempts) >= 2  # it keeps trying to listen, a poll apart
        finally:
            stop.set()
            thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_notification_with_a_bad_payload_is_ignored(client):
    feed = FeedFactory(slug="books", page_size=3)
    stop = threading.Event()
    with CallbackServer() as callback:
        subscribe(client, f"{callback.url}/cb")
        worker = Worker()
        thread = threading.Thread(target=run_worker, args=(worker, stop), daemon=True)
        thread.start()
        try:
            callback.wait_for(1, method="GET")
            wait_until_listening()
            for payload in ("²", "books", ""):  # "²".isdigit(), yet int() refuses it
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, %s)",
                                   [listening.CHANGES_CHANNEL, payload])
            time.sleep(0.3)
            assert thread.is_alive()
            with transaction.atomic():
                write(feed)
                hub.announce(listening.CHANGES_CHANNEL, feed.pk)
            written = time.monotonic()
            (delivery,) = callback.wait_for(1, timeout=10)
            assert delivery.arrived - written < 5  # woken, not polled (60 s)
        finally:
            stop.set()
            with transaction.atomic():
                hub.announce(hub.INTENTS_CHANNEL, 0)
            thread.join(timeout=10)
    assert not thread.is_alive()
