"""Slugs unique whatever their case: `race` and `Race` would be one folder of exported pages
on storage that ignores case, and one feed to a person reading them. Slugs keep the case
they were given (their URLs are promised); only a second one differing in case is refused.

A database that has such slugs already cannot take the constraint: the migration then stops
before changing anything, naming them. A feed with no entry may be renamed or deleted (the
admin, the API); one with entries keeps its slug by rule, so two of those can only be told
apart by renaming one in the database by hand, which moves every URL of its records and
pages (consumers and OAI-PMH harvesters keep the old ones): decide that knowingly."""

from django.core.management import CommandError
from django.db import migrations, models
from django.db.models import Count
from django.db.models.functions import Lower


def _entries(count: int) -> str:
    return "no entry" if count == 0 else f"{count} {'entry' if count == 1 else 'entries'}"


def refuse_colliding_slugs(apps, schema_editor):
    Feed = apps.get_model("archives", "Feed")
    folded = (Feed.objects.using(schema_editor.connection.alias)
              .values(folded=Lower("slug")).annotate(n=Count("id")).filter(n__gt=1)
              .values_list("folded", flat=True))
    groups = []
    for name in folded:
        feeds = (Feed.objects.using(schema_editor.connection.alias)
                 .alias(folded=Lower("slug")).filter(folded=name).order_by("slug"))
        groups.append(", ".join(f"{feed.slug!r} ({_entries(feed.last_seq)})" for feed in feeds))
    if groups:
        # A CommandError: `migrate` prints it alone, without a traceback to read through.
        raise CommandError(
            "Feeds whose slugs differ only in case: " + "; ".join(groups) + ". Rename or "
            "delete the ones with no entry (admin or API) so that no two are left, then "
            "migrate again; see this migration's docstring if two have entries.")


class Migration(migrations.Migration):

    dependencies = [
        ("archives", "0013_shared_cache_table"),
    ]

    operations = [
        migrations.RunPython(refuse_colliding_slugs, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="feed",
            name="slug",
            field=models.SlugField(
                help_text="The feed's URL name (letters, digits, - and _; unique whatever the "
                          "case); fixed once the feed has an entry.",
                max_length=100, unique=True),
        ),
        migrations.AddConstraint(
            model_name="feed",
            constraint=models.UniqueConstraint(
                Lower("slug"), name="feed_slug_unique_ignoring_case",
                violation_error_message="Another feed has this slug in another case."),
        ),
    ]
