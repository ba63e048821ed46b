"""Appending many rows at once on PostgreSQL, with COPY.

Django 5.2's bulk_create inserts through UNNEST of arrays that psycopg quotes in pure
Python (and it sends bytes as hex literals): for the entries of a batch and the bodies of
sealed pages, COPY, whose rows psycopg formats in C, took a third of the time. Callers use
it only where no ids are needed back and keep bulk_create for other databases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection, models


def can_copy() -> bool:
    return connection.vendor == "postgresql"


def copy_rows(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence]) -> None:
    """COPY `rows` (values in the order of `columns`, column names) into model's table."""
    names = ", ".join(connection.ops.quote_name(column) for column in columns)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    # As Django does for execute(): psycopg's errors become django.db's (IntegrityError...).
    with connection.wrap_database_errors, connection.cursor() as cursor, cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
