"""`/healthz`: is this process able to answer? It asks the database, the one thing it needs.

For load balancers, Docker health checks and uptime monitors: 200 "ok" when a trivial query
succeeds, 503 otherwise, never cached. It sits outside the archives app so that a broken
feed never makes a whole web container look dead.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

logger = logging.getLogger(__name__)


@never_cache
@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        logger.exception("health check: the database does not answer")
        return HttpResponse("database unavailable\n", status=503, content_type="text/plain")
    return HttpResponse("ok\n", content_type="text/plain")
