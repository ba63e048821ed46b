"""WebSub (W3C Recommendation, 2018-01-23): feedpub is the hub of its own topics.

Topics are a feed's subscription document, in Atom (/feeds/<slug>/) or RSS
(/feeds/<slug>/rss/), and the linked-pages entry point (/feeds/<slug>/pages/latest), whose
content is the newest linked page. Each names the hub (rel="hub") and itself (rel="self").

The hub's view only checks a request (`record_request`: 400 with the reason, else 202) and
records the intent. The worker (`Worker`, run by `manage.py websub_worker`) makes every
call to a callback:
- it verifies an intent with a GET carrying hub.mode, hub.topic, hub.challenge (and
  hub.lease_seconds), which the callback must answer with a 2xx echoing the challenge; a
  subscriber whose topic is gone (its feed deleted or renamed) is denied (hub.mode=denied);
- it delivers: whenever a topic's ETag differs from the one last delivered to a subscriber,
  it POSTs the topic's current bytes to the callback, with Link rel="hub" and rel="self",
  the topic's Content-Type and, when a secret was given, X-Hub-Signature:
  sha256=HMAC-SHA256(secret, body);
- a failed delivery is retried after FEEDPUB_WEBSUB_RETRY_SECONDS, twice as long each time
  after, and that content is given up after FEEDPUB_WEBSUB_MAX_ATTEMPTS failures in a row
  (the next change is delivered afresh); a 410 Gone from a callback ends its subscription;
- subscriptions whose lease has run out are dropped.

Correct by the database state alone: a round compares each subscriber's delivered ETag with
the topic's current one, so a missed wake-up only delays a delivery until the next poll.
Delivery is at least once: an answer lost (the worker killed after sending) means the same
content is sent again. Each topic's bytes are read once a round and sent to every
subscriber due, concurrently. Workers claim the subscriptions they call (`claimed_until`,
taken with FOR UPDATE SKIP LOCKED on PostgreSQL), so any number may run and none calls a
callback another is calling.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

import aiohttp
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Q
from django.http import QueryDict
from django.http.request import validate_host
from django.urls import Resolver404, resolve
from django.utils import timezone
from yarl import URL

from . import atom, documents, linkedpages, rss
from .documents import LinkedPageDocument, RssSubscriptionDocument, SubscriptionDocument
from .models import ArchivePage, Feed, Subscription

logger = logging.getLogger(__name__)

Format = Subscription.Format
Mode = Subscription.Mode

# The routes that are topics, and the format each names.
TOPIC_ROUTES = {"archives:subscription": Format.ATOM, "archives:rss": Format.RSS,
                "archives:linked-latest": Format.LINKED}
MAX_SECRET_BYTES = 199  # "hub.secret ... MUST be less than 200 bytes"
MAX_CALLBACK_BYTES = 2000
# PostgreSQL channels the worker listens on: writes announce the feed they changed (the
# write path, archives/heads.py), the hub announces a new intent.
CHANGES_CHANNEL = "feedpub_changes"
INTENTS_CHANNEL = "feedpub_websub"
# Subscriptions a worker claims at once, and for how long: longer than a batch can take
# (CONCURRENCY callbacks at a time, each within the timeout), after which a crashed
# worker's claims lapse and another worker calls those callbacks.
BATCH = 1000


def claim_seconds() -> int:
    rounds = -(-BATCH // max(settings.FEEDPUB_WEBSUB_CONCURRENCY, 1))
    return 2 * rounds * settings.FEEDPUB_WEBSUB_TIMEOUT + 60


class HubRequestError(ValueError):
    """A subscription request the hub refuses: its message says why (the 400's body)."""


# Topics -----------------------------------------------------------------------------------

def topic_url(slug: str, format: str) -> str:
    if format == Format.ATOM:
        return atom.subscription_url(slug)
    if format == Format.RSS:
        return rss.rss_subscription_url(slug)
    return linkedpages.entry_point_url(slug)


def find_topic(url: str) -> tuple[Feed, str]:
    """The feed and format a topic URL names. Raises HubRequestError."""
    base = settings.FEEDPUB_BASE_URL
    path = url.removeprefix(base) if url.startswith(base + "/") else None
    try:
        match = resolve(urlsplit(path).path) if path is not None else None
    except Resolver404:
        match = None
    format = TOPIC_ROUTES.get(match.view_name) if match else None
    feed = Feed.objects.filter(slug=match.kwargs["slug"]).first() if format else None
    if feed is None or url != topic_url(feed.slug, format):
        example = topic_url("SLUG", Format.ATOM).replace("SLUG", "<slug>")
        raise HubRequestError(
            f"hub.topic {url!r} is not a topic of this hub. Topics are an existing feed's "
            f"subscription document ({example}), its RSS twin (rss/ after it) and its "
            f"linked-pages entry point (pages/latest after it).")
    return feed, format


@dataclass(frozen=True)
class Content:
    """What a topic's subscribers are sent: its current bytes and what they are."""

    etag: str
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


def current_content(feed: Feed, format: str) -> Content | None:
    """The topic's bytes now (None: the linked-pages topic of a feed with no entries)."""
    read_at = documents.now()
    if format == Format.LINKED:
        number = documents.newest_page(feed)
        try:
            page = LinkedPageDocument.for_page(feed.slug, number)
        except ArchivePage.DoesNotExist:  # no entries yet (or renamed since read)
            return None
        return Content(page.etag(), page.body(), page.content_type,
                       {"Content-Location": page.links()[0][1]})
    document_class = RssSubscriptionDocument if format == Format.RSS else SubscriptionDocument
    document = document_class(feed, read_at=read_at)
    return Content(document.etag(), document.body(), document.content_type)


# The hub: subscription requests -----------------------------------------------------------

def record_request(data: QueryDict) -> Subscription:
    """Check a subscription request (hub.mode, hub.topic, hub.callback, hub.lease_seconds,
    hub.secret) and record it for the worker to verify. Raises HubRequestError."""
    mode = data.get("hub.mode", "")
    if mode not in Mode.values:
        raise HubRequestError(f"hub.mode must be subscribe or unsubscribe, not {mode!r}.")
    feed, format = find_topic(data.get("hub.topic", ""))
    callback = clean_callback(data.get("hub.callback", ""))
    secret = clean_secret(data.get("hub.secret", ""))
    lease = clean_lease(data.get("hub.lease_seconds", "")) if mode == Mode.SUBSCRIBE else None
    with transaction.atomic():
        subscription, _ = Subscription.objects.select_for_update().get_or_create(
            topic=data["hub.topic"], callback=callback,
            defaults={"feed": feed, "format": format})
        subscription.intent, subscription.intent_secret = mode, secret
        subscription.intent_lease_seconds, subscription.intent_at = lease, timezone.now()
        subscription.save(update_fields=["intent", "intent_secret", "intent_lease_seconds",
                                         "intent_at"])
        announce(INTENTS_CHANNEL, subscription.pk)
    return subscription


_url_validator = URLValidator(schemes=["http", "https"])


def clean_callback(url: str) -> str:
    if not url:
        raise HubRequestError("hub.callback is missing.")
    try:
        _url_validator(url)
    except ValidationError:
        raise HubRequestError(f"hub.callback {url!r} is not an absolute http(s) URL.") from None
    if len(url.encode()) > MAX_CALLBACK_BYTES:
        raise HubRequestError(f"hub.callback is longer than {MAX_CALLBACK_BYTES} bytes.")
    if not callback_allowed(url):
        raise HubRequestError(f"This hub does not call back {urlsplit(url).hostname!r} "
                              f"(hosts it calls: FEEDPUB_WEBSUB_CALLBACK_HOSTS).")
    return url


def callback_allowed(url: str) -> bool:
    """Whether FEEDPUB_WEBSUB_CALLBACK_HOSTS admits the callback's host (ALLOWED_HOSTS
    patterns). Checked on each request and again before each call: the setting may have
    narrowed since the subscription was made."""
    host = (urlsplit(url).hostname or "").lower()
    return bool(host) and validate_host(host, settings.FEEDPUB_WEBSUB_CALLBACK_HOSTS)


def clean_secret(secret: str) -> str:
    if len(secret.encode()) > MAX_SECRET_BYTES:
        raise HubRequestError(f"hub.secret must be less than {MAX_SECRET_BYTES + 1} bytes.")
    return secret


def clean_lease(value: str) -> int:
    if not value:
        return settings.FEEDPUB_WEBSUB_LEASE_SECONDS
    low, high = (settings.FEEDPUB_WEBSUB_MIN_LEASE_SECONDS,
                 settings.FEEDPUB_WEBSUB_MAX_LEASE_SECONDS)
    if not re.fullmatch(r"[0-9]{1,12}", value) or not low <= int(value) <= high:
        raise HubRequestError(
            f"hub.lease_seconds must be a whole number of seconds from {low} to {high}, "
            f"not {value!r}.")
    return int(value)


def announce(channel: str, payload: int) -> None:
    """NOTIFY `channel` when the transaction commits (PostgreSQL); elsewhere the worker
    finds the change by polling."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel, str(payload)])


def signature(secret: str, body: bytes) -> str:
    """X-Hub-Signature's value: `sha256=` and the HMAC of the body keyed by the secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# The worker ------------------------------------------------------------------------------

@dataclass
class RoundReport:
    verified: int = 0
    refused: int = 0  # verifications that failed
    denied: int = 0
    delivered: int = 0
    failed: int = 0
    expired: int = 0

    def __bool__(self) -> bool:
        return any(vars(self).values())


class Worker:
    """Verifies intents and delivers changes; `run_round` does one pass over the database.
    Every call to a callback goes through one aiohttp session on one event loop, kept for
    the worker's life so that connections to callbacks are reused. (aiohttp, not httpx:
    1,000 local POSTs took ~0.35 s with it against ~3 s with httpx, bench/websub.py.)"""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._session())

    @staticmethod
    async def _session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.FEEDPUB_WEBSUB_CONCURRENCY),
            timeout=aiohttp.ClientTimeout(total=settings.FEEDPUB_WEBSUB_TIMEOUT),
            headers={"User-Agent": f"feedpub WebSub hub ({atom.hub_url()})"})

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()

    def run_round(self, feed_ids: Iterable[int] | None = None, *,
                  verify: bool = True) -> RoundReport:
        """Verify waiting intents (unless `verify` is false), drop expired leases, and
        deliver every topic of `feed_ids` (None: of every feed) whose subscribers are due."""
        report = RoundReport()
        if verify:
            self.verify_intents(report)
        if feed_ids is None:
            report.expired = expire_leases()
        self.deliver(report, feed_ids)
        return report

    def run(self, *, poll_seconds: float, stop=lambda: False, on_round=None) -> None:
        """Rounds until `stop()`: a full one every `poll_seconds`, and between them, on
        PostgreSQL, one for the feeds (and intents) notifications name as they come.
        A lost database is survived: the connection is dropped and tried again."""
        listener = Listener() if connection.vendor == "postgresql" else None
        next_poll = 0.0
        try:
            while not stop():
                wait = max(next_poll - time.monotonic(), 0)
                wake = listener.wait(wait) if listener else time.sleep(wait)
                full = time.monotonic() >= next_poll
                try:
                    report = (self.run_round() if full
                              else self.run_round(wake.feeds, verify=wake.intents))
                except (OperationalError, InterfaceError) as error:
                    logger.error("websub: database unavailable (%s); retrying", error)
                    close_old_connections()
                    report = None
                if full:
                    next_poll = time.monotonic() + poll_seconds
                if on_round is not None and report:
                    on_round(report)
        finally:
            if listener is not None:
                listener.close()

    def _gather(self, calls):
        async def run():
            semaphore = asyncio.Semaphore(settings.FEEDPUB_WEBSUB_CONCURRENCY)

            async def limited(call):
                async with semaphore:
                    return await call

            return await asyncio.gather(*(limited(call) for call in calls))

        return self.loop.run_until_complete(run())

    # Verification

    def verify_intents(self, report: RoundReport) -> None:
        while claimed := claim(Subscription.objects.filter(
                ~Q(intent="") | Q(feed__isnull=True))):
            feeds = Feed.objects.in_bulk({s.feed_id for s in claimed if s.feed_id})
            gone = [s for s in claimed if not topic_exists(s, feeds.get(s.feed_id))]
            asking = [s for s in claimed if s not in gone]
            for subscription in gone:
                subscription.feed = None
            self._deny(gone, report)
            answers = self._gather(self._verify(s) for s in asking)
            for subscription, confirmed in zip(asking, answers, strict=True):
                apply_verification(subscription, confirmed,
                                   feeds.get(subscription.feed_id), report)

    async def _verify(self, subscription: Subscription) -> bool:
        challenge = secrets.token_urlsafe(24)
        params = {"hub.mode": subscription.intent, "hub.topic": subscription.topic,
                  "hub.challenge": challenge}
        if subscription.intent == Mode.SUBSCRIBE:
            params["hub.lease_seconds"] = str(subscription.intent_lease_seconds)
        if not callback_allowed(subscription.callback):
            return False
        try:
            async with self.client.get(with_query(subscription.callback, params),
                                       allow_redirects=False) as response:
                body = await response.content.read(len(challenge) + 64)
        except (aiohttp.ClientError, TimeoutError) as error:
            logger.info("verifying %s: %r", subscription, error)
            return False
        # The body must equal the challenge; surrounding whitespace (a newline many
        # frameworks add) is forgiven: the challenge itself has none.
        return 200 <= response.status < 300 and body.strip() == challenge.encode()

    def _deny(self, subscriptions: list[Subscription], report: RoundReport) -> None:
        """Tell each subscriber its topic is gone (hub.mode=denied), then forget it."""
        async def deny(subscription):
            params = {"hub.mode": "denied", "hub.topic": subscription.topic,
                      "hub.reason": "The topic no longer exists."}
            if callback_allowed(subscription.callback):
                try:
                    async with self.client.get(with_query(subscription.callback, params),
                                               allow_redirects=False):
                        pass
                except (aiohttp.ClientError, TimeoutError) as error:
                    logger.info("denying %s: %r", subscription, error)

        self._gather(deny(s) for s in subscriptions)
        Subscription.objects.filter(pk__in=[s.pk for s in subscriptions]).delete()
        report.denied += len(subscriptions)

    # Delivery

    def deliver(self, report: RoundReport, feed_ids: Iterable[int] | None = None) -> None:
        now = timezone.now()
        topics = Subscription.objects.filter(expires_at__gt=now, feed__isnull=False)
        if feed_ids is not None:
            topics = topics.filter(feed_id__in=list(feed_ids))
        topics = set(topics.values_list("feed_id", "format").distinct().order_by())
        feeds = Feed.objects.in_bulk({feed_id for feed_id, _ in topics})
        for feed_id, format in sorted(topics):
            feed = feeds.get(feed_id)
            if feed is not None:
                self.deliver_topic(feed, format, report)

    def deliver_topic(self, feed: Feed, format: str, report: RoundReport) -> None:
        """Send the topic's current content to each subscriber that has not had it."""
        content = current_content(feed, format)
        if content is None:
            return
        current_topic = topic_url(feed.slug, format)
        while claimed := claim(Subscription.objects.filter(
                feed=feed, format=format, expires_at__gt=timezone.now(),
                next_attempt_at__lte=timezone.now()).exclude(delivered_etag=content.etag)):
            gone = [s for s in claimed if s.topic != current_topic]  # renamed since
            self._deny(gone, report)
            sending = [s for s in claimed if s.topic == current_topic]
            answers = self._gather(self._post(s, content) for s in sending)
            record_deliveries(sending, answers, content, report)

    async def _post(self, subscription: Subscription, content: Content) -> int | str:
        """The callback's status code, or why there is none."""
        if not callback_allowed(subscription.callback):
            return "the callback's host is no longer in FEEDPUB_WEBSUB_CALLBACK_HOSTS"
        headers = {"Content-Type": content.content_type,
                   "Link": atom.link_header([("hub", atom.hub_url()),
                                             ("self", subscription.topic)]),
                   **content.headers}
        if subscription.secret:
            headers["X-Hub-Signature"] = signature(subscription.secret, content.body)
        try:
            async with self.client.post(URL(subscription.callback, encoded=True),
                                        data=content.body, headers=headers,
                                        allow_redirects=False) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            return f"{type(error).__name__}: {error}"[:300]


