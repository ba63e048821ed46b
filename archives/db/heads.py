"""Feeds' heads kept in each process's memory, so that a poll that finds nothing new costs
no database round trip, and yet sees every committed write (docs/how-it-works/invariants.md#scale).

A feed's head is its Feed row: every feed-level document's ETag, Last-Modified and links
follow from it (documents.FeedDocument). Each process keeps the heads it served, up to
FEEDPUB_HEADS_CACHE_SIZE of them (the least recently used go first), and trusts them only
while it LISTENs on PostgreSQL's `feedpub_changes` channel. Every write that changes what
a feed's documents show calls `announce(feed.pk)` inside its transaction, which sends
`NOTIFY feedpub_changes, '<pk>'`: PostgreSQL delivers it to every listener when, and only
if, the transaction commits. A daemon thread with a connection of its own reads the row
again on each notification (one query per change and process, not one per poll), and
forgets every head whenever it is not listening: a notification sent while it was
disconnected is lost to it. On SQLite, while the listener is not listening, and inside a
transaction (whose reads may not be committed), heads are read from the database as before.

How stale a poll can be: from a write's commit to the listener's refreshed row, the
notification's delivery plus one indexed read, a few milliseconds on one host
(bench/README.md measures it). And never more than the lease, whatever happens to the
listener: it makes a round trip every ROUND seconds, whose answer comes after every
notification of a commit made before it was sent; once it has handled those, heads are
trusted for lease() seconds from the moment that round trip began (half of
FEEDPUB_LAST_MODIFIED_SETTLE). A listener that stalls, or whose connection dies without a
word, stops renewing it, and polls read the database within the lease. That keeps the
promise archives/documents/base.py's Last-Modified rests on: a change is visible within
SETTLE seconds of its stamp, leaving the other half for the refresh and the response.

Why each rule holds (tests/test_heads.py exercises each on PostgreSQL):
- A head read by a poll is stored only if no notification for that feed arrived since the
  read began (and the listener did not reconnect): a row read just before a commit whose
  notification was handled while the feed was not cached would otherwise stay.
- Reads that miss fly together: while one read of a slug is under way, other polls of it
  wait for its row instead of each opening a connection (a burst of first polls), and take
  it only if it is still within the lease and no notification for that feed came since.
- Inside a transaction nothing is read from memory nor kept: the transaction may have
  written the feed itself, or may roll back what it wrote.
- A head is never replaced by an older one (by last_seq, sealed_pages and the documents'
  modification times), whoever stores it.
- Heads are kept by slug and by pk: a renamed feed's old slug goes with the notification of
  the rename, a deleted feed's head with that of the deletion.
- The listener starts lazily, in the process that polls (a gunicorn worker after the fork,
  never its master), and a forked child starts with an empty, non-listening copy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial

from django.db import connection, connections, transaction

from archives.conf import settings
from archives.models import Feed

from . import fastsql

logger = logging.getLogger(__name__)

CHANNEL = "feedpub_changes"
# Seconds between two round trips of the listener, each of which renews the lease (and is
# the longest it blocks before it looks at `stop`).
ROUND = 0.25
# How many feeds' latest notifications are remembered for the reads under way; a feed
# forgotten counts as notified when the oldest remembered one was.
NOTIFIED_KEPT = 4096
# libpq options of the listener's connection: a peer that vanished without closing is
# noticed after ~11 s of silence (keepalives) or 10 s of unacknowledged data.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": 10_000}

Listener = Callable[[frozenset[int] | None], None]


def lease() -> float:
    """Seconds heads stay trusted after the start of the listener's last round trip."""
    return settings.FEEDPUB_LAST_MODIFIED_SETTLE / 2


def announce(feed_id: int) -> None:
    """Tell every process that feed `feed_id`'s head changed, once the current
    transaction commits (nothing if it rolls back). Call it inside the writing
    transaction, after the write."""
    if connection.vendor != "postgresql":
        return  # SQLite: no process keeps heads (see Heads.enabled)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(feed_id)])
    # This process sees its own write at once, before its notification comes back.
    transaction.on_commit(partial(heads.forget, feed_id))


