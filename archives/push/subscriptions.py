"""The WebSub subscriptions' delivery state, as the worker (archives/push/worker.py) reads and
writes it: how far a feed has come (`Version`) and which subscribers are behind it, what a
topic's subscribers are sent (`current_content`), the claims that keep two workers from
calling one callback, and the outcome of each verification and delivery (retries, backoff,
the end of a subscription). Correct by the database state alone: see the worker's docstring.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from archives.conf import settings
from archives.documents import base, kinds
from archives.models import Feed, Subscription

from .hub import Mode

logger = logging.getLogger(__name__)

# The longest wait between two delivery attempts, however many failures came before.
MAX_RETRY_DELAY = 3600
# Subscriptions a worker claims at once.
BATCH = 1000
# A claim's margin beyond its calls: the round's own queries, and for each subscription
# its outcome written (a new subscriber's content read: ~20 ms each on PostgreSQL on a
# busy 2-core machine, 1,000 verifications at once).
CLAIM_MARGIN_SECONDS = 10
CLAIM_MARGIN_EACH = 0.05


def claim_seconds(count: int) -> int:
    """How long a claim of `count` subscriptions lasts: longer than calling them can take,
    after which a crashed worker's claims lapse and another worker calls those callbacks.
    Each is called once (denied, verified or delivered to), CONCURRENCY at a time, each
    call within the timeout; the denials go first, in rounds of their own, so a batch may
    need one round more than its size asks."""
    rounds = -(-count // settings.FEEDPUB_WEBSUB_CONCURRENCY) + (count > 1)
    return math.ceil(rounds * settings.FEEDPUB_WEBSUB_TIMEOUT + CLAIM_MARGIN_SECONDS
                     + count * CLAIM_MARGIN_EACH)


@dataclass(frozen=True, order=True)
class Version:
    """How far a feed's documents have come: each of these only grows (a write raises
    last_seq, a seal sealed_pages, every change subscription_modified, which is never set
    back), so comparing them in this order puts any two states of the feed in the order
    they were committed."""

    modified: datetime
    seq: int
    sealed: int

    @classmethod
    def of(cls, feed: Feed) -> Version:
        return cls(feed.subscription_modified, feed.last_seq, feed.sealed_pages)


def behind(modified, seq, sealed) -> Q:
    """Subscriptions last delivered an earlier version than (modified, seq, sealed): values
    or expressions (the feed's own columns)."""
    return (Q(delivered_modified__isnull=True) | Q(delivered_modified__lt=modified)
            | Q(delivered_modified=modified, delivered_seq__lt=seq)
            | Q(delivered_modified=modified, delivered_seq=seq, delivered_sealed__lt=sealed))


FEED_VERSION = (F("feed__subscription_modified"), F("feed__last_seq"), F("feed__sealed_pages"))


@dataclass(frozen=True)
class Content:
    """What a topic's subscribers are sent: its current bytes and what they are."""

    etag: str
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


def current_content(feed: Feed, format: str) -> Content | None:
    """The bytes of the topic of `format` (a topic kind's, archives/documents/kinds.py; None:
    it has none yet, as the linked-pages topic of a feed with no entries), of the feed as
    read or later, never earlier."""
    document = kinds.by_topic(format).topic_document(feed, read_at=base.now())
    if document is None:
        return None
    return Content(document.etag(), document.body(), document.content_type,
                   document.topic_headers())


@dataclass
class RoundReport:
    verified: int = 0
    refused: int = 0  # verifications that failed
    denied: int = 0
    delivered: int = 0
    failed: int = 0
    ended: int = 0  # subscriptions ended after FEEDPUB_WEBSUB_MAX_ATTEMPTS failures
    expired: int = 0

    def __bool__(self) -> bool:
        return any(vars(self).values())


def due(now: datetime) -> Q:
    """Active subscriptions whose next delivery attempt is due."""
    return Q(expires_at__gt=now, next_attempt_at__lte=now)


def unclaimed(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)


def claim(queryset: QuerySet[Subscription]) -> list[Subscription]:
    """Up to BATCH subscriptions of `queryset` that no worker is calling, claimed for this
    one. On PostgreSQL rows another worker is claiming are skipped, not waited for; on
    SQLite writers take turns, so the check of `claimed_until` is enough."""
    now = timezone.now()
    with transaction.atomic():
        claimed = list(queryset.filter(unclaimed(now)).order_by("pk")
                       .select_for_update(skip_locked=True)[:BATCH])
        Subscription.objects.filter(pk__in=[s.pk for s in claimed]).update(
            claimed_until=now + timedelta(seconds=claim_seconds(len(claimed))))
    return claimed


def apply_verification(subscription: Subscription, confirmed: bool,
                       report: RoundReport) -> None:
    """The outcome of a verification, unless a newer request replaced the one verified."""
    if not _apply_verification(subscription, confirmed, report):
        # A newer request came meanwhile: release it, to be verified in its turn.
        Subscription.objects.filter(pk=subscription.pk).update(claimed_until=None)


def _apply_verification(subscription: Subscription, confirmed: bool,
                        report: RoundReport) -> int:
    now = timezone.now()
    same_request = Subscription.objects.filter(pk=subscription.pk,
                                               intent_at=subscription.intent_at)
    active = subscription.is_active
    cleared = {"intent": "", "intent_topic": "", "intent_secret": "",
               "intent_lease_seconds": None, "claimed_until": None}
    if not confirmed:
        report.refused += 1
        if not active:  # nothing to keep: a failed renewal leaves the subscription be
            return same_request.delete()[0]
        return same_request.update(**cleared)
    report.verified += 1
    if subscription.intent == Mode.UNSUBSCRIBE:
        return same_request.delete()[0]
    changes: dict[str, object] = {**cleared, "secret": subscription.intent_secret,
               "named_topic": subscription.intent_topic,
               # (A subscribe intent always has its lease: hub.clean_lease.)
               "expires_at": now + timedelta(seconds=subscription.intent_lease_seconds or 0)}
    if not active:
        # A new subscriber is told of changes from now on: what there is now, it can read
        # (the feed as it is now, not when the round began).
        feed = Feed.objects.get(subscriptions=subscription)
        content = current_content(feed, subscription.format)
        version = Version.of(feed)
        changes.update(delivered_modified=version.modified, delivered_seq=version.seq,
                       delivered_sealed=version.sealed,
                       delivered_etag=content.etag if content else "", attempts=0,
                       next_attempt_at=now, last_error="")
    return same_request.update(**changes)


def record_deliveries(subscriptions: list[Subscription], answers: list[int | str],
                      content: Content, version: Version, report: RoundReport) -> None:
    """Store each delivery's outcome and release the claims."""
    now = timezone.now()
    delivered, gone, failed, ended = [], [], [], []
    for subscription, answer in zip(subscriptions, answers, strict=True):
        if isinstance(answer, int) and 200 <= answer < 300:
            delivered.append(subscription.pk)
        elif answer == 410:  # the subscriber says the subscription is gone
            gone.append(subscription.pk)
        elif failure(subscription, answer, now):
            failed.append(subscription)
        else:
            ended.append(subscription)
    mark_delivered(delivered, version, content.etag if content else "", now)
    Subscription.objects.filter(pk__in=gone + [s.pk for s in ended]).delete()
    Subscription.objects.bulk_update(
        failed, ["attempts", "next_attempt_at", "last_error", "claimed_until"])
    report.delivered += len(delivered)
    report.failed += len(failed) + len(ended)
    report.ended += len(ended)
    for subscription in failed:
        logger.info("delivery to %s failed: %s", subscription.callback, subscription.last_error)
    for subscription in ended:
        logger.warning("delivery to %s failed %d times in a row (last: %s): subscription "
                       "ended", subscription.callback, subscription.attempts,
                       subscription.last_error)


def mark_delivered(pks: list[int], version: Version, etag: str, now: datetime) -> None:
    """Subscriptions now at `version` (sent its content, or it has nothing new to send)."""
    Subscription.objects.filter(pk__in=pks).update(
        delivered_modified=version.modified, delivered_seq=version.seq,
        delivered_sealed=version.sealed, delivered_etag=etag, delivered_at=now, attempts=0,
        last_error="", next_attempt_at=now, claimed_until=None)


def failure(subscription: Subscription, answer: int | str, now: datetime) -> bool:
    """Record a failed delivery on the subscription: retried later, with the newest
    content, or (False) the subscription ends after FEEDPUB_WEBSUB_MAX_ATTEMPTS failures
    in a row (the W3C editor's draft lets the hub end it: a callback gone for good would
    otherwise be called until its lease ran out)."""
    subscription.attempts += 1
    subscription.last_error = (f"HTTP {answer}" if isinstance(answer, int) else answer)[:300]
    subscription.claimed_until = None
    subscription.next_attempt_at = now + timedelta(seconds=retry_delay(subscription.attempts))
    return subscription.attempts < settings.FEEDPUB_WEBSUB_MAX_ATTEMPTS


def retry_delay(attempts: int) -> int:
    """Seconds before the next attempt after `attempts` failures in a row: RETRY_SECONDS,
    twice as long each time after, at most MAX_RETRY_DELAY."""
    doublings = min(attempts - 1, 32)  # beyond that the cap holds anyway
    return min(settings.FEEDPUB_WEBSUB_RETRY_SECONDS * 2 ** doublings, MAX_RETRY_DELAY)


def expire_leases() -> int:
    """Forget subscriptions whose lease ran out (one awaiting a renewal waits for it)."""
    count, _ = Subscription.objects.filter(expires_at__lte=timezone.now(), intent="").delete()
    return count
