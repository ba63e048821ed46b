"""Feeds' heads kept in each process's memory, so that a poll that finds nothing new costs
no database round trip, and yet sees every committed write (DESIGN.md "Scale").

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
(bench/README.md measures it). A connection that dies without a word (a network partition)
is found by TCP keepalives and a query every HEARTBEAT seconds, within about 15 s: far
below FEEDPUB_MAX_AGE, the minute a client or cache keeps the document anyway.

Why each rule holds (tests/test_heads.py exercises each on PostgreSQL):
- A head read by a poll is stored only if no notification arrived since the read began
  (and the listener did not reconnect): a row read just before a commit whose
  notification was handled while the feed was not cached would otherwise stay.
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
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial

from django.conf import settings
from django.db import connection, connections, transaction

from . import fastsql
from .models import Feed

logger = logging.getLogger(__name__)

CHANNEL = "feedpub_changes"
# Seconds between two checks that the listener's connection is alive, when no
# notification comes; and the longest the listener blocks before it looks at `stop`.
HEARTBEAT = 5.0
WAKE = 0.25
# libpq options of the listener's connection: a peer that vanished without closing is
# noticed after ~11 s of silence (keepalives) or 10 s of unacknowledged data.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": 10_000}

Listener = Callable[[frozenset[int] | None], None]


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
        self._epoch = 0  # moves whenever listening starts or stops
        self.listening = False
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

    def feed_by_slug(self, slug: str) -> Feed:
        """The feed's head: from memory while listening, else from the database (and then
        kept, if read outside a transaction). Raises Feed.DoesNotExist."""
        with self._lock:
            if self.listening:
                head = self._by_slug.get(slug)
                if head is not None:
                    self._by_slug.move_to_end(slug)
                    return head
            token = (self._epoch, self._changes) if self.listening else None
        if not self.enabled() or not self.reads_committed():
            return fastsql.feed_by_slug(slug)
        if self._thread is None:
            self.start()
        head = fastsql.feed_by_slug(slug)
        if token is not None:
            with self._lock:
                if self.listening and (self._epoch, self._changes) == token:
                    self._store(head)
        return head

    def cached(self, slug: str) -> Feed | None:
        """The feed's head if it is in memory and trusted; never queries."""
        with self._lock:
            return self._by_slug.get(slug) if self.listening else None

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
            self._changes += 1
            self._drop(feed_id)

    def __len__(self) -> int:
        return len(self._by_slug)

    # Keeping (under the lock) ----------------------------------------------------------

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
            self._epoch += 1
            self.listening = listening
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
        with self._lock:
            return self._listening_changed.wait_for(lambda: self.listening, timeout)

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
        quiet = 0.0
        while not self._stop.is_set():
            # Not while a query runs on the same connection: notifies() holds its lock.
            received = [note for note in raw.notifies(timeout=WAKE, stop_after=1)
                        if note.channel == CHANNEL]
            if not received:
                quiet += WAKE
                if quiet >= HEARTBEAT:
                    with db.cursor() as cursor:
                        cursor.execute("SELECT 1")
                    quiet = 0.0
                continue
            quiet = 0.0
            changed = frozenset(_feed_ids(note.payload for note in received))
            with self._lock:  # before any refresh: see the module docstring
                self._changes += 1
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
