"""The WebSub worker (`Worker`, run by `manage.py websub_worker`): it makes every call to a
callback for the hub (archives/push/hub.py records the intents):
- it verifies an intent with a GET carrying hub.mode, hub.topic, hub.challenge (and
  hub.lease_seconds), which the callback must answer with a 2xx echoing the challenge; a
  subscriber whose topic is gone (its feed deleted or renamed) is denied (hub.mode=denied);
- it delivers: whenever a topic's feed has a later version (`Version`) than the one last
  delivered to a subscriber, it POSTs the topic's current bytes to the callback, with Link
  rel="hub" and rel="self", the topic's Content-Type and, when a secret was given,
  X-Hub-Signature: sha256=HMAC-SHA256(secret, body);
- a failed delivery is retried after FEEDPUB_WEBSUB_RETRY_SECONDS, twice as long each time
  after (at most MAX_RETRY_DELAY), always with the newest content; after
  FEEDPUB_WEBSUB_MAX_ATTEMPTS failures in a row the subscription is ended, as is one whose
  callback answers 410 Gone;
- subscriptions whose lease has run out are dropped.
Callbacks are called only at public addresses (checked on each connection, after name
resolution) unless the hub recorded, when the subscriber asked, that private ones are allowed
(FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS is the hub's, read in archives/push/hub.py only);
whatever a callback answers (or fails to) is that call's failure, never the worker's.

Correct by the database state alone: a round asks the database, in one query, which topics
have a subscriber due whose delivered version is behind its feed's, so a missed wake-up
only delays a delivery until the next poll, and an idle round costs the same for 10 topics
as for 100,000. Delivery is at least once: an answer lost (the worker killed after sending)
means the same content is sent again. Each due topic's bytes are read once a round and
sent to every subscriber due, concurrently. Workers claim the subscriptions they call
(`claimed_until`, taken with FOR UPDATE SKIP LOCKED on PostgreSQL) and only those behind
the version they read, so any number may run, none calls a callback another is calling,
and none sends a document older than one already delivered. The state those queries read
and write is archives/push/subscriptions.py's; the wake-ups between polls
archives/push/listening.py's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Iterable
from contextlib import nullcontext

import aiohttp
from django.core.exceptions import ImproperlyConfigured
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)
from django.db.models import Q
from django.utils import timezone
from yarl import URL

from archives.conf import settings
from archives.documents import atom, urls
from archives.models import Feed, Subscription

from .hub import Mode, callback_allowed, public_socket, topic_url
from .listening import Listener, Wake
from .subscriptions import (
    FEED_VERSION,
    Content,
    RoundReport,
    Version,
    apply_verification,
    behind,
    claim,
    current_content,
    due,
    expire_leases,
    mark_delivered,
    record_deliveries,
    unclaimed,
)

logger = logging.getLogger(__name__)

# What a verification's answer may hold besides the challenge (a newline, spaces).
CHALLENGE_SLACK = 1024

def check_settings() -> None:
    """Refuse settings the worker cannot run with (at its start, not at its first call)."""
    problems = [f"FEEDPUB_WEBSUB_{name} must be at least 1, not {value}"
                for name in ("CONCURRENCY", "TIMEOUT", "RETRY_SECONDS", "MAX_ATTEMPTS",
                             "POLL_SECONDS", "MIN_LEASE_SECONDS")
                if (value := getattr(settings, f"FEEDPUB_WEBSUB_{name}")) < 1]
    low, default, high = (settings.FEEDPUB_WEBSUB_MIN_LEASE_SECONDS,
                          settings.FEEDPUB_WEBSUB_LEASE_SECONDS,
                          settings.FEEDPUB_WEBSUB_MAX_LEASE_SECONDS)
    if not low <= default <= high:
        problems.append(f"FEEDPUB_WEBSUB_LEASE_SECONDS ({default}) must lie within "
                        f"FEEDPUB_WEBSUB_MIN_LEASE_SECONDS ({low}) and "
                        f"FEEDPUB_WEBSUB_MAX_LEASE_SECONDS ({high})")
    if problems:
        raise ImproperlyConfigured("; ".join(problems))


def signature(secret: str, body: bytes) -> str:
    """X-Hub-Signature's value: `sha256=` and the HMAC of the body keyed by the secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()