def with_query(url: str, params: dict[str, str]) -> URL:
    """The callback with the hub's parameters added to its own query, which is kept."""
    return URL(url, encoded=True).extend_query(params)


def topic_exists(subscription: Subscription, feed: Feed | None) -> bool:
    return feed is not None and subscription.topic == topic_url(feed.slug, subscription.format)


def claim(queryset) -> list[Subscription]:
    """Up to BATCH subscriptions of `queryset` that no worker is calling, claimed for this
    one. On PostgreSQL rows another worker is claiming are skipped, not waited for; on
    SQLite writers take turns, so the check of `claimed_until` is enough."""
    now = timezone.now()
    with transaction.atomic():
        claimed = list(queryset.filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
                       .order_by("pk").select_for_update(skip_locked=True)[:BATCH])
        Subscription.objects.filter(pk__in=[s.pk for s in claimed]).update(
            claimed_until=now + timedelta(seconds=claim_seconds()))
    return claimed


def apply_verification(subscription: Subscription, confirmed: bool, feed: Feed | None,
                       report: RoundReport) -> None:
    """The outcome of a verification, unless a newer request replaced the one verified."""
    if not _apply_verification(subscription, confirmed, feed, report):
        # A newer request came meanwhile: release it, to be verified in its turn.
        Subscription.objects.filter(pk=subscription.pk).update(claimed_until=None)