def version(feed: Feed) -> tuple:
    """Orders two reads of one feed's row: each write moves last_seq, each seal
    sealed_pages, and every change moves subscription_modified forward (or keeps it)."""
    return (feed.last_seq, feed.sealed_pages, feed.subscription_modified,
            feed.description_modified)


class _Flight:
    """One read of a slug from the database, which other polls of it may wait for."""

    def __init__(self, token: tuple[int, int]):
        self.token = token  # (epoch, notifications) when it began
        self.began = time.monotonic()
        self.done = threading.Event()
        self.waiting = 0  # polls waiting for it
        self.head: Feed | None = None
        self.missing = False  # no such feed


class Heads:
    """The heads of up to FEEDPUB_HEADS_CACHE_SIZE feeds, by slug; safe across threads.

    Heads are shared Feed instances: read them, never change them."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._listening_changed = threading.Condition(self._lock)
        self._by_slug: OrderedDict[str, Feed] = OrderedDict()
        self._slug_by_pk: dict[int, str] = {}
        self._memos: dict[int, dict] = {}  # by pk, for the head kept now
        self._changes = 0  # notifications received, and local forgets
        # The count above when each feed was last notified (its latest NOTIFIED_KEPT), and
        # when the feeds not remembered may have been.
        self._notified: OrderedDict[int, int] = OrderedDict()
        self._notified_floor = 0
        self._flights: dict[str, _Flight] = {}  # reads under way, by slug
        self._epoch = 0  # moves whenever listening starts or stops
        self.listening = False
        self._renewed = -math.inf  # when the last round trip that renewed the lease began
        self.backend_pid: int | None = None  # the listener's, on the server
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._callbacks: list[Listener] = []

    # Reading --------------------------------------------------------------------------

    @staticmethod
    def enabled() -> bool:
        return settings.FEEDPUB_HEADS_CACHE_SIZE > 0 and connection.vendor == "postgresql"

    @staticmethod
    def reads_committed() -> bool:
        """Whether a read now sees only committed rows: not inside a transaction, which
        may roll back what it wrote (tests run in one)."""
        return not connection.in_atomic_block

    def trusted(self) -> bool:
        """Whether heads in memory are true now: listening, within the lease."""
        with self._lock:
            return self._trusted()

    def _trusted(self) -> bool:
        return self.listening and time.monotonic() - self._renewed < lease()

    def feed_by_slug(self, slug: str) -> Feed:
        """The feed's head: from memory while trusted, else from the database (and then
        kept, if read outside a transaction). Raises Feed.DoesNotExist."""
        if not self.enabled() or not self.reads_committed():
            return fastsql.feed_by_slug(slug)
        if self._thread is None:
            self.start()
        with self._lock:
            if self._trusted():
                head = self._by_slug.get(slug)
                if head is not None:
                    self._by_slug.move_to_end(slug)
                    return head
            flight = self._flights.get(slug) if self.listening else None
            leading = flight is None and self.listening
            if leading:
                flight = self._flights[slug] = _Flight((self._epoch, self._changes))
            elif flight is not None:
                flight.waiting += 1
        if flight is None:  # not listening: nothing to keep, nobody to wait for
            return fastsql.feed_by_slug(slug)
        return self._fly(slug, flight) if leading else self._join(slug, flight)

    def _fly(self, slug: str, flight: _Flight) -> Feed:
        """Read the slug's row for the polls waiting on `flight`, and keep it if no
        notification for it came meanwhile."""
        try:
            flight.head = fastsql.feed_by_slug(slug)
        except Feed.DoesNotExist:
            flight.missing = True
            raise
        finally:
            with self._lock:
                if self._flights.get(slug) is flight:
                    del self._flights[slug]
                if flight.head is not None and self._unchanged_since(flight.token,
                                                                     flight.head.pk):
                    self._store(flight.head)
            flight.done.set()
        return flight.head

    def _join(self, slug: str, flight: _Flight) -> Feed:
        """The row of the read under way, if it comes within the lease and no
        notification for its feed came since it began; else a read of one's own."""
        flight.done.wait(max(0.0, flight.began + lease() - time.monotonic()))
        with self._lock:
            fresh = flight.done.is_set() and time.monotonic() - flight.began < lease()
            if fresh and flight.missing and flight.token[0] == self._epoch:
                raise Feed.DoesNotExist(f"no feed {slug!r}")
            if fresh and flight.head is not None and \
                    self._unchanged_since(flight.token, flight.head.pk):
                return flight.head
        return fastsql.feed_by_slug(slug)

    def cached(self, slug: str) -> Feed | None:
        """The feed's head if it is in memory and trusted; never queries."""
        with self._lock:
            return self._by_slug.get(slug) if self._trusted() else None

    def memo(self, head: Feed) -> dict | None:
        """A dict for values derived from `head` alone (a document's ETag and headers),
        which live as long as the head is kept; None for a feed row not kept here (a
        caller's own instance may change under it)."""
        with self._lock:
            if self._by_slug.get(head.slug) is not head:
                return None
            return self._memos.setdefault(head.pk, {})

    def forget(self, feed_id: int) -> None:
        with self._lock:
            self._notify(feed_id)
            self._drop(feed_id)

    def __len__(self) -> int:
        return len(self._by_slug)

    # Keeping (under the lock) ----------------------------------------------------------

    def _notify(self, feed_id: int) -> None:
        """Feed `feed_id` changed: a read of it under way must not be kept."""
        self._changes += 1
        self._notified[feed_id] = self._changes
        self._notified.move_to_end(feed_id)
        while len(self._notified) > NOTIFIED_KEPT:
            _, self._notified_floor = self._notified.popitem(last=False)

    def _unchanged_since(self, token: tuple[int, int], feed_id: int) -> bool:
        """Whether no notification for `feed_id` came since `token` was taken, while
        listening all along."""
        epoch, changes = token
        return (self.listening and self._epoch == epoch
                and self._notified.get(feed_id, self._notified_floor) <= changes)

    def _store(self, head: Feed) -> None:
        old_slug = self._slug_by_pk.get(head.pk)
        if old_slug is not None and old_slug != head.slug:
            del self._by_slug[old_slug]  # renamed
        current = self._by_slug.get(head.slug)
        if current is not None and current.pk != head.pk:
            del self._slug_by_pk[current.pk]  # that feed was renamed away, or deleted
            self._memos.pop(current.pk, None)
        elif current is not None and version(current) > version(head):
            return  # never an older row over a newer one
        self._by_slug[head.slug] = head
        self._by_slug.move_to_end(head.slug)
        self._slug_by_pk[head.pk] = head.slug
        self._memos.pop(head.pk, None)  # derived from the row it replaces
        while len(self._by_slug) > settings.FEEDPUB_HEADS_CACHE_SIZE:
            _, evicted = self._by_slug.popitem(last=False)
            del self._slug_by_pk[evicted.pk]
            self._memos.pop(evicted.pk, None)

    def _drop(self, feed_id: int) -> None:
        self._memos.pop(feed_id, None)
        slug = self._slug_by_pk.pop(feed_id, None)
        if slug is not None:
            del self._by_slug[slug]

    def _set_listening(self, listening: bool) -> None:
        with self._lock:
            self._by_slug.clear()
            self._slug_by_pk.clear()
            self._memos.clear()
            self._notified.clear()
            self._notified_floor = self._changes
            self._epoch += 1
            self.listening = listening
            self._renewed = -math.inf  # trusted from the first round trip on
            self._listening_changed.notify_all()

    def _renew(self, began: float) -> None:
        """Every notification of a commit made before `began` is handled."""
        with self._lock:
            self._renewed = began
            self._listening_changed.notify_all()

    # The listener ----------------------------------------------------------------------

    def start(self) -> None:
        """Start listening, in a daemon thread (once per process)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="feedpub-heads",
                                            daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and forget every head (tests; a process that ends need not)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=10)
        self._thread = None
        self._stop = threading.Event()

    def wait_until_listening(self, timeout: float) -> bool:
        """Wait until heads are trusted (listening, the lease renewed)."""
        with self._lock:
            return self._listening_changed.wait_for(self._trusted, timeout)

    def subscribe(self, callback: Listener) -> None:
        """Call `callback` in the listener's thread with the pks of feeds whose heads
        changed (after they are refreshed), or None when any may have (the listener
        started or stopped listening: notifications may have been missed)."""
        self._callbacks.append(callback)

    def unsubscribe(self, callback: Listener) -> None:
        self._callbacks.remove(callback)

    def _tell(self, changed: frozenset[int] | None) -> None:
        for callback in list(self._callbacks):
            try:
                callback(changed)
            except Exception:
                logger.exception("a heads listener failed")

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            db = None
            try:
                db = self._connect()
                self._set_listening(True)
                logger.info("listening on %s", CHANNEL)
                self._tell(None)
                delay = 0.5
                self._listen(db)
            except Exception as error:
                if not self._stop.is_set():
                    logger.warning("not listening on %s (%s); polls read the database",
                                   CHANNEL, error)
            finally:
                was_listening = self.listening
                self._set_listening(False)
                if was_listening:
                    self._tell(None)
                if db is not None:
                    with contextlib.suppress(Exception):  # a dead one: nothing to close
                        db.close()
            self._stop.wait(delay)
            delay = min(delay * 2, 10.0)

    def _connect(self):
        """A connection of the listener's own (not any request's), LISTENing."""
        alias = "default"
        base = connections.settings[alias]
        # Never from a pool (OPTIONS "pool"): LISTEN would go back to it with the connection.
        options = {**KEEPALIVES, **base.get("OPTIONS", {})}
        options.pop("pool", None)
        db = type(connections[alias])({**base, "OPTIONS": options}, alias)
        try:
            with db.cursor() as cursor:  # autocommit, as Django's connections are
                cursor.execute(f"LISTEN {CHANNEL}")
        except Exception:
            with contextlib.suppress(Exception):
                db.close()
            raise
        self.backend_pid = db.connection.info.backend_pid
        return db

    def _listen(self, db) -> None:
        raw = db.connection
        while not self._stop.is_set():
            began = time.monotonic()
            self._round_trip(db)
            # Received during the round trip (psycopg keeps them): every commit before
            # `began`, and maybe later ones.
            self._handle(db, raw.notifies(timeout=0))
            self._renew(began)
            # Until the next round trip, handle each notification as it comes.
            while (left := began + ROUND - time.monotonic()) > 0 and not self._stop.is_set():
                # Not while a query runs on the same connection: notifies() holds its lock.
                self._handle(db, raw.notifies(timeout=left, stop_after=1))

    def _round_trip(self, db) -> None:
        """A query and its answer, which the server sends after the notifications of
        every commit before the query (and which finds a dead connection)."""
        with db.cursor() as cursor:
            cursor.execute("SELECT 1")

    def _handle(self, db, notifications) -> None:
        received = [note for note in notifications if note.channel == CHANNEL]
        if not received:
            return
        changed = frozenset(_feed_ids(note.payload for note in received))
        with self._lock:  # before any refresh: see the module docstring
            for feed_id in changed:
                self._notify(feed_id)
        for feed_id in changed:
            self._refresh(db, feed_id)
        self._tell(changed)

    def _refresh(self, db, feed_id: int) -> None:
        with self._lock:
            if feed_id not in self._slug_by_pk:
                return  # not kept here: nothing to refresh
            epoch = self._epoch
        try:
            head = fastsql.feed_by_pk(feed_id, db=db)
        except Feed.DoesNotExist:
            head = None
        with self._lock:
            if self._epoch != epoch:
                return
            if head is None:
                self._drop(feed_id)
            else:
                self._store(head)


def _feed_ids(payloads: Iterable[str]) -> Iterable[int]:
    for payload in payloads:
        try:
            yield int(payload)
        except ValueError:
            logger.warning("ignored a %s notification %r", CHANNEL, payload)


heads = Heads()
# A forked child (a gunicorn worker of a master that polled) has no listener thread: it
# starts with nothing, and starts its own listener when it first polls.
os.register_at_fork(after_in_child=heads._reset)
