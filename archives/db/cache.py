"""Request counts shared by every process: the API's and the hub's throttles, counted in
Django's default cache (CACHES: the database, or Redis when FEEDPUB_REDIS_URL is set).

DRF's own throttles keep each client's request times in one cache value that they read and
write back: per process with a local cache, and with a shared one two workers would each
write back their own list, losing the other's request. Here a client's requests are counted
in fixed windows (a minute for n/minute) with the cache's `incr`, which Redis does
atomically, and so does the database cache below.

Django's database cache's own `incr` is a get and then a set: two workers counting the
same client at the same moment would both write n + 1, and the set would restart the key's
expiry. Here the row is read locked (FOR UPDATE on PostgreSQL; SQLite's IMMEDIATE
transactions take the write lock when they begin), so concurrent counts queue and none is
lost, and only the value is written: four round trips, without waiting for the disk.
"""

from __future__ import annotations

import base64
import logging
import math
import pickle
import time
import weakref

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router, transaction
from django.utils import timezone
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

# Seconds a Redis that did not answer is left alone: requests meanwhile go uncounted.
AWAY_SECONDS = 5.0
_redis_away_until: weakref.WeakKeyDictionary[BaseCache, float] = weakref.WeakKeyDictionary()


class LockingDatabaseCache(DatabaseCache):
    def incr(self, key, delta=1, version=None):
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        table, cache_key, value, expires = (connection.ops.quote_name(name) for name in (
            self._table, "cache_key", "value", "expires"))
        read = f"SELECT {value} FROM {table} WHERE {cache_key} = %s AND {expires} > %s"  # noqa: S608
        if connection.vendor == "postgresql":  # (SQLite's IMMEDIATE transaction is the lock)
            read += " FOR UPDATE"
            if not connection.in_atomic_block:
                # Committed without waiting for the disk: a count need not survive a crash,
                # and the flush was most of the time a count took. Only in a transaction of
                # its own: the setting lasts to the end of the transaction it is made in.
                read = read.replace(f"SELECT {value}", f"SELECT {value}, "
                                    "set_config('synchronous_commit', 'off', true)", 1)
        made_key = self.make_and_validate_key(key, version=version)
        now = connection.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0))
        with transaction.atomic(using=database), connection.cursor() as cursor:
            cursor.execute(read, [made_key, now])
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key {key!r} not found")
            # Stored as Django's DatabaseCache stores every value: pickled, in base64.
            new = pickle.loads(base64.b64decode(row[0].encode())) + delta  # noqa: S301 (ours)
            encoded = base64.b64encode(pickle.dumps(new, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET {value} = %s WHERE {cache_key} = %s",  # noqa: S608
                           [encoded, made_key])
            return new


class WindowThrottle(SimpleRateThrottle):
    """At most `num_requests` a client in each fixed window of `duration` seconds, counted
    in the shared cache (so a limit holds across every worker and container)."""

    wait_seconds: float | None = None

    @property
    def cache(self) -> BaseCache:
        # The backend itself, not DRF's proxy of it: Redis's absence is remembered by it.
        return caches[DEFAULT_CACHE_ALIAS]

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
        """This request's number in its window: 1 for the first; 0 when Redis cannot be
        reached (the request goes ahead: losing the rate limit for a while is better than
        losing the API). Redis is given the timeouts of CACHES to answer, and once it has
        not, it is not asked again for AWAY_SECONDS: each request would wait them."""
        cache = self.cache
        if time.monotonic() < _redis_away_until.get(cache, -math.inf):
            return 0
        try:
            try:
                return cache.incr(key)
            except ValueError:  # the window's first request (or one racing it)
                if cache.add(key, 1, timeout=expires):
                    return 1
                return cache.incr(key)
        except RedisError as error:
            _redis_away_until[cache] = time.monotonic() + AWAY_SECONDS
            logger.warning("requests not counted for %g s, Redis is unreachable: %s",
                           AWAY_SECONDS, error)
            return 0

    def wait(self) -> float | None:
        return self.wait_seconds
