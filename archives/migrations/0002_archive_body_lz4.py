"""PostgreSQL: compress archive page bodies with lz4 instead of pglz.

Bodies are ~50 KB of XML, written once when sealed and read whenever a page is not in a
process's memory; lz4 compresses them several times faster than pglz (storing a sealed
page took ~0.45 ms less) and decompresses faster too. Needs PostgreSQL 14+ built with lz4
(Debian's and the official images are); elsewhere this migration changes nothing.
"""

from django.db import migrations

from ._lz4 import use_lz4


def body_with_lz4(apps, schema_editor):
    use_lz4(schema_editor, apps.get_model("archives", "ArchivePage"), "body")


class Migration(migrations.Migration):
    dependencies = [("archives", "0001_initial")]

    operations = [migrations.RunPython(body_with_lz4, migrations.RunPython.noop, elidable=True)]
