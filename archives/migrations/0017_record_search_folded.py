"""Record search ignores accents and case, and looks in summaries too (archives/db/search.py):
on PostgreSQL, the `unaccent` extension, two IMMUTABLE SQL functions over it
(`feedpub_search_fold(text)`, `feedpub_search_text(key, title, summary)`) and one pg_trgm GIN
index on `feedpub_search_text(key, title, summary)`, which replaces migration 0012's two on
UPPER(key) and UPPER(title) (nothing searches those expressions any more).

unaccent() is STABLE (its rules are a dictionary one could change), and an index expression
must be IMMUTABLE: the functions name its dictionary explicitly and are declared IMMUTABLE,
the usual way to index it. They name unaccent's schema too, so that they work whatever the
search_path (pg_dump's restore builds indexes with an empty one). Changing unaccent's rules
would need a REINDEX of `record_search_trgm`.

CREATE EXTENSION needs a role allowed to create it: unaccent, like pg_trgm, is trusted from
PostgreSQL 13 (the database's owner may). SQLite gets the same functions in Python, on each
connection (archives/apps.py)."""

from django.db import migrations

OLD_INDEXES = {
    "record_key_trgm": "UPPER(key::text) gin_trgm_ops",
    "record_title_trgm": "UPPER(title::text) gin_trgm_ops",
}
INDEX = ("CREATE INDEX IF NOT EXISTS record_search_trgm ON archives_record "
         "USING gin (feedpub_search_text(key, title, summary) gin_trgm_ops)")


JOINED = "coalesce($1, '') || chr(1) || coalesce($2, '') || chr(1) || coalesce($3, '')"


def functions(schema: str) -> list[str]:
    """The two functions, over the unaccent of `schema` (U+0001 joins the three fields: no
    key, title, summary or query holds it, so a match never spans two of them)."""
    unaccent = f"{schema}.unaccent('{schema}.unaccent'::regdictionary, %s)"
    return [
        "CREATE OR REPLACE FUNCTION feedpub_search_fold(text) RETURNS text "
        "LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT "
        f"AS $$ SELECT lower({unaccent % '$1'}) $$",
        "CREATE OR REPLACE FUNCTION feedpub_search_text(text, text, text) RETURNS text "
        "LANGUAGE sql IMMUTABLE PARALLEL SAFE "
        f"AS $$ SELECT lower({unaccent % JOINED}) $$",
    ]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension"
                       " WHERE extname = 'unaccent'")
        (schema,) = cursor.fetchone()
    for statement in functions(schema):
        schema_editor.execute(statement)
    schema_editor.execute(INDEX)
    for name in OLD_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, expression in OLD_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON archives_record USING gin ({expression})")
    schema_editor.execute("DROP INDEX IF EXISTS record_search_trgm")
    schema_editor.execute("DROP FUNCTION IF EXISTS feedpub_search_text(text, text, text)")
    schema_editor.execute("DROP FUNCTION IF EXISTS feedpub_search_fold(text)")


class Migration(migrations.Migration):
    dependencies = [("archives", "0016_base_url_and_oai_datestamp")]
    operations = [migrations.RunPython(create, drop)]
