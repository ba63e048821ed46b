"""Create a demo feed with a realistic history, through the write path."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from archives.consumer.progress import add_progress_argument, counted, progress_bar
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed, validate_language

SUBJECTS = ["Coral reef", "Estuarine crocodile", "Rainfall", "Soil carbon", "Seagrass",
            "Koala habitat", "River flow", "Bushfire scar", "Wetland bird", "Ocean temperature"]
PLACES = ["Cape York", "Moreton Bay", "the Kimberley", "Tasmania", "the Murray-Darling",
          "the Great Barrier Reef", "Kakadu", "the Pilbara"]
KINDS = ["survey", "observations", "time series", "census", "sensor data"]
TITLE = "Demo research data catalogue"


class Command(BaseCommand):
    help = "Create a demo feed of catalogue records: creates, updates and deletes, sealed."

    def add_arguments(self, parser):
        parser.add_argument("--slug", default="demo", help="the feed's slug (its URLs)")
        parser.add_argument("--title", default=TITLE, help=f"the feed's title ({TITLE!r})")
        parser.add_argument("--language", help="the feed's language, a BCP 47 tag such as "
                                               "en or pt-BR (default: FEEDPUB_LANGUAGE)")
        parser.add_argument("--records", type=int, default=60, help="records to create")
        parser.add_argument("--changes", type=int, default=200,
                            help="updates and deletes after the creates")
        parser.add_argument("--page-size", type=int, default=25)
        parser.add_argument("--days", type=int, default=30,
                            help="the past days the history is spread over (0: all now)")
        parser.add_argument("--seed", type=int, default=5005)
        add_progress_argument(parser)

    def handle(self, *args, slug, title, language, records, changes, page_size, days, seed,
               progress, **options):
        if language is not None:  # before anything else, even on an existing feed
            try:
                validate_language(language)
            except ValidationError as error:
                raise CommandError(f"--language {language!r}: {error.messages[0]}") from None
        if days < 0:
            raise CommandError("--days must be 0 or more")
        if Feed.objects.filter(slug=slug).exists():
            self.stdout.write(f"feed {slug!r} exists already; leaving it as it is")
            return
        feed = self.create(slug=slug, title=title, page_size=page_size,
                           **({} if language is None else {"language": language}))
        rng = random.Random(seed)  # noqa: S311 - demo data, not security
        keys = [f"collection-{n:04d}" for n in range(1, records + 1)]
        clock = past_clock(random.Random(f"{seed} clock"), days=days,  # noqa: S311
                           writes=records + changes)
        with (progress_bar(self.stderr, progress, desc=slug, unit=" records",
                           total=records + changes) as bar,
              publishing.backdated(feed, clock)):
            live = self.write(feed, rng, keys, changes, bar.update)
        seal_feed(feed)  # what writes did not seal (FEEDPUB_SEAL_ON_WRITE off)
        feed.refresh_from_db()
        # The feed is new: every page it has was sealed by this run, as it went or just now.
        self.stdout.write(
            f"feed {slug!r}: {counted(feed.last_seq, 'entry', 'entries')} over "
            f"{counted(days, 'day')}, {counted(len(live), 'live record')}; sealed "
            f"{counted(feed.sealed_pages, 'archive page')} "
            f"({counted(page_size, 'entry', 'entries')} each), "
            f"{counted(feed.last_seq - feed.sealed_seq, 'entry', 'entries')} not archived yet"
        )

    def create(self, **fields) -> Feed:
        try:
            return publishing.create_feed(
                subtitle="Metadata records of research data collections (a feedpub demo)",
                author="feedpub demo", **fields)
        except ValidationError as error:
            raise CommandError("; ".join(
                f"--{name.replace('_', '-')}: {' '.join(messages)}"
                for name, messages in error.message_dict.items())) from None

    def write(self, feed: Feed, rng: random.Random, keys: list[str], changes: int,
              written) -> set[str]:
        """Create the records, then update or delete `changes` of them; the live keys."""
        for key in keys:
            publishing.put_record(feed=feed, key=key, data=self.record(rng, key))
            written(1)
        live = set(keys)
        for _ in range(changes):
            key = rng.choice(keys)
            if key in live and rng.random() < 0.15:
                publishing.delete_record(feed=feed, key=key)
                live.discard(key)
            else:
                publishing.put_record(feed=feed, key=key, data=self.record(rng, key))
                live.add(key)
            written(1)
        return live

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


def past_clock(rng: random.Random, *, days: int, writes: int):
    """A clock for the demo's writes: `writes` random instants of the past `days` days, in
    order, then (should more be asked for) the wall clock. The write path keeps them
    strictly increasing and never later than now (publishing.backdated)."""
    now = timezone.now()
    start = now - timedelta(days=days)
    times = iter(sorted(start + (now - start) * rng.random() for _ in range(writes)))

    def clock() -> datetime:
        return next(times, None) or timezone.now()

    return clock
