"""Each feed's recorded base URL (Feed.base_url: a process configured with another refuses
to write or seal), and each record's OAI-PMH datestamp apart from its `updated` (moved by
rerender_documents), with the indexes OAI-PMH lists read it by."""

from django.db import migrations, models
from django.db.models import F
from lxml import etree

ATOM_SELF = "{http://www.w3.org/2005/Atom}link[@rel='self']"


def stamp_records(apps, schema_editor):
    apps.get_model("archives", "Record").objects.update(datestamp=F("updated"))


def record_base_urls(apps, schema_editor):
    """A feed with sealed pages: the base URL its newest page was sealed under (its self
    link, /feeds/<slug>/archives/<n>/ then). Others record theirs on their first write."""
    Feed = apps.get_model("archives", "Feed")
    ArchivePage = apps.get_model("archives", "ArchivePage")
    for feed in Feed.objects.filter(sealed_pages__gt=0).only("pk", "slug"):
        page = (ArchivePage.objects.filter(feed=feed).order_by("-number")
                .values_list("number", "body").first())
        if page is None:
            continue
        link = etree.fromstring(bytes(page[1])).find(ATOM_SELF)
        path = f"/feeds/{feed.slug}/archives/{page[0]}/"
        href = "" if link is None else link.get("href", "")
        if href.endswith(path):
            Feed.objects.filter(pk=feed.pk).update(base_url=href.removesuffix(path))


class Migration(migrations.Migration):

    dependencies = [
        ("archives", "0015_subscription_allow_private_callback"),
    ]

    operations = [
        migrations.AddField(
            model_name="feed",
            name="base_url",
            field=models.CharField(blank=True, default="", editable=False, max_length=2000),
        ),
        migrations.RunPython(record_base_urls, migrations.RunPython.noop),
        migrations.AddField(
            model_name="record",
            name="datestamp",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(stamp_records, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="record",
            name="datestamp",
            field=models.DateTimeField(),
        ),
        migrations.RemoveIndex(
            model_name="record",
            name="record_updated",
        ),
        migrations.AddIndex(
            model_name="record",
            index=models.Index(fields=["datestamp", "id"], name="record_datestamp"),
        ),
        migrations.AddIndex(
            model_name="record",
            index=models.Index(fields=["feed", "datestamp", "id"],
                               name="record_feed_datestamp"),
        ),
    ]
