"""Create a demo feed with a realistic history, through the write path: a research-data
catalogue whose records follow a schema (docs/describing-records.md shows it), created, then
corrected and added to as a catalogue's records are, a few of them withdrawn."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from feedpub_consumer.progress import add_progress_argument, counted, progress_bar

from archives.log import publishing
from archives.log.access import Actor
from archives.log.sealing import seal_feed
from archives.models import Feed, validate_language

TITLE = "Demo research data catalogue"
# Who writes the demo's records: the operator, by a command.
OPERATOR = Actor(via="command")
# Licences by URL: CC BY, BY-NC and BY-SA 4.0, and CC0.
LICENCES = ["https://creativecommons.org/licenses/by/4.0/",
            "https://creativecommons.org/licenses/by-nc/4.0/",
            "https://creativecommons.org/licenses/by-sa/4.0/",
            "https://creativecommons.org/publicdomain/zero/1.0/"]
# The DCMI Type Vocabulary's terms a data catalogue holds.
RESOURCE_TYPES = ["Dataset", "Collection", "Image", "Sound", "PhysicalObject", "Software",
                  "Text"]

# The record schema the demo feed declares: a research-data catalogue's, one property per
# thing a catalogue says about a collection, each with a title and a description (the
# admin's labels and help, the pages' labels), `x-dc` where Dublin Core has the element
# (OAI-PMH's oai_dc fills it from the property). The record's own title and summary are
# Dublin Core's title and description already.
RECORD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "A research data collection",
    "description": "What the catalogue says about a collection of research data.",
    "type": "object",
    "properties": {
        "creators": {
            "title": "Creators",
            "description": "The people who made the data, the main ones first, each as "
                           "'Family name, Given names'.",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "x-dc": "creator",
        },
        "subjects": {
            "title": "Subjects",
            "description": "Keywords a searcher would use: what was studied and the "
                           "discipline.",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
            "x-dc": "subject",
        },
        "description": {
            "title": "Description",
            "description": "How the data were collected and what they hold.",
            "type": "string",
            "x-dc": "description",
        },
        "publisher": {
            "title": "Publisher",
            "description": "The repository that publishes the collection.",
            "type": "string",
            "x-dc": "publisher",
        },
        "published": {
            "title": "Publication date",
            "description": "The day the collection was first published (YYYY-MM-DD).",
            "type": "string",
            "format": "date",
            "x-dc": "date",
        },
        "resource_type": {
            "title": "Type",
            "description": "What the collection is, a term of the DCMI Type Vocabulary.",
            "type": "string",
            "enum": RESOURCE_TYPES,
            "x-dc": "type",
        },
        "licence": {
            "title": "Licence",
            "description": "The licence the data are published under; left out until the "
                           "depositor has said.",
            "type": "string",
            "enum": LICENCES,
            "x-dc": "rights",
        },
        "language": {
            "title": "Language",
            "description": "The language of the collection's documentation, a BCP 47 tag "
                           "such as en.",
            "type": "string",
            "pattern": "^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$",
            "x-dc": "language",
        },
        "doi": {
            "title": "DOI",
            "description": "The collection's DOI as a link, once one is minted.",
            "type": "string",
            "format": "uri",
            "pattern": "^https://doi\\.org/10\\.[0-9]{4,9}/\\S+$",
            "x-dc": "identifier",
        },
        "place": {
            "title": "Place",
            "description": "Where the data were collected.",
            "type": "string",
            "x-dc": "coverage",
        },
        "version": {
            "title": "Version",
            "description": "The collection's version, 1 when first published and one more "
                           "each time data are added.",
            "type": "integer",
            "minimum": 1,
        },
    },
    "required": ["creators", "published", "resource_type"],
    "additionalProperties": False,
}

# What was studied: its discipline (a record's first subjects), where, in what kinds of
# collection, and the repository that publishes them.
COAST, INLAND, LAND = ("Coastal Research Data Centre", "Inland Waters Data Service",
                       "Terrestrial Ecology Data Archive")
TOPICS = {
    "Coral reefs": ("Marine ecology", ["the Great Barrier Reef", "Ningaloo", "Torres Strait"],
                    ["survey", "photographs", "time series"], COAST),
    "Estuarine crocodiles": ("Wildlife ecology", ["Kakadu", "Cape York"],
                             ["census", "observations", "sensor data"], COAST),
    "Rainfall": ("Climatology", ["Cape York", "Tasmania", "the Pilbara", "the Kimberley"],
                 ["time series", "sensor data", "field notebooks"], INLAND),
    "Soil carbon": ("Soil science", ["the Murray-Darling Basin", "Tasmania", "the Pilbara"],
                    ["survey", "soil cores", "analysis scripts"], LAND),
    "Seagrass meadows": ("Marine ecology", ["Moreton Bay", "Shark Bay", "Torres Strait"],
                         ["survey", "photographs", "observations"], COAST),
    "Koala habitat": ("Conservation biology", ["South East Queensland", "Kangaroo Island"],
                      ["survey", "observations", "satellite images"], LAND),
    "River flow": ("Hydrology", ["the Murray-Darling Basin", "Tasmania", "Kakadu"],
                   ["time series", "sensor data", "analysis scripts"], INLAND),
    "Bushfire scars": ("Fire ecology", ["the Kimberley", "Tasmania", "Kakadu"],
                       ["satellite images", "survey", "field notebooks"], LAND),
    "Wetland birds": ("Ornithology", ["Kakadu", "the Murray-Darling Basin", "Moreton Bay"],
                      ["census", "sound recordings", "observations"], INLAND),
    "Ocean temperature": ("Oceanography", ["the Great Barrier Reef", "Tasmania", "Ningaloo"],
                          ["time series", "sensor data"], COAST),
}
# Each kind of collection: its DCMI type, and how its summary links it to its topic.
KINDS = {"survey": ("Dataset", "of"), "observations": ("Dataset", "of"),
         "time series": ("Dataset", "of"), "sensor data": ("Dataset", "on"),
         "census": ("Dataset", "of"), "photographs": ("Image", "of"),
         "satellite images": ("Image", "of"), "sound recordings": ("Sound", "of"),
         "soil cores": ("PhysicalObject", "sampled for"),
         "analysis scripts": ("Software", "for"), "field notebooks": ("Text", "on")}
# Subjects a curator adds later.
MORE_SUBJECTS = ["Long-term monitoring", "Climate change", "Biodiversity", "Remote sensing",
                 "Water quality", "Citizen science", "Field survey",
                 "Indigenous land management", "Species distribution", "Environmental DNA"]
PEOPLE = ["Nguyen, Thi Lan", "Walker, James", "O'Connell, Aoife", "Okafor, Chidi",
          "Martin, Sophie", "Singh, Harpreet", "Brown, Eleanor", "Tanaka, Hiroshi",
          "Garcia, Lucia", "Kowalski, Marek", "Wilson, Grace", "Ahmed, Yusuf",
          "Campbell, Fiona", "Rossi, Marco", "Taylor, Jack", "Chen, Wei"]
METHODS = ["Sites were visited twice a year, in the wet and the dry season.",
           "Each value was checked against a second observer's.",
           "Instruments were calibrated before each deployment.",
           "Gaps in the record are marked, not filled.",
           "Locations are given to four decimal places (about 10 m).",
           "A README explains how the collection is organised."]
# The share of the changes after the creates that withdraw a record (a few).
WITHDRAWN = 0.04
LAST_YEAR = 2024  # the newest year of collecting; published the year after


class Command(BaseCommand):
    help = ("Create a demo feed of a research-data catalogue: its record schema, then records "
            "created, corrected and added to, a few withdrawn; sealed.")

    def add_arguments(self, parser):
        parser.add_argument("--slug", default="demo", help="the feed's slug (its URLs)")
        parser.add_argument("--title", default=TITLE, help=f"the feed's title ({TITLE!r})")
        parser.add_argument("--language", help="the feed's language, a BCP 47 tag such as "
                                               "en or pt-BR (default: FEEDPUB_LANGUAGE)")
        parser.add_argument("--records", type=int, default=60, help="records to create")
        parser.add_argument("--changes", type=int, default=200,
                            help="corrections, additions and withdrawals after the creates")
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
        if records < 0 or changes < 0:
            raise CommandError("--records and --changes must be 0 or more")
        if changes and not records:
            raise CommandError("--changes needs records to change: give --records 1 or more")
        if Feed.objects.filter(slug=slug).exists():
            self.stdout.write(f"feed {slug!r} exists already; leaving it as it is")
            return
        feed = self.create(slug=slug, title=title, page_size=page_size,
                           **({} if language is None else {"language": language}))
        rng = random.Random(seed)  # noqa: S311 - demo data, not security
        clock = past_clock(random.Random(f"{seed} clock"), days=days,  # noqa: S311
                           writes=records + changes)
        with (progress_bar(self.stderr, progress, desc=slug, unit=" records",
                           total=records + changes) as bar,
              publishing.backdated(feed, clock)):
            live = write(feed, rng, records, changes, bar.update)
        seal_feed(feed)  # what writes did not seal (FEEDPUB_SEAL_ON_WRITE off)
        feed.refresh_from_db()
        # The feed is new: every page it has was sealed by this run, as it went or just now.
        self.stdout.write(
            f"feed {slug!r}: {counted(feed.last_seq, 'entry', 'entries')} over "
            f"{counted(days, 'day')}, {counted(live, 'live record')}; sealed "
            f"{counted(feed.sealed_pages, 'archive page')} "
            f"({counted(page_size, 'entry', 'entries')} each), "
            f"{counted(feed.last_seq - feed.sealed_seq, 'entry', 'entries')} not archived yet"
        )

    def create(self, **fields) -> Feed:
        try:
            return publishing.create_feed(
                subtitle="Metadata records of research data collections (a feedpub demo)",
                author="feedpub demo", record_schema=RECORD_SCHEMA, **fields)
        except ValidationError as error:
            raise CommandError("; ".join(
                f"--{name.replace('_', '-')}: {' '.join(messages)}"
                for name, messages in error.message_dict.items())) from None


def write(feed: Feed, rng: random.Random, records: int, changes: int, written) -> int:
    """Create `records` collections, then make `changes` changes to live ones: corrections
    and additions, and (a few) withdrawals, never the last live record. Every change
    changes its record, so each write is one entry. The number of live records."""
    catalogue = [Collection.made(rng, n) for n in range(1, records + 1)]
    for collection in catalogue:
        publishing.put_record(feed=feed, key=collection.key, data=collection.record(),
                              actor=OPERATOR)
        written(1)
    withdrawals = set(rng.sample(range(changes),
                                 max(0, min(round(changes * WITHDRAWN), records - 1))))
    live = list(catalogue)
    for change in range(changes):
        collection = rng.choice(live)
        if change in withdrawals:
            publishing.delete_record(feed=feed, key=collection.key, actor=OPERATOR)
            live.remove(collection)
        else:
            collection.revise(rng)
            publishing.put_record(feed=feed, key=collection.key, data=collection.record(),
                                  actor=OPERATOR)
        written(1)
    return len(live)


@dataclass
class Collection:
    """One collection of the catalogue as it stands: what its record says, and the flaws
    its first record had that a curator may correct."""

    number: int
    topic: str
    discipline: str
    kind: str
    resource_type: str
    place: str
    first_year: int
    last_year: int
    creators: list[str]
    subjects: list[str]
    publisher: str
    published: date
    methods: list[str]
    licence: str | None
    doi: str | None = None
    version: int = 1
    typo: str | None = None  # the title's topic as first mistyped, until corrected

    @classmethod
    def made(cls, rng: random.Random, number: int) -> Collection:
        topic = rng.choice(list(TOPICS))
        discipline, places, kinds, publisher = TOPICS[topic]
        kind = rng.choice(kinds)
        first = rng.randint(1995, LAST_YEAR - 2)
        last = min(first + rng.randint(0, 4), LAST_YEAR - 1)
        published = date(last + 1, 1, 1) + timedelta(days=rng.randrange(365))
        collection = cls(
            number=number, topic=topic, discipline=discipline, kind=kind,
            resource_type=KINDS[kind][0], place=rng.choice(places), first_year=first,
            last_year=last, creators=rng.sample(PEOPLE, rng.randint(1, 3)),
            subjects=[topic, discipline], publisher=publisher,
            published=published, methods=rng.sample(METHODS, 1),
            # Some records go out before the depositor has named a licence, or with a typo.
            licence=None if rng.random() < 0.3 else rng.choice(LICENCES))
        if rng.random() < 0.2:
            collection.typo = mistyped(rng, topic)
        return collection

    @property
    def key(self) -> str:
        return f"collection-{self.number:04d}"

    def revise(self, rng: random.Random) -> None:
        """One change a curator makes: a correction or an addition, never a different
        collection (the topic, kind, place and creators first named stay)."""
        corrections = {
            "fix_typo": 4 if self.typo else 0,
            "clarify_licence": 3 if self.licence is None else 0,
            "mint_doi": 2 if self.doi is None else 0,
            "add_subject": 3 if set(MORE_SUBJECTS) - set(self.subjects) else 0,
            "add_creator": 2 if len(self.creators) < 6 else 0,
            "describe_method": 1 if set(METHODS) - set(self.methods) else 0,
            "add_data": 1,  # always possible: every change changes the record
        }
        names = [name for name, weight in corrections.items() if weight]
        name = rng.choices(names, weights=[corrections[name] for name in names])[0]
        getattr(self, name)(rng)

    def fix_typo(self, rng: random.Random) -> None:
        self.typo = None

    def clarify_licence(self, rng: random.Random) -> None:
        self.licence = rng.choice(LICENCES)

    def mint_doi(self, rng: random.Random) -> None:
        self.doi = f"https://doi.org/10.5555/demo.{self.number:04d}"

    def add_subject(self, rng: random.Random) -> None:
        self.subjects.append(rng.choice([s for s in MORE_SUBJECTS if s not in self.subjects]))

    def add_creator(self, rng: random.Random) -> None:
        self.creators.append(rng.choice([p for p in PEOPLE if p not in self.creators]))

    def describe_method(self, rng: random.Random) -> None:
        self.methods.append(rng.choice([m for m in METHODS if m not in self.methods]))

    def add_data(self, rng: random.Random) -> None:
        """A new version: another year of data when collecting goes on, else a corrected
        release of the same years."""
        self.version += 1
        if self.last_year < LAST_YEAR and self.resource_type == "Dataset":
            self.last_year += 1

    def years(self) -> str:
        if self.first_year == self.last_year:
            return str(self.first_year)
        return f"{self.first_year}\u2013{self.last_year}"

    def record(self) -> dict:
        topic = self.typo or self.topic
        summary = (f"{self.kind.capitalize()} {KINDS[self.kind][1]} {self.topic.lower()} in "
                   f"{self.place}, {self.years()}.")
        metadata = {
            "creators": list(self.creators),
            "subjects": list(self.subjects),
            "description": " ".join([summary, *self.methods]),
            "publisher": self.publisher,
            "published": self.published.isoformat(),
            "resource_type": self.resource_type,
            **({"licence": self.licence} if self.licence else {}),
            "language": "en",
            **({"doi": self.doi} if self.doi else {}),
            "place": self.place,
            "version": self.version,
        }
        return {
            "title": f"{topic}: {self.kind}, {self.place}, {self.years()}",
            "summary": summary,
            "metadata": metadata,
            "links": [{"href": f"https://data.example.org/collections/{self.key}",
                       "rel": "related", "type": "text/html", "title": "Landing page"}],
        }


def mistyped(rng: random.Random, text: str) -> str:
    """`text` with two neighbouring letters of one of its words swapped (a typo)."""
    places = [i for i in range(1, len(text) - 2)
              if text[i].isalpha() and text[i + 1].isalpha() and text[i] != text[i + 1]]
    i = rng.choice(places)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


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
