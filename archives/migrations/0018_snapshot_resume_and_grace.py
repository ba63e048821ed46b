"""Snapshots: at most one unfinished snapshot a feed (the next start resumes it), and when
each was completed (the one before it is kept FEEDPUB_SNAPSHOT_GRACE_SECONDS from then on).

Of the unfinished snapshots that crashed sealers left behind, the newest of each feed
stays (the next start resumes it) and the others are deleted, with their pages. A
complete snapshot is taken to have been completed when it was started: its predecessor's
grace is then counted from a little early, never late. Snapshots of feeds with no entries
are deleted (they are no longer taken)."""

from django.db import migrations, models
from django.db.models import F


def keep_one_unfinished(apps, schema_editor):
    Snapshot = apps.get_model("archives", "Snapshot")
    SnapshotPage = apps.get_model("archives", "SnapshotPage")
    Snapshot.objects.filter(complete=True, completed_at=None).update(completed_at=F("created"))
    newest: dict[int, int] = {}
    for pk, feed_id in (Snapshot.objects.filter(complete=False)
                        .order_by("-created", "-pk").values_list("pk", "feed_id")):
        newest.setdefault(feed_id, pk)
    # (Snapshots of feeds with no entries are no longer taken: they hold no page, and
    # their index sent consumers to a page 1 that did not exist.)
    doomed = (Snapshot.objects.filter(complete=False).exclude(pk__in=newest.values())
              | Snapshot.objects.filter(last_seq=0))
    SnapshotPage.objects.filter(snapshot__in=doomed).delete()
    doomed.delete()
    if schema_editor.connection.vendor == "postgresql":
        # Check the deferred foreign keys of the rows deleted now: PostgreSQL creates no
        # index on a table with trigger events pending.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


class Migration(migrations.Migration):
    dependencies = [("archives", "0017_record_search_folded")]
    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="completed_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(keep_one_unfinished, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="snapshot",
            constraint=models.UniqueConstraint(condition=models.Q(("complete", False)),
                                               fields=("feed",),
                                               name="snapshot_one_unfinished_per_feed"),
        ),
    ]
