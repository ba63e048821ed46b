"""The `producers` group, on every install: what a colleague who keeps records needs, and no
more (docs/publishing/write-access.md says why each permission is in it, or not).

- Records: add, change, delete, view. The API's writes need exactly these (a PUT changes, or
  adds and changes; a DELETE deletes; a batch needs those its operations use:
  archives/api/permissions.py), and so do the admin's record pages.
- Feeds, entries and sealed pages: view only. A record's admin page links its feed and its
  history of entries, all of it public anyway. A feed's settings and record schema change
  what every record of the feed must be and how every document is written: they stay with
  whoever runs the site (a superuser).
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "producers"
PERMISSIONS = [
    "add_record", "change_record", "delete_record", "view_record",
    "view_feed", "view_entry", "view_archivepage",
]


def add_producers(apps, schema_editor):
    # Permissions are made after every migration has run (post_migrate): on a new database
    # they do not exist yet, so they are made here, as Django would make them.
    archives = apps.get_app_config("archives")
    archives.models_module = True
    create_permissions(archives, apps=apps, verbosity=0,
                       using=schema_editor.connection.alias)
    archives.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(*Permission.objects.filter(content_type__app_label="archives",
                                                     codename__in=PERMISSIONS))


def remove_producers(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('archives', '0020_heartbeats'),
        ('auth', '0012_alter_user_first_name_max_length'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.RunPython(add_producers, remove_producers),
    ]