def _apply_verification(subscription: Subscription, confirmed: bool, feed: Feed | None,
                        report: RoundReport) -> int:
    now = timezone.now()
    same_request = Subscription.objects.filter(pk=subscription.pk,
                                               intent_at=subscription.intent_at)
    active = subscription.is_active
    if not confirmed:
        report.refused += 1
        if not active:  # nothing to keep: a failed renewal leaves the subscription be
            return same_request.delete()[0]
        return same_request.update(intent="", intent_secret="", intent_lease_seconds=None,
                                   claimed_until=None)
    report.verified += 1
    if subscription.intent == Mode.UNSUBSCRIBE:
        return same_request.delete()[0]
    changes = {"intent": "", "intent_secret": "", "intent_lease_seconds": None,
               "claimed_until": None, "secret": subscription.intent_secret,
               "expires_at": now + timedelta(seconds=subscription.intent_lease_seconds)}
    if not active:
        # A new subscriber is told of changes from now on: what there is now, it can read.
        content = current_content(feed, subscription.format)
        changes.update(delivered_etag=content.etag if content else "", attempts=0,
                       next_attempt_at=now, last_error="")
    return same_request.update(**changes)


def record_deliveries(subscriptions: list[Subscription], answers: list[int | str],
                      content: Content, report: RoundReport) -> None:
    """Store each delivery's outcome and release the claims."""
    now = timezone.now()
    delivered, gone, failed = [], [], []
    for subscription, answer in zip(subscriptions, answers, strict=True):
        if isinstance(answer, int) and 200 <= answer < 300:
            delivered.append(subscription.pk)
        elif answer == 410:  # the subscriber says the subscription is gone
            gone.append(subscription.pk)
        else:
            failed.append(failure(subscription, answer, content, now))
    Subscription.objects.filter(pk__in=delivered).update(
        delivered_etag=content.etag, delivered_at=now, attempts=0, last_error="",
        next_attempt_at=now, claimed_until=None)
    Subscription.objects.filter(pk__in=gone).delete()
    Subscription.objects.bulk_update(
        failed, ["delivered_etag", "attempts", "next_attempt_at", "last_error",
                 "claimed_until"])
    report.delivered += len(delivered)
    report.failed += len(failed)
    for subscription in failed:
        logger.info("delivery to %s failed: %s", subscription.callback, subscription.last_error)


