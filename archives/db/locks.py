"""Locks that only spare work, never guard data: whoever does not get one skips a job that
someone else is doing already. What must hold whatever happens (one page per number, claims
in order) is held by the rows and their constraints (archives/log/sealing.py), not here.

`sealing_after_write(feed_id)`: one writer at a time seals a feed after its write, the
others pass it by. Every write that commits while a page is full and not yet sealed asks to
seal it, so with eight writers a page was rendered up to eight times at once, all but one
only to lose the race for its row: on two cores each of those seals took ~200 ms instead of
~20, and the writers waiting for their answers paid for it. On PostgreSQL a session-level
advisory lock, tried, never waited for; elsewhere (SQLite, whose writers take turns) none.
A pooler that shares server sessions between transactions (pgbouncer in transaction mode)
would release it on another session than took it, and leave it held there: then writers
pass sealing by for good, a warning says why, and seal_archives (which never takes it)
seals at its interval.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

logger = logging.getLogger(__name__)

# The first key of the advisory lock (PostgreSQL's two-key form): which job it is.
SEALING_AFTER_WRITE = 0x5EA1
# The second key is the feed's id, within int4: two feeds sharing a key (ids 2**31 apart)
# only pass each other by once, and the next write or seal_archives seals what is left.
INT4 = 0x7FFFFFFF


@contextmanager
def sealing_after_write(feed_id: int) -> Iterator[bool]:
    """Whether this writer may seal `feed_id` now: False while another session is
    sealing it after a write, and then the caller passes sealing by."""
    if connection.vendor != "postgresql":
        yield True
        return
    keys = [SEALING_AFTER_WRITE, feed_id & INT4]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", keys)
        (taken,) = cursor.fetchone()
    if not taken:
        yield False
        return
    try:
        yield True
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
            (released,) = cursor.fetchone()
        if not released:
            logger.warning(
                "the lock for sealing feed %s after a write was taken on another database "
                "session than it was released on (a pooler sharing sessions between "
                "transactions?): writes may no longer seal it, seal_archives does", feed_id)
