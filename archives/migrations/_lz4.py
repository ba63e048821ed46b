"""For migrations: compress a large binary column with lz4 instead of pglz on PostgreSQL.

Page bodies are tens of KB, written once and read often; lz4 compresses them several times
faster than pglz and decompresses faster too. Needs PostgreSQL 14+ built with lz4 (Debian's
and the official images are); elsewhere it changes nothing. Values already stored keep
their compression until rewritten.
"""

from django.db import DatabaseError, transaction


def use_lz4(schema_editor, model, column: str) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    table = model._meta.db_table
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION lz4')
    except DatabaseError:  # a server built without lz4 keeps its default, pglz
        pass
