"""List the feeds whose record schema in force is over the bounds on what checking a record
may cost: versions stored before feedpub set them (docs/operating/upgrades.md). Such a
feed refuses every put until its maintainer sets a new schema."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from feedpub_consumer.progress import counted

from archives.db import schemas
from archives.models import Feed


class Command(BaseCommand):
    help = ("List the feeds whose record schema in force is over the bounds on what checking "
            "a record may cost (stored before them): they refuse every put until their "
            "maintainer sets a new schema.")

    def handle(self, *args, **options):
        feeds = Feed.objects.filter(schema_version__isnull=False).order_by("slug")
        over = 0
        for feed in feeds.iterator():
            checker = schemas.checker(feed)
            if checker is not None and checker.over_bounds:
                over += 1
                self.stdout.write(f"{feed.slug}: version {feed.schema_version}: "
                                  f"{checker.over_bounds}")
        self.stdout.write(f"{over} of {counted(feeds.count(), 'feed')} with a record schema "
                          f"{'is' if over == 1 else 'are'} over the bounds")
