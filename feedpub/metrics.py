"""`/metrics`: what an operator watches, in Prometheus's text format (prometheus-client).

Two kinds of figures (docs/operating/metrics.md says what each means):

- Counted by the process that serves requests: requests by view, method and status, and
  their durations (RequestMetrics, the outermost middleware), and the long polls held
  (archives/serving/longpoll.py). Under gunicorn each worker counts its own; prometheus-
  client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, which deploy/gunicorn.conf.py sets)
  keeps every worker's values in files of one directory, and a scrape, whichever worker
  answers it, adds them up.
- Read from the database at each scrape (DatabaseCollector): per feed, the entries not
  sealed and how long its oldest full page has waited for its seal; the pages waiting for
  their export; WebSub's subscriptions and deliveries; the sealer's last pass. Nothing of
  them is kept in memory, so every worker, container and restart answers the same, and a
  scrape costs QUERIES queries however many feeds there are.

Open to loopback and to the networks FEEDPUB_METRICS_NETWORKS names (none by default), others
only with `Authorization: Bearer <FEEDPUB_METRICS_TOKEN>`. Not to every private address: a
host's client through Docker's published port arrives as the bridge's gateway, and every
client behind a TLS terminator nobody declared as the terminator, both private. The client's
address is the one the API's rates count (FEEDPUB_API_PROXIES entries from the end of
X-Forwarded-For): behind the deploy's nginx, the address nginx saw, never nginx's own.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import time

from django.db.models import BigIntegerField, Count, Min, OuterRef, Q, Subquery
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from rest_framework.throttling import BaseThrottle

from archives.conf import settings
from archives.models import NEEDS_SEALING, Entry, Feed, Heartbeat, Subscription
from archives.push.subscriptions import FEED_VERSION, behind
from archives.storage.export import pending

# Requests ------------------------------------------------------------------------------

# Labelled by the URL pattern's name (archives:subscription), never the path: a series per
# view, not one per feed, page and record. A request no pattern matched (a 404, or one a
# middleware answered first: an https redirect, a 503) is "unresolved".
REQUESTS = Counter("feedpub_http_requests", "HTTP requests answered, by view, method and "
                   "status.", ["view", "method", "status"])
DURATION = Histogram("feedpub_http_request_duration_seconds", "Time to answer a request "
                     "(until a streamed answer starts), by view.", ["view"],
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# Any token is a method to HTTP: the others are counted as one.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetrics:
    """Counts and times every request (first in MIDDLEWARE, so that it sees every answer,
    the other middlewares' too)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        view = match.view_name if match is not None else "unresolved"
        method = request.method if request.method in METHODS else "other"
        DURATION.labels(view).observe(time.perf_counter() - started)
        REQUESTS.labels(view, method, str(response.status_code)).inc()
        return response


# What the database says ----------------------------------------------------------------

# Queries a scrape makes: feeds (2), pages to export (1), WebSub (1), the sealer (1).
QUERIES = 5


class DatabaseCollector:
    """Gauges computed at each scrape, each by one query that an index serves or that reads
    one row per feed or subscription (prometheus-client's custom collector)."""

    def collect(self):
        now = timezone.now()
        yield from feed_gauges(now)
        if settings.FEEDPUB_EXPORT_PAGES:
            yield from export_gauges(now)
        yield from websub_gauges(now)
        yield from sealer_gauges()


def feed_gauges(now):
    unsealed = GaugeMetricFamily(
        "feedpub_feed_unsealed_entries", "Entries of the feed not in a sealed archive page "
        "(in its subscription document).", labels=["feed"])
    lag = GaugeMetricFamily(
        "feedpub_feed_seal_lag_seconds", "How long the feed's oldest full page not sealed yet "
        "has been full (since the entry that filled it); 0 when none waits.", labels=["feed"])
    # The entry that filled page sealed_pages + 1, for the feeds that have such a page (the
    # partial index feed_needs_sealing), each found by the (feed, seq) index.
    filling = Entry.objects.filter(
        feed=OuterRef("pk"),
        seq=(Cast(OuterRef("sealed_pages"), BigIntegerField()) + 1) * OuterRef("page_size"))
    full_since = dict(Feed.objects.filter(Q(NEEDS_SEALING)).order_by().values_list(
        "pk", Subquery(filling.order_by().values("updated")[:1])))
    for pk, slug, last_seq, sealed_pages, page_size in Feed.objects.order_by("slug").values_list(
            "pk", "slug", "last_seq", "sealed_pages", "page_size"):
        unsealed.add_metric([slug], last_seq - sealed_pages * page_size)
        filled = full_since.get(pk)
        lag.add_metric([slug], max(0.0, (now - filled).total_seconds()) if filled else 0.0)
    yield unsealed
    yield lag


def export_gauges(now):
    """The pages whose current version is not in the `feedpub_pages` storage yet, settled or
    not (export.pending's query, counted on its partial index page_not_exported)."""
    backlog = pending(settled=False).order_by().aggregate(pages=Count("pk"),
                                                          oldest=Min("modified"))
    yield GaugeMetricFamily("feedpub_export_pages_pending", "Sealed pages (or new versions "
                            "of them) not exported yet.", value=backlog["pages"])
    oldest = backlog["oldest"]
    yield GaugeMetricFamily(
        "feedpub_export_oldest_pending_seconds", "How long the oldest page not exported has "
        "waited since it changed; 0 when none waits.",
        value=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)


def websub_gauges(now):
    active = Q(expires_at__gt=now)
    counts = Subscription.objects.aggregate(
        active=Count("pk", filter=active),
        verifying=Count("pk", filter=~Q(intent="")),
        pending=Count("pk", filter=active & Q(feed__isnull=False) & behind(*FEED_VERSION)),
        failing=Count("pk", filter=active & Q(attempts__gt=0)))
    subscriptions = GaugeMetricFamily(
        "feedpub_websub_subscriptions", "WebSub subscriptions: active (verified, lease not "
        "expired) and verifying (a request awaiting its callback's confirmation).",
        labels=["state"])
    subscriptions.add_metric(["active"], counts["active"])
    subscriptions.add_metric(["verifying"], counts["verifying"])
    yield subscriptions
    yield GaugeMetricFamily("feedpub_websub_deliveries_pending", "Active subscriptions not "
                            "yet sent their feed's current version.", value=counts["pending"])
    yield GaugeMetricFamily("feedpub_websub_deliveries_failing", "Active subscriptions whose "
                            "last delivery failed (retried later; ended after "
                            "FEEDPUB_WEBSUB_MAX_ATTEMPTS failures in a row).",
                            value=counts["failing"])


def sealer_gauges():
    last = Heartbeat.objects.filter(name="sealer").values_list("at", flat=True).first()
    if last is not None:  # no series before a sealer's first pass: `absent()` says so
        yield GaugeMetricFamily("feedpub_sealer_last_pass_timestamp_seconds", "When a sealer "
                                "(seal_archives --watch) last completed a pass, in Unix "
                                "time.", value=last.timestamp())


# The view ------------------------------------------------------------------------------

def client_address(request: HttpRequest) -> str:
    """The client's address as the API's rates take it (archives/api/throttling.py): the
    X-Forwarded-For entry FEEDPUB_API_PROXIES from the end, else the peer's address."""
    # (It reads only META, which a plain HttpRequest has as DRF's Request does.)
    return BaseThrottle().get_ident(request)  # type: ignore[arg-type]


def may_scrape_without_token(address: str) -> bool:
    """Loopback, or in a network FEEDPUB_METRICS_NETWORKS names."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False  # not an address (a header a client wrote): refused
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or any(ip in network for network in settings.FEEDPUB_METRICS_NETWORKS
                                 if network.version == ip.version)


def has_token(request: HttpRequest) -> bool:
    token = settings.FEEDPUB_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode())


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the client may read the metrics; else the answer that says why not."""
    # Both the peer and the client it forwards for: a client that reaches gunicorn itself
    # writes X-Forwarded-For as it likes (`127.0.0.1`), and nginx on the same host as the
    # app is a loopback peer for every client.
    addresses = (request.META.get("REMOTE_ADDR", ""), client_address(request))
    if all(map(may_scrape_without_token, addresses)) or has_token(request):
        return None
    if not settings.FEEDPUB_METRICS_TOKEN:
        return HttpResponse("/metrics answers loopback and FEEDPUB_METRICS_NETWORKS only "
                            "(FEEDPUB_METRICS_TOKEN is not set)\n", status=403,
                            content_type="text/plain")
    response = HttpResponse("/metrics needs Authorization: Bearer <FEEDPUB_METRICS_TOKEN> "
                            "from this address\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="feedpub metrics"'
    return response


class _Counted:
    """The process's own metrics (a custom collector over the client's registry)."""

    def collect(self):
        return REGISTRY.collect()


def registry() -> CollectorRegistry:
    """A scrape's registry: every worker's counts and the database's gauges."""
    scrape = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(scrape)  # every worker's files, added up
    else:
        scrape.register(_Counted())
    scrape.register(DatabaseCollector())
    return scrape


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(registry()), content_type=content_type)