class Worker:
    """Verifies intents and delivers changes; `run_round` does one pass over the database.
    Every call to a callback goes through an aiohttp session on one event loop, kept for
    the worker's life so that connections to callbacks are reused: one that connects to
    public addresses only, and one for subscriptions the hub allowed private addresses.
    (aiohttp, not httpx: 1,000 local POSTs took ~0.35 s with it against ~3 s with httpx,
    bench/websub.py.)"""

    def __init__(self):
        check_settings()
        self.loop = asyncio.new_event_loop()
        self.public_client = self.loop.run_until_complete(self._session(public_socket))
        self.any_client = self.loop.run_until_complete(self._session(None))

    @staticmethod
    async def _session(socket_factory) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.FEEDPUB_WEBSUB_CONCURRENCY,
                                           socket_factory=socket_factory),
            timeout=aiohttp.ClientTimeout(total=settings.FEEDPUB_WEBSUB_TIMEOUT),
            headers={"User-Agent": f"feedpub WebSub hub ({urls.hub_url()})"})

    def client(self, subscription: Subscription) -> aiohttp.ClientSession:
        """The session that calls this subscriber: as the hub recorded when it asked."""
        return self.any_client if subscription.allow_private_callback else self.public_client

    def close(self) -> None:
        for client in (self.public_client, self.any_client):
            self.loop.run_until_complete(client.close())
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

    def run(self, *, poll_seconds: float, stop=lambda: False, on_round=None,
            idle=nullcontext) -> None:
        """Rounds until `stop()`: a full one every `poll_seconds`, and between them, on
        PostgreSQL, one for the feeds (and intents) notifications name as they come.
        A failed round is logged and the next one tries again: the database may be back,
        and claims a failed round left lapse (claim_seconds). Each wait for a wake-up is
        inside `idle()`, a context that may end it by raising (a stop asked for: a round
        is never cut short)."""
        listener = Listener() if connection.vendor == "postgresql" else None
        next_poll = 0.0
        try:
            while not stop():
                wait = max(next_poll - time.monotonic(), 0)
                # Either returns within `wait`, with what woke it or None (also when the
                # listening connection is down: then it has slept, and this polls).
                wake = None
                with idle():
                    if listener is not None:
                        wake = listener.wait(wait)
                    else:
                        time.sleep(wait)
                full = time.monotonic() >= next_poll
                if not full and wake is None:
                    continue
                if full:
                    next_poll = time.monotonic() + poll_seconds
                report = self._round(None if full else wake)
                if on_round is not None and report:
                    on_round(report)
        finally:
            if listener is not None:
                listener.close()

    def _round(self, wake: Wake | None) -> RoundReport | None:
        """A full round (`wake` None) or the one a notification asks for; None if it failed."""
        try:
            if wake is None:
                return self.run_round()
            return self.run_round(wake.feeds, verify=wake.intents)
        except (OperationalError, InterfaceError) as error:
            logger.error("websub: database unavailable (%s); retrying", error)
            close_old_connections()  # a lost connection is dropped, and made anew
        except Exception:  # noqa: BLE001 - a worker that exits delivers nothing at all
            logger.exception("websub: a round failed; the next one tries again")
        return None

    def _gather(self, calls, failed):
        """Run the calls `FEEDPUB_WEBSUB_CONCURRENCY` at a time; a call that raised counts
        as `failed(error)` (each catches what a callback can cause; this is the backstop)."""
        async def run():
            semaphore = asyncio.Semaphore(settings.FEEDPUB_WEBSUB_CONCURRENCY)

            async def limited(call):
                async with semaphore:
                    return await call

            return await asyncio.gather(*(limited(call) for call in calls),
                                        return_exceptions=True)

        results = self.loop.run_until_complete(run())
        for result in results:
            if isinstance(result, Exception):
                logger.error("websub: a call failed unexpectedly: %r", result)
        return [failed(result) if isinstance(result, Exception) else result
                for result in results]

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
            answers = self._gather((self._verify(s) for s in asking), lambda error: False)
            for subscription, confirmed in zip(asking, answers, strict=True):
                apply_verification(subscription, confirmed, report)

    async def _verify(self, subscription: Subscription) -> bool:
        challenge = secrets.token_urlsafe(24)
        params = {"hub.mode": subscription.intent, "hub.topic": subscription.intent_topic,
                  "hub.challenge": challenge}
        if subscription.intent == Mode.SUBSCRIBE:
            params["hub.lease_seconds"] = str(subscription.intent_lease_seconds)
        if not callback_allowed(subscription.callback):
            return False
        try:
            async with self.client(subscription).get(
                    with_query(subscription.callback, params),
                    allow_redirects=False) as response:
                if not 200 <= response.status < 300:
                    return False
                body = await read_at_most(response, len(challenge) + CHALLENGE_SLACK)
        except Exception as error:  # noqa: BLE001 - whatever the callback does: not confirmed
            logger.info("verifying %s: %r", subscription, error)
            return False
        # The body must equal the challenge; surrounding whitespace (a newline many
        # frameworks add) is forgiven: the challenge itself has none.
        return body is not None and body.strip() == challenge.encode()

    def _deny(self, subscriptions: list[Subscription], report: RoundReport) -> None:
        """Tell each subscriber its topic is gone (hub.mode=denied), then forget it."""
        async def deny(subscription):
            params = {"hub.mode": "denied",
                      "hub.topic": subscription.named_topic or subscription.intent_topic,
                      "hub.reason": "The topic no longer exists."}
            if callback_allowed(subscription.callback):
                try:
                    async with self.client(subscription).get(
                            with_query(subscription.callback, params), allow_redirects=False):
                        pass  # its answer changes nothing
                except Exception as error:  # noqa: BLE001 - it is forgotten all the same
                    logger.info("denying %s: %r", subscription, error)

        self._gather((deny(s) for s in subscriptions), lambda error: None)
        Subscription.objects.filter(pk__in=[s.pk for s in subscriptions]).delete()
        report.denied += len(subscriptions)

    # Delivery

    def deliver(self, report: RoundReport, feed_ids: Iterable[int] | None = None) -> None:
        """Deliver each topic that has a subscriber due and behind its feed's version: one
        query finds them, whatever the number of topics."""
        now = timezone.now()
        behind_now = Subscription.objects.filter(behind(*FEED_VERSION), due(now),
                                                 unclaimed(now), feed__isnull=False)
        if feed_ids is not None:
            behind_now = behind_now.filter(feed_id__in=list(feed_ids))
        for feed_id, format in sorted(set(behind_now.values_list("feed_id", "format")
                                          .distinct().order_by())):
            self.deliver_topic(feed_id, format, report)

    def deliver_topic(self, feed_id: int, format: str, report: RoundReport) -> None:
        """Send the topic's current content to each subscriber last sent an earlier version.
        The feed is read here, right before its content and the claim: a subscriber
        already sent a later version (by another worker) is not claimed."""
        feed = Feed.objects.filter(pk=feed_id).first()
        if feed is None:
            return  # deleted: its subscribers are denied by the next verification
        version = Version.of(feed)
        content = current_content(feed, format)
        current_topic = topic_url(feed.slug, format)
        while claimed := claim(Subscription.objects.filter(
                behind(version.modified, version.seq, version.sealed), due(timezone.now()),
                feed=feed, format=format)):
            gone = [s for s in claimed if s.topic != current_topic]  # renamed since
            self._deny(gone, report)
            claimed = [s for s in claimed if s.topic == current_topic]
            # Nothing to send when the bytes are those already sent (a change of what the
            # topic does not show): only the version moves on.
            unchanged = [s for s in claimed
                         if content is None or s.delivered_etag == content.etag]
            sending = [s for s in claimed if s not in unchanged]
            if content is not None:  # (else every one is unchanged)
                answers = self._gather((self._post(s, content) for s in sending),
                                       lambda error: f"{type(error).__name__}: {error}"[:300])
                record_deliveries(sending, answers, content, version, report)
            mark_delivered([s.pk for s in unchanged], version,
                           content.etag if content else "", timezone.now())

    async def _post(self, subscription: Subscription, content: Content) -> int | str:
        """The callback's status code, or why there is none. Its body is not read: WebSub
        has the hub ignore it, and it could be endless."""
        if not callback_allowed(subscription.callback):
            return "the callback's host is no longer in FEEDPUB_WEBSUB_CALLBACK_HOSTS"
        headers = {"Content-Type": content.content_type,
                   "Link": atom.link_header([atom.hub_link(),
                                             atom.Link("self", subscription.named_topic)]),
                   **content.headers}
        if subscription.secret:
            headers["X-Hub-Signature"] = signature(subscription.secret, content.body)
        try:
            async with self.client(subscription).post(
                    URL(subscription.callback), data=content.body, headers=headers,
                    allow_redirects=False) as response:
                return response.status
        except Exception as error:  # noqa: BLE001 - whatever the callback does: a failure
            return f"{type(error).__name__}: {error}"[:300]


async def read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The response's body to its end (however it comes in pieces), or None when it is
    longer than `limit` bytes, which are all that are read."""
    body = bytearray()
    while chunk := await response.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def with_query(url: str, params: dict[str, str]) -> URL:
    """The callback with the hub's parameters added to its own query, which is kept (and,
    like the path, percent-encoded where it is not)."""
    return URL(url).extend_query(params)


def topic_exists(subscription: Subscription, feed: Feed | None) -> bool:
    return feed is not None and subscription.topic == topic_url(feed.slug, subscription.format)
