"""Trigram indexes for the search page (archives/html/pages.py search): its `key__icontains`
and `title__icontains` are `UPPER(column::text) LIKE UPPER('%query%')` on PostgreSQL, which
no btree index serves: on 1,000,000 records a search read every row (bench/search.py,
docs/performance/search.md). pg_trgm's GIN indexes on the same UPPER() expressions serve
LIKE patterns of three characters or more.

PostgreSQL only (in SQL: Django's GinIndex cannot yet spell an operator class on an
expression): SQLite has no trigram index for LIKE, and a search there reads the feed's
rows (documented). CREATE EXTENSION needs a role allowed to create it (pg_trgm is a
trusted extension: the database's owner may, from PostgreSQL 13)."""

from django.db import migrations

INDEXES = {
    "record_key_trgm": "UPPER(key::text) gin_trgm_ops",
    "record_title_trgm": "UPPER(title::text) gin_trgm_ops",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON archives_record USING gin ({expression})")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("archives", "0011_record_updated_index")]
    operations = [migrations.RunPython(create, drop)]
