"""Locks that only spare work, never guard data: whoever does not get one skips a job that
someone else is doing already. What must hold whatever happens (one page per number, claims
in order) is held by the rows and their constraints (archives/log/sealing.py), not here.

`sealing(feed_id)`: one process at a time seals a feed, the others pass it by. Every write
that commits while a page is full and not yet sealed asks to seal it, so with eight writers
a page was rendered up to eight times at once (and once more by seal_archives), all but one
only to lose the race for its row: on two cores each of those seals took ~200 ms instead
of ~20, and the writers waiting for their answers paid for it. On PostgreSQL a session-level
advisory lock, tried, never waited for; elsewhere (SQLite, whose writers take turns) none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# The first key of the advisory lock (PostgreSQL's two-key form): which job it is.
SEALING = 0x5EA1
# The second key is the feed's id, within int4: two feeds sharing a key (ids 2**31 apart)
# only pass each other by once, and the next write or pass seals what is left.
INT4 = 0x7FFFFFFF


@contextmanager
def sealing(feed_id: int) -> Iterator[bool]:
    """Whether this process may seal `feed_id` now: False while another session is
    sealing it, and then the caller passes the feed by."""
    if connection.vendor != "postgresql":
        yield True
        return
    keys = [SEALING, feed_id & INT4]
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
