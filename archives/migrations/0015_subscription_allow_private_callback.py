"""Whether a subscription's callback may be at a private address, recorded by the hub when
the subscriber asks (archives/push/hub.py), so that the worker needs no setting of its own.
The subscriptions made before get the migrating process's FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS:
the web service's, whose hub accepted them."""

from django.db import migrations, models

from archives.conf import settings


def record_the_setting(apps, schema_editor):
    if settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS:
        apps.get_model("archives", "Subscription").objects.update(allow_private_callback=True)


class Migration(migrations.Migration):
    dependencies = [("archives", "0014_feed_slug_unique_ignoring_case")]
    operations = [
        migrations.AddField(
            model_name="subscription",
            name="allow_private_callback",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(record_the_setting, migrations.RunPython.noop),
    ]
