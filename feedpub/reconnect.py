"""A lost database connection is never a 500: readers are answered from a fresh one, and a
request that cannot reach the database at all gets 503 with Retry-After.

Each web worker keeps its connection between requests (CONN_MAX_AGE), and learns that it
died (a failover, a restart, pg_terminate_backend) only when a request uses it: that
request failed, a 500 for feeds and pages and a 503 for the API, on every worker in turn,
even once the database was back. Now:

- A safe request (GET, HEAD, OPTIONS) that fails because the database is unavailable is
  run once more, on a connection that works (the lost one closed, or the one Django opened
  as it left the failed transaction): it changed nothing, so running it again is harmless.
- Any other request checks its connection before it runs, rather than being retried: a
  write may have been applied before the connection died, and must not be applied twice.
  On PostgreSQL a round trip only when the socket shows a sign of loss (a server that
  ends a connection says so on it): the round trip on every write was ~220 us of a PUT.
  A connection cut without a word (no FIN) is then found by the write itself: a 503.
- A request that still cannot reach the database gets 503 with Retry-After and no-store,
  in a short JSON body for the API and clients that prefer JSON, plain text otherwise.
  The same comes from handler500 when the database is lost outside a view (a middleware).

Django's CONN_HEALTH_CHECKS would check every request's connection instead: one more
round trip for every poll, which the retry of a safe request does without.
"""

from __future__ import annotations

import logging
import sys

from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

from archives.api import exceptions as api_errors
from archives.db import django_internals
from archives.serving.negotiation import json_error, preferred_format

logger = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DETAIL = "The database is unavailable; try again shortly."
# The request's mark, in its META (the environ, which is the request's own), once it has
# been run again: it is not run a third time.
RETRIED = "feedpub.retried"


class ReconnectMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in SAFE_METHODS:
            close_lost_connections(check=True)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not isinstance(exception, api_errors.DATABASE_DOWN):
            return None
        match = request.resolver_match  # (a view's exception: its URL was resolved)
        if request.method in SAFE_METHODS and not request.META.get(RETRIED) \
                and match is not None and close_lost_connections(check=True) is not None:
            request.META[RETRIED] = True
            logger.warning("%s %s: the database connection failed (%s); retrying on a new one",
                           request.method, request.path, exception)
            try:
                return match.func(request, *match.args, **match.kwargs)
            except api_errors.DATABASE_DOWN as again:
                exception = again
        logger.error("%s %s failed: the database is unavailable", request.method,
                     request.path, exc_info=exception)
        return unavailable(request)


def close_lost_connections(*, check: bool) -> int | None:
    """Close the kept connections that no longer work (those that had errors; with
    `check`, every one, asked with a round trip); how many. None inside a transaction,
    which must not go on on another connection."""
    closed = 0
    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block:
            return None
        if django_internals.connection_lost(connection, check=check):
            connection.close()
            closed += 1
    return closed


def unavailable(request: HttpRequest) -> HttpResponse:
    """503, Retry-After, never stored: JSON for the API and clients preferring it."""
    if request.path_info.startswith(api_errors.API_PREFIX) or \
            preferred_format(request.headers.get("Accept", ""), ("json",)) == "json":
        response: HttpResponse = json_error(503, DETAIL)
    else:
        response = HttpResponse(f"{DETAIL}\n", status=503, content_type="text/plain")
    response["Retry-After"] = str(api_errors.RETRY_AFTER_SECONDS)
    add_never_cache_headers(response)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: Django calls it inside its `except` block, so the exception is at hand;
    a lost database is a 503, anything else the API's or Django's 500."""
    if isinstance(sys.exc_info()[1], api_errors.DATABASE_DOWN):
        return unavailable(request)
    return api_errors.server_error(request)