def failure(subscription: Subscription, answer: int | str, content: Content, now):
    """The subscription after a failed delivery: retried later, twice as late each time,
    and this content given up after FEEDPUB_WEBSUB_MAX_ATTEMPTS failures in a row."""
    attempts = subscription.attempts + 1
    error = f"HTTP {answer}" if isinstance(answer, int) else answer
    subscription.claimed_until = None
    if attempts >= settings.FEEDPUB_WEBSUB_MAX_ATTEMPTS:
        subscription.delivered_etag, subscription.attempts = content.etag, 0
        subscription.next_attempt_at = now
        subscription.last_error = f"gave up after {attempts} attempts: {error}"[:300]
    else:
        delay = settings.FEEDPUB_WEBSUB_RETRY_SECONDS * 2 ** (attempts - 1)
        subscription.attempts = attempts
        subscription.next_attempt_at = now + timedelta(seconds=delay)
        subscription.last_error = error[:300]
    return subscription


def expire_leases() -> int:
    """Forget subscriptions whose lease ran out (one awaiting a renewal waits for it)."""
    count, _ = Subscription.objects.filter(expires_at__lte=timezone.now(), intent="").delete()
    return count


# Waking up -------------------------------------------------------------------------------

@dataclass
class Wake:
    feeds: set[int] = field(default_factory=set)
    intents: bool = False


