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

No request waits long to be counted (FEEDPUB_COUNT_TIMEOUT_MS): Redis has socket timeouts
(CACHES), and a count in the database waits at most that long for its row or SQLite's
write lock (a transaction stuck holding it, a long import on SQLite); past it the request
goes uncounted, as when Redis is away, rather than holding a web worker.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import pickle
import sqlite3
import time
import weakref
from collections.abc import Iterator

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.core.cache.backends.db import DatabaseCache
from django.db import OperationalError, connections, router, transaction
from django.utils import timezone
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock_timeout that ran out

# Seconds a Redis that did not answer is left alone: requests meanwhile go uncounted.
AWAY_SECONDS = 5.0
_redis_away_until: weakref.WeakKeyDictionary[BaseCache, float] = weakref.WeakKeyDictionary()


class CountTimedOut(Exception):
    """A count waited LOCK_TIMEOUT_MS for a lock that another transaction holds."""


class LockingDatabaseCache(DatabaseCache):
    _table: str  # the table's name, set by BaseDatabaseCache (its stubs leave it out)

    def __init__(self, table, params):
        super().__init__(table, params)
        # The longest a count waits for its row (or SQLite's write lock); None: as long as
        # any write does.
        self.lock_timeout_ms: int | None = params.get("OPTIONS", {}).get("LOCK_TIMEOUT_MS")

    def incr(self, key, delta=1, version=None):
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        table, cache_key, value, expires = (connection.ops.quote_name(name) for name in (
            self._table, "cache_key", "value", "expires"))
        read = f"SELECT {value} FROM {table} WHERE {cache_key} = %s AND {expires} > %s"  # noqa: S608
        parameters = [self.make_and_validate_key(key, version=version),
                      connection.ops.adapt_datetimefield_value(
                          timezone.now().replace(microsecond=0))]
        if connection.vendor == "postgresql":  # (SQLite's IMMEDIATE transaction is the lock)
            read += " FOR UPDATE"
            if not connection.in_atomic_block:
                # Committed without waiting for the disk: a count need not survive a crash,
                # and the flush was most of the time a count took. And the row waited for
                # at most the lock timeout (the settings are made as the row is read,
                # before it is locked). Only in a transaction of its own: the settings last
                # to the end of the transaction they are made in.
                made = "set_config('synchronous_commit', 'off', true)"
                if self.lock_timeout_ms:
                    made += ", set_config('lock_timeout', %s, true)"
                    parameters.insert(0, f"{self.lock_timeout_ms}ms")
                read = read.replace(f"SELECT {value}", f"SELECT {value}, {made}", 1)
        with self._bounded_wait(connection), transaction.atomic(using=database), \
                connection.cursor() as cursor:
            cursor.execute(read, parameters)
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key {key!r} not found")
            # Stored as Django's DatabaseCache stores every value: pickled, in base64.
            new = pickle.loads(base64.b64decode(row[0].encode())) + delta  # noqa: S301 (ours)
            encoded = base64.b64encode(pickle.dumps(new, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET {value} = %s WHERE {cache_key} = %s",  # noqa: S608
                           [encoded, parameters[-2]])
            return new

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        """Django's, waiting at most the lock timeout (for a row of the same key that
        another transaction inserted or holds)."""
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        with self._bounded_wait(connection):
            if connection.vendor != "postgresql" or connection.in_atomic_block \
                    or not self.lock_timeout_ms:
                return super().add(key, value, timeout, version)
            with transaction.atomic(using=database), connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)",
                               [f"{self.lock_timeout_ms}ms"])
                return super().add(key, value, timeout, version)

    @contextlib.contextmanager
    def _bounded_wait(self, connection) -> Iterator[None]:
        """Raise CountTimedOut for a wait for a lock past the lock timeout: PostgreSQL's
        lock_timeout (set by the count's own SQL), SQLite's busy timeout (set here, for the
        BEGIN IMMEDIATE that takes the write lock, and put back)."""
        previous = None
        if connection.vendor == "sqlite" and self.lock_timeout_ms \
                and not connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout")
                (previous,) = cursor.fetchone()
                cursor.execute(f"PRAGMA busy_timeout = {int(self.lock_timeout_ms)}")
        try:
            yield
        except OperationalError as error:
            cause = error.__cause__
            if getattr(cause, "sqlstate", None) == LOCK_NOT_AVAILABLE or \
                    getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY:
                raise CountTimedOut(f"waited {self.lock_timeout_ms} ms for a lock") from error
            raise
        finally:
            if previous is not None:
                with connection.cursor() as cursor:
                    cursor.execute(f"PRAGMA busy_timeout = {int(previous)}")


class WindowThrottle(SimpleRateThrottle):
    """At most `num_requests` a client in each fixed window of `duration` seconds, counted
    in the shared cache (so a limit holds across every worker and container)."""

    wait_seconds: float | None = None
    # From the rate, by SimpleRateThrottle.__init__ (its stubs leave them out); None without
    # a rate.
    num_requests: int | None
    duration: int | None

    @property
    def backend(self) -> BaseCache:
        # The backend itself, not DRF's proxy of it (`cache`): Redis's absence is remembered
        # by it.
        return caches[DEFAULT_CACHE_ALIAS]

    def allow_request(self, request, view) -> bool:
        if self.num_requests is None or self.duration is None:  # no rate
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
        reached, or the database's row stays locked past the lock timeout (the request goes
        ahead: losing the rate limit for a while is better than losing the API). Redis is
        given the timeouts of CACHES to answer, and once it has not, it is not asked again
        for AWAY_SECONDS: each request would wait them."""
        cache = self.backend
        if time.monotonic() < _redis_away_until.get(cache, -math.inf):
            return 0
        try:
            try:
                return cache.incr(key)
            except ValueError:  # the window's first request (or one racing it)
                if cache.add(key, 1, timeout=expires):
                    return 1
                return cache.incr(key)  # added meanwhile, by a count that raced this one
        except RedisError as error:
            _redis_away_until[cache] = time.monotonic() + AWAY_SECONDS
            logger.warning("requests not counted for %g s, Redis is unreachable: %s",
                           AWAY_SECONDS, error)
            return 0
        except CountTimedOut as error:  # one client's row, held: the others are counted
            logger.warning("request not counted, its count %s", error)
            return 0
        except ValueError:  # Django's `add` fails silently, here after the lock timeout
            logger.warning("request not counted, its window's count is being added by "
                           "another request")
            return 0

    def wait(self) -> float | None:
        return self.wait_seconds
