"""The database cache's table (archives/db/cache.py), created by `migrate` so that a fresh
checkout or container needs no `createcachetable`; created whatever CACHES says, so that
switching from Redis to the database later needs nothing either."""

from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

TABLE = "feedpub_cache"  # CACHES' LOCATION in feedpub/settings.py


def create(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


def drop(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("archives", "0012_record_search_index")]
    operations = [migrations.RunPython(create, drop)]
