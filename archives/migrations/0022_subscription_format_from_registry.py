import archives.models
from django.db import migrations, models


class Migration(migrations.Migration):
    """Subscription.format's choices come from the registry of document kinds
    (archives/documents/kinds.py), read when needed: a new topic needs no migration. The
    stored formats (atom, rss, linked) are unchanged."""

    dependencies = [
        ("archives", "0021_producers_group"),
    ]

    operations = [
        migrations.AlterField(
            model_name="subscription",
            name="format",
            field=models.CharField(choices=archives.models.subscription_formats, max_length=40),
        ),
    ]
