"""Request counts shared by every process: the API's and the hub's throttles, counted in
Django's default cache (CACHES: the database, or Redis when FEEDPUB_REDIS_URL is set).

DRF's own throttles keep each client's request times in one cache value that they read and
write back: per process with a local cache, and with a shared one two workers would each
write back their own list, losing the other's request. Here a client's requests are counted
in fixed windows (a minute for n/minute) with the cache's `incr`, which Redis does
atomically, and so does the database cache below.

Django's database cache's own `incr` is a get and then a set: two workers counting the
same client at the same moment would both write n + 1, and the set would restart the key's
expiry. Here the row is locked first (FOR UPDATE on PostgreSQL; SQLite's IMMEDIATE
transactions take the write lock when they begin), so concurrent counts queue and none is
lost, and only the value is written.
"""

from __future__ import annotations

import base64
import pickle

from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router, transaction
from rest_framework.throttling import SimpleRateThrottle


class LockingDatabaseCache(DatabaseCache):
    def incr(self, key, delta=1, version=None):
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        table, cache_key, value = (connection.ops.quote_name(name)
                                   for name in (self._table, "cache_key", "value"))
        made_key = self.make_and_validate_key(key, version=version)
        with transaction.atomic(using=database), connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {table} WHERE {cache_key} = %s{lock}",  # noqa: S608
                           [made_key])
            current = self.get(key, self._missing_key, version=version)  # None if expired
            if current is self._missing_key:
                raise ValueError(f"Key {key!r} not found")
            new = current + delta
            # Stored as Django's DatabaseCache stores every value: pickled, in base64.
            encoded = base64.b64encode(pickle.dumps(new, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET {value} = %s WHERE {cache_key} = %s",  # noqa: S608
                           [encoded, made_key])
            return new


class WindowThrottle(SimpleRateThrottle):
    """At most `num_requests` a client in each fixed window of `duration` seconds, counted
    in the shared cache (so a limit holds across every worker and container)."""

    wait_seconds: float | None = None

    def allow_request(self, request, view) -> bool:
        if self.rate is None:
            return True
        client = self.get_cache_key(request, view)
        if client is None:
            return True
        now = self.timer()
        window = int(now // self.duration)
        self.wait_seconds = (window + 1) * self.duration - now
        return self.count(f"{client}:{window}", expires=self.wait_seconds + 1) \
            <= self.num_requests

    def count(self, key: str, *, expires: float) -> int:
        """This request's number in its window: 1 for the first."""
        try:
            return self.cache.incr(key)
        except ValueError:  # the window's first request (or one racing it)
            if self.cache.add(key, 1, timeout=expires):
                return 1
            return self.cache.incr(key)

    def wait(self) -> float | None:
        return self.wait_seconds
