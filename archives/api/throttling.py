"""Request rates per client: anonymous ones by address, the others by user (token).

The rates are read per request from FEEDPUB_API_ANON_RATE and FEEDPUB_API_USER_RATE
(DRF's own DEFAULT_THROTTLE_RATES is bound once, when DRF is imported); None means no
limit. Counts live in the shared cache (archives/db/cache.py), so a rate holds for a client
however many web workers and containers serve it.
"""

from __future__ import annotations

from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from archives.conf import settings
from archives.db.cache import WindowThrottle


class AnonThrottle(WindowThrottle, AnonRateThrottle):
    def get_rate(self) -> str | None:
        return settings.FEEDPUB_API_ANON_RATE


class UserThrottle(WindowThrottle, UserRateThrottle):
    def get_rate(self) -> str | None:
        return settings.FEEDPUB_API_USER_RATE

    def get_cache_key(self, request, view) -> str | None:
        # Anonymous clients have their own rate (DRF's would count them here too).
        if not (request.user and request.user.is_authenticated):
            return None
        return super().get_cache_key(request, view)
