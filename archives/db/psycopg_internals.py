"""Every place feedpub reaches beneath Django's PostgreSQL backend to psycopg itself, and
nowhere else: the psycopg cursor under a Django cursor, to read timestamps with psycopg's
own loader, and a binary cursor on Django's connection. Both are pinned by canaries in
tests/test_library_internals.py that fail naming psycopg's and Django's versions if either
changes what they rely on.
"""

from __future__ import annotations

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from psycopg.types.datetime import TimestamptzLoader


def load_timestamps_in_c(cursor: CursorWrapper) -> None:
    """Read `timestamptz` columns on this Django cursor with psycopg's own loader (in C:
    aware, in the session's time zone), not the one Django registers on its connections,
    which wraps it in Python to force the zone and cost ~5 us a row: two thirds of reading
    a record in archives/db/fastsql.py's live_records, entry_rows and oai_records."""
    cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


def binary_cursor(db: BaseDatabaseWrapper) -> psycopg.Cursor:
    """A psycopg cursor on `db`'s connection (opened if need be), to be used as a context
    manager, whose execute(..., binary=True) gets bytea as bytes: Django's cursors are
    client-side binding ones, which get it as hex text, twice the size and decoded in
    Python (archives/db/fastsql.py's page_bodies)."""
    db.ensure_connection()
    return psycopg.Cursor(db.connection)
