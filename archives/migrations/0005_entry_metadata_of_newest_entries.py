"""Entries keep the metadata they wrote since 0004; before, only the record had it. A
record's current metadata is what its newest entry wrote, so it goes there (older
entries' metadata was not kept: their linked-pages entities say null).

Not atomic, in batches of records, so that a large table is never locked for the whole
update and a killed run can simply run again (it only fills what is still null). The
newest entry of a record is the one whose `updated` is the record's.
"""

from django.db import migrations
from django.db.models import F, OuterRef, Subquery

BATCH = 5000


def keep_current_metadata(apps, schema_editor):
    Entry = apps.get_model("archives", "Entry")
    Record = apps.get_model("archives", "Record")
    record_ids = Record.objects.order_by("pk").values_list("pk", flat=True)
    after = 0
    while True:
        batch = list(record_ids.filter(pk__gt=after)[:BATCH])
        if not batch:
            return
        after = batch[-1]
        metadata = Record.objects.filter(pk=OuterRef("record_id")).values("metadata")[:1]
        (Entry.objects.filter(record_id__in=batch, metadata__isnull=True,
                              updated=Subquery(Record.objects.filter(pk=OuterRef("record_id"))
                                               .values("updated")[:1]))
         .exclude(kind="delete").update(metadata=Subquery(metadata)))


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("archives", "0004_linked_pages_and_snapshots")]

    operations = [migrations.RunPython(keep_current_metadata, migrations.RunPython.noop)]
