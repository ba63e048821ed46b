"""Request rates per client: anonymous ones by address, the others by user (token).

The rates are read per request from FEEDPUB_API_ANON_RATE and FEEDPUB_API_USER_RATE
(DRF's own DEFAULT_THROTTLE_RATES is bound once, when DRF is imported); None means no
limit. Counts live in Django's default cache: per process unless CACHES names a shared
one, so N web workers allow up to N times the rate.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


class AnonThrottle(AnonRateThrottle):
    def get_rate(self) -> str | None:
        return settings.FEEDPUB_API_ANON_RATE


class UserThrottle(UserRateThrottle):
    def get_rate(self) -> str | None:
        return settings.FEEDPUB_API_USER_RATE

    def get_cache_key(self, request, view) -> str | None:
        # Anonymous clients have their own rate (DRF's would count them here too).
        if not (request.user and request.user.is_authenticated):
            return None
        return super().get_cache_key(request, view)