class Listener:
    """LISTEN on the changes and intents channels on a connection of its own (PostgreSQL
    only). Never trusted for correctness: when it is down, the worker polls."""

    def __init__(self):
        self.connection = None

    def connect(self) -> bool:
        try:
            params = connection.get_connection_params()
            self.connection = connection.get_new_connection(params)
            self.connection.autocommit = True
            for channel in (CHANGES_CHANNEL, INTENTS_CHANNEL):
                self.connection.execute(f"LISTEN {channel}")
        except Exception as error:  # noqa: BLE001 - any failure: poll, try again later
            logger.warning("cannot LISTEN (polling instead): %s", error)
            self.close()
        return self.connection is not None

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            finally:
                self.connection = None

    def wait(self, timeout: float) -> Wake | None:
        """What notifications arrived within `timeout` seconds (None: none, or the
        connection is down; either way the caller polls when its interval is up)."""
        if self.connection is None and not self.connect():
            return None
        wake = Wake()
        try:
            # The first notification (or the timeout), then whatever else has arrived.
            for notifies in (self.connection.notifies(timeout=max(timeout, 0), stop_after=1),
                             self.connection.notifies(timeout=0)):
                for notify in notifies:
                    if notify.channel == INTENTS_CHANNEL:
                        wake.intents = True
                    elif notify.payload.isdigit():
                        wake.feeds.add(int(notify.payload))
            return wake if wake.feeds or wake.intents else None
        except Exception as error:  # noqa: BLE001 - the connection died: poll until back
            logger.warning("LISTEN connection lost (polling instead): %s", error)
            self.close()
            return None
