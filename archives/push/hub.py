"""WebSub (W3C Recommendation, 2018-01-23): feedpub is the hub of its own topics.

Topics are the kinds of document the registry marks as topics
(archives/documents/kinds.py: today a feed's subscription document, in Atom (/feeds/<slug>/)
or RSS (/feeds/<slug>/rss/), and the linked-pages entry point (/feeds/<slug>/pages/latest),
whose content is the newest linked page); a subscription records the kind's format. Each
names the hub (rel="hub") and itself (rel="self"). A linked page's URL is accepted as a
name of the entry point: a client that discovers the hub by following the entry point's
redirect reads the newest page's `self`, and that is the topic it asks for.

The hub's view only checks a request (`record_request`: 400 with the reason, else 202) and
records the intent; each client address may make FEEDPUB_WEBSUB_RATE of them (429 beyond).
Every call to a callback is the worker's (archives/push/worker.py). Callbacks are checked
here when requested and again, after name resolution, on each connection the worker makes.
Whether private addresses may be called (FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS) is read
here only, when a subscriber asks, and recorded with its subscription: the worker calls it
as the hub promised, whatever the worker's own environment says.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import math
import re
import socket
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import (
    connection,
    transaction,
)
from django.http import HttpRequest, QueryDict
from django.http.request import validate_host
from django.urls import Resolver404, resolve
from django.utils import timezone

from archives.conf import settings
from archives.db.cache import WindowThrottle
from archives.documents import kinds, linked
from archives.models import Feed, Subscription
from archives.parameters import RepeatedParameter, refuse_repeated

logger = logging.getLogger(__name__)

Mode = Subscription.Mode

# A linked page: a name of its feed's entry point (what discovery through the entry point's
# redirect finds as `self`).
LINKED_PAGE = kinds.named("linked-page")
ENTRY_POINT = kinds.by_topic("linked")
MAX_SECRET_BYTES = 199  # "hub.secret ... MUST be less than 200 bytes"
MAX_CALLBACK_BYTES = 2000
HUB_FIELDS = ("hub.mode", "hub.topic", "hub.callback", "hub.lease_seconds", "hub.secret")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
# The hub announces each new intent on this PostgreSQL channel (the worker listens).
INTENTS_CHANNEL = "feedpub_websub"


class HubRequestError(ValueError):
    """A subscription request the hub refuses: its message says why (the 400's body)."""


# Topics -----------------------------------------------------------------------------------

def topic_url(slug: str, format: str) -> str:
    """The URL of a feed's topic in `format` (a topic kind's, archives/documents/kinds.py)."""
    return kinds.by_topic(format).url(slug)


def find_topic(url: str) -> tuple[Feed, str]:
    """The feed and format a topic URL names. Raises HubRequestError."""
    base = settings.FEEDPUB_BASE_URL
    match = kind = feed = None
    if url.startswith(base + "/"):
        try:
            match = resolve(urlsplit(url.removeprefix(base)).path)
        except (Resolver404, ValueError):  # ValueError: a URL urlsplit cannot read
            match = None
    if match is not None and match.namespace == kinds.NAMESPACE:
        kind = kinds.get(match.url_name or "")
    if kind is LINKED_PAGE:
        kind = ENTRY_POINT
    if match is not None and kind is not None and kind.topic:
        feed = Feed.objects.filter(slug=match.kwargs["slug"]).first()
    if match is None or kind is None or feed is None \
            or url not in topic_names(feed, kind.topic, match.kwargs.get("number")):
        raise HubRequestError(
            f"hub.topic {url!r} is not a topic of this hub. Topics are an existing feed's "
            + ", ".join(f"{topic.label} ({topic.url('SLUG').replace('SLUG', '<slug>')})"
                        for topic in kinds.topics())
            + f", and a {LINKED_PAGE.label} names its entry point.")
    return feed, kind.topic


def topic_names(feed: Feed, format: str, page: int | None) -> set[str]:
    """The URLs a request may name the feed's topic by: its own, and for the entry point
    an existing linked page of the feed."""
    names = {topic_url(feed.slug, format)}
    if page is not None and 0 < page <= linked.newest_page(feed):
        names.add(LINKED_PAGE.url(feed.slug, page))
    return names


# The hub: subscription requests -----------------------------------------------------------

class HubThrottle(WindowThrottle):
    """Subscription requests per client address (FEEDPUB_WEBSUB_RATE), counted in the shared
    cache like the API's throttles; the address as they take it (NUM_PROXIES)."""

    scope = "websub"

    def get_rate(self) -> str | None:
        return settings.FEEDPUB_WEBSUB_RATE

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def throttled(request: HttpRequest) -> int | None:
    """Seconds the client must wait before its next request (None: go ahead)."""
    throttle = HubThrottle()
    if throttle.allow_request(request, None):
        return None
    return max(math.ceil(throttle.wait() or 1), 1)


def record_request(data: QueryDict) -> Subscription:
    """Check a subscription request (hub.mode, hub.topic, hub.callback, hub.lease_seconds,
    hub.secret) and record it for the worker to verify. Raises HubRequestError."""
    # A parameter given twice is refused, not resolved (archives/parameters.py).
    try:
        refuse_repeated(data, HUB_FIELDS)
    except RepeatedParameter as error:
        raise HubRequestError(str(error)) from None
    for name in HUB_FIELDS:
        if CONTROL_CHARACTERS.search(data.get(name, "")):
            raise HubRequestError(f"{name} must not contain control characters.")
    mode = data.get("hub.mode", "")
    if mode not in Mode.values:
        raise HubRequestError(f"hub.mode must be subscribe or unsubscribe, not {mode!r}.")
    named_topic = data.get("hub.topic", "")
    feed, format = find_topic(named_topic)
    callback = clean_callback(data.get("hub.callback", ""))
    secret = clean_secret(data.get("hub.secret", ""))
    lease = clean_lease(data.get("hub.lease_seconds", "")) if mode == Mode.SUBSCRIBE else None
    with transaction.atomic():
        subscription, _ = Subscription.objects.select_for_update().get_or_create(
            topic=topic_url(feed.slug, format), callback=callback,
            defaults={"feed": feed, "format": format})
        if subscription.feed_id != feed.pk:
            # A row kept from before a rename: the feed that had this URL then. Its
            # subscription is to a topic gone; this request starts a new one.
            subscription.expires_at = None
        subscription.feed, subscription.format = feed, format
        subscription.intent, subscription.intent_topic = mode, named_topic
        subscription.intent_secret, subscription.intent_lease_seconds = secret, lease
        subscription.intent_at = timezone.now()
        subscription.allow_private_callback = private_callbacks_allowed()
        subscription.save(update_fields=["feed", "format", "expires_at", "intent", "intent_topic",
                                         "intent_secret", "intent_lease_seconds", "intent_at",
                                         "allow_private_callback"])
        announce(INTENTS_CHANNEL, subscription.pk)
    return subscription


_url_validator = URLValidator(schemes=["http", "https"])


def clean_callback(url: str) -> str:
    if not url:
        raise HubRequestError("hub.callback is missing.")
    try:
        _url_validator(url)
        host, _ = urlsplit(url).hostname, urlsplit(url).port  # port: ValueError if bad
    except (ValidationError, ValueError):
        raise HubRequestError(f"hub.callback {url!r} is not an absolute http(s) URL with a "
                              f"valid host and port.") from None
    if len(url.encode()) > MAX_CALLBACK_BYTES:
        raise HubRequestError(f"hub.callback is longer than {MAX_CALLBACK_BYTES} bytes.")
    if not callback_allowed(url):
        raise HubRequestError(f"This hub does not call back {host!r} "
                              f"(hosts it calls: FEEDPUB_WEBSUB_CALLBACK_HOSTS).")
    if not private_callbacks_allowed() and not is_public(host or "", literal_only=True):
        raise HubRequestError(f"This hub does not call back {host!r}: not a public address "
                              f"(FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS).")
    return url


def callback_allowed(url: str) -> bool:
    """Whether FEEDPUB_WEBSUB_CALLBACK_HOSTS admits the callback's host (ALLOWED_HOSTS
    patterns). Checked on each request and again before each call: the setting may have
    narrowed since the subscription was made."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and validate_host(host, settings.FEEDPUB_WEBSUB_CALLBACK_HOSTS)


def private_callbacks_allowed() -> bool:
    """FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS, as the hub reads it for each request and
    records it with the subscription (`Subscription.allow_private_callback`): one process's
    setting, so a worker configured otherwise never refuses what the hub accepted."""
    return settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS


def is_public(host: str, *, literal_only: bool = False) -> bool:
    """Whether `host`, an IP address, is a public one. With `literal_only`, a name passes
    (its addresses are checked when it is connected to)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 scope is no part
    except ValueError:
        return literal_only
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    # is_global leaves out loopback, private, link-local, reserved and shared addresses;
    # multicast ones count as global there.
    return address.is_global and not address.is_multicast


def public_socket(addr_info) -> socket.socket:
    """aiohttp's socket factory for the callbacks of subscriptions that may not be called
    at private addresses: called for each address a callback's name resolved to, right
    before connecting, so a name that resolves (or rebinds) to a private address is
    refused as well as a literal one."""
    family, type_, proto, _, address = addr_info
    if not is_public(address[0]):
        raise OSError(errno.EACCES, f"{address[0]} is not a public address "
                                    f"(FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS)")
    return socket.socket(family=family, type=type_, proto=proto)


def clean_secret(secret: str) -> str:
    if len(secret.encode()) > MAX_SECRET_BYTES:
        raise HubRequestError(f"hub.secret must be less than {MAX_SECRET_BYTES + 1} bytes.")
    return secret


def clean_lease(value: str) -> int:
    """The lease granted: the one asked for, brought within the range this hub grants
    (WebSub lets the hub choose; the verification tells the subscriber which)."""
    if not value:
        return settings.FEEDPUB_WEBSUB_LEASE_SECONDS
    if not re.fullmatch(r"[0-9]+", value):
        raise HubRequestError(f"hub.lease_seconds must be a whole number of seconds, "
                              f"not {value!r}.")
    low, high = (settings.FEEDPUB_WEBSUB_MIN_LEASE_SECONDS,
                 settings.FEEDPUB_WEBSUB_MAX_LEASE_SECONDS)
    return high if len(value) > 12 else min(max(int(value), low), high)


def announce(channel: str, payload: int) -> None:
    """NOTIFY `channel` when the transaction commits (PostgreSQL); elsewhere the worker
    finds the change by polling."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel, str(payload)])
