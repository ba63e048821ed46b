"""Create a demo feed with a realistic history, through the write path."""

from __future__ import annotations

import random

from django.core.management.base import BaseCommand

from archives import publishing
from archives.models import Feed
from archives.sealing import seal_feed

SUBJECTS = ["Coral reef", "Estuarine crocodile", "Rainfall", "Soil carbon", "Seagrass",
            "Koala habitat", "River flow", "Bushfire scar", "Wetland bird", "Ocean temperature"]
PLACES = ["Cape York", "Moreton Bay", "the Kimberley", "Tasmania", "the Murray-Darling",
          "the Great Barrier Reef", "Kakadu", "the Pilbara"]
KINDS = ["survey", "observations", "time series", "census", "sensor data"]


class Command(BaseCommand):
    help = "Create a demo feed of catalogue records: creates, updates and deletes, sealed."

    def add_arguments(self, parser):
        parser.add_argument("--slug", default="demo")
        parser.add_argument("--records", type=int, default=60, help="records to create")
        parser.add_argument("--changes", type=int, default=200,
                            help="updates and deletes after the creates")
        parser.add_argument("--page-size", type=int, default=25)
        parser.add_argument("--seed", type=int, default=5005)

    def handle(self, *args, slug, records, changes, page_size, seed, **options):
        if Feed.objects.filter(slug=slug).exists():
            self.stdout.write(f"feed {slug!r} exists already; leaving it as it is")
            return
        feed = publishing.create_feed(
            slug=slug, title="Demo research data catalogue", page_size=page_size,
            subtitle="Metadata records of research data collections (a feedpub demo)",
            author="feedpub demo",
        )
        rng = random.Random(seed)  # noqa: S311 - demo data, not security
        keys = [f"collection-{n:04d}" for n in range(1, records + 1)]
        for key in keys:
            publishing.put_record(feed=feed, key=key, data=self.record(rng, key))
        live = set(keys)
        for _ in range(changes):
            key = rng.choice(keys)
            if key in live and rng.random() < 0.15:
                publishing.delete_record(feed=feed, key=key)
                live.discard(key)
            else:
                publishing.put_record(feed=feed, key=key, data=self.record(rng, key))
                live.add(key)
        sealed = seal_feed(feed)
        feed.refresh_from_db()
        self.stdout.write(
            f"feed {slug!r}: {feed.last_seq} entries, {len(live)} live records, "
            f"{feed.sealed_pages} sealed pages ({len(sealed)} sealed just now)"
        )

    def record(self, rng: random.Random, key: str) -> dict:
        subject, place, kind = rng.choice(SUBJECTS), rng.choice(PLACES), rng.choice(KINDS)
        year = rng.randint(1990, 2025)
        return {
            "title": f"{subject} {kind}, {place}, {year}",
            "summary": f"{kind.capitalize()} of {subject.lower()} in {place}, collected in {year}.",
            "metadata": {"subject": subject, "place": place, "kind": kind, "year": year,
                         "version": rng.randint(1, 9)},
            "links": [{"href": f"https://data.example.org/collections/{key}",
                       "rel": "related", "type": "text/html", "title": "Landing page"}],
        }
