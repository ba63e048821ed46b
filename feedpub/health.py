"""`/healthz`: is this process able to answer? It asks the database, the one thing it needs.

For load balancers, Docker health checks and uptime monitors: 200 "ok" and the release and
commit that answer ("ok feedpub 0.4.0 (commit ad86d2ba3c95)": after an upgrade, which code is
serving; feedpub/release.py) when a trivial query
succeeds, 503 otherwise, never cached. It sits outside the archives app so that a broken
feed never makes a whole web container look dead.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from feedpub.reconnect import close_lost_connections
from feedpub.release import described

logger = logging.getLogger(__name__)


@never_cache
@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    for attempt in (1, 2):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
            break
        except DatabaseError:
            # A connection kept from an earlier request and lost since (a database restart):
            # the process is healthy if a new one answers (feedpub/reconnect.py).
            if attempt == 1 and close_lost_connections(check=False):
                continue
            logger.exception("health check: the database does not answer")
            return HttpResponse("database unavailable\n", status=503,
                                content_type="text/plain")
    return HttpResponse(f"ok feedpub {described()}\n", content_type="text/plain")
