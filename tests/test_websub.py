"""WebSub: discovery links, the hub's answers, and the worker's verification, delivery,
retries and leases, against a real HTTP callback (tests/callback_server.py)."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from datetime import timedelta
from io import StringIO
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.utils import timezone
from feedpub_consumer.http import parse_links
from lxml import etree

from archives.log import publishing
from archives.models import Feed, Subscription
from archives.push import hub
from archives.push.worker import Worker

from .callback_server import CallbackServer
from .factories import FeedFactory, record_data
from .threads import raise_first_error, run_at_once

BASE = "http://127.0.0.1:8000"
HUB = f"{BASE}/websub/"
TOPIC = f"{BASE}/feeds/books/"
A = "{http://www.w3.org/2005/Atom}"


@pytest.fixture(autouse=True)
def _local_callbacks(settings):
    """The callbacks here are local servers: a hub refuses those unless told (one test
    below shows it)."""
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True


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


def subscribe(client, callback_url: str, topic: str = TOPIC, **fields: str):
    return client.post("/websub/", {"hub.mode": "subscribe", "hub.topic": topic,
                                    "hub.callback": callback_url, **fields})


def link_header(response) -> dict[str, str]:
    return header_links(response["Link"])


def header_links(value: str) -> dict[str, str]:
    return {link.rel: link.href for link in parse_links(value, BASE)}


def write(feed: Feed, key: str = "k1", n: int = 1) -> None:
    publishing.put_record(feed=feed, key=key, data=record_data(n))


# Discovery ------------------------------------------------------------------------------

def test_subscription_documents_name_the_hub_and_themselves(client, feed, atom_validators):
    atom = client.get("/feeds/books/")
    root = atom_validators(atom.content)  # RFC 4287's grammar allows the extra link
    body_links = {link.get("rel"): link for link in root.iter(f"{A}link")}
    assert body_links["hub"].get("href") == HUB
    assert body_links["hub"].get("type") is None  # the hub is no feed
    assert body_links["self"].get("href") == TOPIC
    assert link_header(atom)["hub"] == HUB
    assert link_header(atom)["self"] == TOPIC

    rss = client.get("/feeds/books/rss/")
    channel = etree.fromstring(rss.content).find("channel")
    rss_links = {link.get("rel"): link.get("href") for link in channel.iter(f"{A}link")}
    assert rss_links["hub"] == HUB
    assert rss_links["self"] == f"{BASE}/feeds/books/rss/"
    rss_links["alternate"] = channel.findtext("link")  # the feed's page for people
    assert link_header(rss) == rss_links


def test_the_linked_pages_entry_point_is_a_topic_and_the_newest_page_names_the_hub(
        client, sealed_feed):
    latest = client.get("/feeds/books/pages/latest")
    assert latest.status_code == 302
    assert link_header(latest) == {"self": f"{BASE}/feeds/books/pages/latest", "hub": HUB}
    assert link_header(client.get(latest["Location"]))["hub"] == HUB
    assert "hub" not in link_header(client.get("/feeds/books/pages/1"))


def test_archive_pages_do_not_change(client, sealed_feed):
    page = client.get("/feeds/books/archives/1/")
    assert b"websub" not in page.content
    assert "websub" not in page["Link"]


# The hub's answers ----------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "reason"), [
    ({"hub.mode": "publish"}, "hub.mode must be subscribe or unsubscribe"),
    ({"hub.topic": f"{BASE}/feeds/nope/"}, "is not a topic of this hub"),
    ({"hub.topic": f"{BASE}/feeds/books/archives/1/"}, "is not a topic of this hub"),
    ({"hub.topic": "http://elsewhere.example/feeds/books/"}, "is not a topic of this hub"),
    ({"hub.topic": f"{BASE}/feeds/books/?format=html"}, "is not a topic of this hub"),
    ({"hub.callback": "ftp://127.0.0.1/cb"}, "is not an absolute http(s) URL"),
    ({"hub.callback": "/relative"}, "is not an absolute http(s) URL"),
    ({"hub.callback": ""}, "hub.callback is missing"),
    ({"hub.lease_seconds": "1.5"}, "hub.lease_seconds must be a whole number of seconds"),
    ({"hub.lease_seconds": "-5"}, "hub.lease_seconds must be a whole number"),
    ({"hub.secret": "é" * 100}, "hub.secret must be less than 200 bytes"),
])
def test_it_refuses_a_bad_request_with_400_and_the_reason(client, feed, fields, reason):
    response = subscribe(client, "http://127.0.0.1:9/cb", **fields)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert reason in response.content.decode()
    assert not Subscription.objects.exists()


@pytest.mark.parametrize("name", hub.HUB_FIELDS)
def test_a_repeated_hub_parameter_is_refused_with_400_naming_it(client, feed, name):
    fields = {"hub.mode": "subscribe", "hub.topic": TOPIC, "hub.callback": "http://127.0.0.1:9/cb",
              "hub.lease_seconds": "3600", "hub.secret": "s"}
    second = {"hub.callback": "http://127.0.0.1:9/other"}.get(name, fields[name])
    body = urlencode([*fields.items(), (name, second)])
    response = client.post("/websub/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert response.content.decode() == (f"The parameter {name} is given more than once; "
                                         "give it once.\n")
    assert not Subscription.objects.exists()


def test_callback_hosts_can_be_restricted(client, feed, settings):
    settings.FEEDPUB_WEBSUB_CALLBACK_HOSTS = [".example.org"]
    refused = subscribe(client, "http://127.0.0.1:9/cb")
    assert refused.status_code == 400
    assert "does not call back '127.0.0.1'" in refused.content.decode()
    assert subscribe(client, "https://hooks.example.org/cb").status_code == 202


def test_the_hub_accepts_posts_only(client):
    assert client.get("/websub/").status_code == 405


# Verification ---------------------------------------------------------------------------

def test_a_subscription_is_verified_with_the_callback_then_active(client, feed, callback,
                                                                    worker):
    response = subscribe(client, f"{callback.url}/cb?id=7", **{"hub.lease_seconds": "3600"})
    assert response.status_code == 202
    assert not callback.calls  # verified asynchronously, by the worker
    assert worker.run_round().verified == 1
    (call,) = callback.verifications()
    assert call.path == "/cb"
    assert call.query["id"] == "7"  # the callback's own query is kept
    assert call.query["hub.mode"] == "subscribe"
    assert call.query["hub.topic"] == TOPIC
    assert call.query["hub.lease_seconds"] == "3600"
    assert len(call.query["hub.challenge"]) >= 20
    subscription = Subscription.objects.get()
    assert subscription.is_active
    assert not subscription.intent
    left = (subscription.expires_at - timezone.now()).total_seconds()
    assert 3590 < left <= 3600


@pytest.mark.parametrize("verify", ["wrong", "refuse"])
def test_a_callback_that_does_not_confirm_is_not_subscribed(client, feed, worker, verify):
    with CallbackServer(verify=verify) as callback:
        subscribe(client, f"{callback.url}/cb")
        report = worker.run_round()
        assert report.refused == 1
        assert not report.verified
        assert not Subscription.objects.exists()
        write(feed)
        worker.run_round()
        assert not callback.deliveries()


def test_a_failed_renewal_leaves_the_subscription_as_it_was(client, feed, worker):
    with CallbackServer() as callback:
        subscribe(client, f"{callback.url}/cb", **{"hub.secret": "first"})
        worker.run_round()
        callback.verify = "wrong"
        subscribe(client, f"{callback.url}/cb", **{"hub.secret": "second"})
        assert worker.run_round().refused == 1
        subscription = Subscription.objects.get()
        assert subscription.is_active
        assert subscription.secret == "first"
        assert not subscription.intent


def test_unsubscribing_is_verified_and_ends_deliveries(client, feed, callback, worker):
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    response = client.post("/websub/", {"hub.mode": "unsubscribe", "hub.topic": TOPIC,
                                        "hub.callback": f"{callback.url}/cb"})
    assert response.status_code == 202
    assert Subscription.objects.get().is_active  # until the callback confirms
    worker.run_round()
    assert callback.verifications()[-1].query["hub.mode"] == "unsubscribe"
    assert "hub.lease_seconds" not in callback.verifications()[-1].query
    assert not Subscription.objects.exists()
    write(feed)
    worker.run_round()
    assert not callback.deliveries()


def test_subscribers_of_a_deleted_feed_are_denied(client, db, callback, worker):
    feed = FeedFactory(slug="empty")
    subscribe(client, f"{callback.url}/cb", topic=f"{BASE}/feeds/empty/")
    worker.run_round()
    feed.delete()
    assert worker.run_round().denied == 1
    denial = callback.verifications()[-1]
    assert denial.query["hub.mode"] == "denied"
    assert denial.query["hub.topic"] == f"{BASE}/feeds/empty/"
    assert denial.query["hub.reason"]
    assert not Subscription.objects.exists()


# Delivery -------------------------------------------------------------------------------

@pytest.mark.parametrize(("topic", "content_type"), [
    (TOPIC, "application/atom+xml; charset=utf-8"),
    (f"{BASE}/feeds/books/rss/", "application/rss+xml; charset=utf-8"),
])
def test_each_change_is_delivered_as_the_topic_shows_it(client, feed, callback, worker,
                                                        topic, content_type):
    subscribe(client, f"{callback.url}/cb", topic=topic, **{"hub.secret": "s3cret"})
    worker.run_round()
    assert worker.run_round().delivered == 0  # nothing changed since it subscribed
    write(feed)
    assert worker.run_round().delivered == 1
    (delivery,) = callback.deliveries()
    served = client.get(topic.removeprefix(BASE))
    assert delivery.body == served.content
    assert delivery.headers["content-type"] == content_type == served["Content-Type"]
    assert header_links(delivery.headers["link"]) == {"hub": HUB, "self": topic}
    expected = hmac.new(b"s3cret", delivery.body, hashlib.sha256).hexdigest()
    assert delivery.headers["x-hub-signature"] == f"sha256={expected}"
    assert worker.run_round().delivered == 0  # delivered once
    write(feed, "k2", 2)
    worker.run_round()
    assert len(callback.deliveries()) == 2
    assert b"k2" in callback.deliveries()[1].body


def test_the_linked_pages_topic_delivers_the_newest_page(client, feed, callback, worker):
    topic = f"{BASE}/feeds/books/pages/latest"
    subscribe(client, f"{callback.url}/cb", topic=topic)
    worker.run_round()
    for n in range(1, 5):  # page_size 3: the fourth entry starts page 2
        write(feed, f"k{n}", n)
    worker.run_round()
    (delivery,) = callback.deliveries()
    newest = client.get("/feeds/books/pages/2")
    assert delivery.body == newest.content
    assert delivery.headers["content-type"] == newest["Content-Type"]
    assert delivery.headers["content-location"] == f"{BASE}/feeds/books/pages/2"
    assert header_links(delivery.headers["link"])["self"] == topic
    assert "x-hub-signature" not in delivery.headers  # no secret given


def test_a_failed_delivery_is_retried_later_then_the_subscription_ends(client, feed, worker,
                                                                       settings):
    settings.FEEDPUB_WEBSUB_MAX_ATTEMPTS = 3
    with CallbackServer(statuses=[500, 503, 500]) as callback:
        subscribe(client, f"{callback.url}/cb")
        worker.run_round()
        write(feed)
        assert worker.run_round().failed == 1
        subscription = Subscription.objects.get()
        assert subscription.attempts == 1
        assert subscription.last_error == "HTTP 500"
        wait = (subscription.next_attempt_at - timezone.now()).total_seconds()
        assert 8 < wait <= 10  # FEEDPUB_WEBSUB_RETRY_SECONDS
        assert worker.run_round().failed == 0  # not due yet
        assert len(callback.deliveries()) == 1

        make_due()
        worker.run_round()
        subscription = Subscription.objects.get()
        assert subscription.attempts == 2
        assert subscription.last_error == "HTTP 503"
        assert 18 < (subscription.next_attempt_at - timezone.now()).total_seconds() <= 20

        make_due()
        report = worker.run_round()  # the third failure in a row: the subscription ends
        assert (report.failed, report.ended) == (1, 1)
        assert not Subscription.objects.exists()
        write(feed, "k2", 2)
        worker.run_round()
        assert len(callback.deliveries()) == 3


def make_due() -> None:
    Subscription.objects.update(next_attempt_at=timezone.now())


def test_a_delivery_that_fails_then_succeeds_sends_the_newest_content(client, feed, worker):
    with CallbackServer(statuses=[500, 204]) as callback:
        subscribe(client, f"{callback.url}/cb")
        worker.run_round()
        write(feed)
        worker.run_round()
        write(feed, "k2", 2)
        make_due()
        assert worker.run_round().delivered == 1
        assert b"k2" in callback.deliveries()[-1].body
        assert Subscription.objects.get().attempts == 0


def test_a_callback_answering_410_ends_its_subscription(client, feed, worker):
    with CallbackServer(statuses=[410]) as callback:
        subscribe(client, f"{callback.url}/cb")
        worker.run_round()
        write(feed)
        worker.run_round()
        assert len(callback.deliveries()) == 1
        assert not Subscription.objects.exists()


def test_an_unreachable_callback_is_a_failure_not_a_crash(client, feed, worker, callback):
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    Subscription.objects.update(callback="http://127.0.0.1:9/closed")
    write(feed)
    assert worker.run_round().failed == 1
    assert "Cannot connect to host" in Subscription.objects.get().last_error


def test_an_expired_lease_gets_nothing_and_is_forgotten(client, feed, callback, worker):
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    Subscription.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    write(feed)
    assert worker.run_round().expired == 1
    assert not callback.deliveries()
    assert not Subscription.objects.exists()


def test_a_renamed_feeds_subscribers_are_denied(client, db, callback, worker):
    feed = FeedFactory(slug="old")
    subscribe(client, f"{callback.url}/cb", topic=f"{BASE}/feeds/old/")
    worker.run_round()
    publishing.update_feed(feed=feed, slug="new")
    assert worker.run_round().denied == 1
    assert callback.verifications()[-1].query["hub.mode"] == "denied"
    assert not callback.deliveries()


def test_a_narrowed_callback_host_setting_stops_deliveries(client, feed, callback, worker,
                                                            settings):
    subscribe(client, f"{callback.url}/cb")
    worker.run_round()
    settings.FEEDPUB_WEBSUB_CALLBACK_HOSTS = ["hooks.example.org"]
    write(feed)
    assert worker.run_round().failed == 1
    assert not callback.deliveries()
    assert "FEEDPUB_WEBSUB_CALLBACK_HOSTS" in Subscription.objects.get().last_error


def test_the_command_runs_one_round(client, feed, callback):
    subscribe(client, f"{callback.url}/cb")
    out = StringIO()
    call_command("websub_worker", "--once", stdout=out)
    assert out.getvalue().strip() == "1 verified"
    out = StringIO()
    call_command("websub_worker", "--once", stdout=out)
    assert out.getvalue().strip() == "nothing to do"


def test_the_command_run_once_says_so_and_no_round_interval(db, caplog):
    with caplog.at_level("INFO", logger="archives"):
        call_command("websub_worker", "--once", stdout=StringIO())
    said = [r.getMessage() for r in caplog.records if "websub_worker" in r.getMessage()]
    assert said == ["websub_worker: one round, then exit"]


# PostgreSQL: workers at once, and waking on NOTIFY -------------------------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_call_each_callback_once(client):
    feed = FeedFactory(slug="books", page_size=3)
    with CallbackServer() as callback:
        for n in range(60):
            subscribe(client, f"{callback.url}/cb{n}")
        first = Worker()
        first.run_round()
        first.close()
        write(feed)
        workers = [Worker(), Worker()]
        try:
            reports = raise_first_error(run_at_once([w.run_round for w in workers]))
        finally:
            for w in workers:
                w.close()
        assert sum(report.delivered for report in reports) == 60
        paths = [call.path for call in callback.deliveries()]
        assert sorted(paths) == sorted(f"/cb{n}" for n in range(60))  # each exactly once


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_worker_wakes_on_a_notification_without_waiting_for_its_poll(client):
    feed = FeedFactory(slug="books", page_size=3)
    stop = threading.Event()
    with CallbackServer() as callback:
        subscribe(client, f"{callback.url}/cb")
        worker = Worker()
        thread = threading.Thread(target=run_worker, args=(worker, stop), daemon=True)
        thread.start()
        try:
            callback.wait_for(1, method="GET")  # its first round verified the subscriber
            wait_until_listening()
            write(feed)  # the write path's own NOTIFY (archives/db/heads.py) wakes it
            written = time.monotonic()
            (delivery,) = callback.wait_for(1, timeout=10)
            # The poll is a minute away: only the notification explains this.
            assert delivery.arrived - written < 5
        finally:
            stop.set()
            with transaction.atomic():
                hub.announce(hub.INTENTS_CHANNEL, 0)  # wake it to see `stop`
            thread.join(timeout=10)
    assert not thread.is_alive()


def run_worker(worker: Worker, stop: threading.Event, poll_seconds: float = 60) -> None:
    try:
        worker.run(poll_seconds=poll_seconds, stop=stop.is_set)
    finally:
        worker.close()
        connections.close_all()


def wait_until_listening(timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                           [f"LISTEN {hub.INTENTS_CHANNEL}"])
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError("the worker never listened")
