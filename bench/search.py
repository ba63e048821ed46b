"""The search page's query on 1,000,000 records, without and with the trigram index of
migration 0017 on the folded key, title and summary (PostgreSQL).

    .venv/bin/python bench/search.py [--records 1000000] [--runs 5]

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust); (re)creates the database
`bench_search` (BENCH_SEARCH_DB). One feed of N records written with COPY (keys r0000000...,
titles of a few words drawn from small vocabularies, so that a word matches a share of the
records as real titles do), then, in one run, each query timed `--runs` times through
archives/html/pages.py search() (the page's own query: ORDER BY key, SEARCH_LIMIT + 1 rows
at most): first without the index (dropped before the records are written), then after
building it as migration 0017 does (its build time and size reported too).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_SEARCH_DB", "bench_search")
os.environ.update({
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
})
sys.path.insert(0, str(ROOT))

SUBJECTS = ["Soil carbon", "River flow", "Bird counts", "Sea temperature", "Rainfall",
            "Forest cover", "Air quality", "Glacier mass", "Crop yield", "Coral bleaching",
            "Groundwater", "Wind speed", "Snow depth", "Fish stocks", "Pollen"]
PLACES = ["Tasmania", "Lapland", "Patagonia", "Bavaria", "Hokkaido", "Yukon", "Kerala",
          "Andalusia", "Sahel", "Borneo", "Iceland", "Quebec", "Gobi", "Tyrol", "Natal",
          "Oregon", "Zeeland", "Fiji", "Crete", "Dakota"]
# (what it is, the query): rare to common, and one the indexes cannot serve (2 characters)
QUERIES = [
    ("one key", "r0754321"),
    ("a title's number (1 record)", "survey 754321"),
    ("accents and case added (1 record)", "LÁPLAND, SURVEY 754321"),
    ("in summaries (1/1009)", "otautahi station 1008"),
    ("no match", "volcanic ash"),
    ("a place (1/20 of the records)", "patagonia"),
    ("a subject (1/15)", "glacier mass"),
    ("every record", "survey"),
    ("2 characters", "zx"),
]


def psql(sql: str, database: str = "postgres") -> str:
    return subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database,  # noqa: S607
                           "-Atqc", sql], check=True, capture_output=True, text=True).stdout


def manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True)  # noqa: S603


def write_records(records: int) -> None:
    from django.db import connection
    from psycopg.types.json import Jsonb

    from archives.log import publishing

    feed = publishing.create_feed(slug="search", title="Search benchmark")
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    columns = ("feed_id", "key", "title", "summary", "metadata", "links", "created",
               "updated", "deleted_at")
    with connection.cursor() as cursor, cursor.connection.cursor().copy(
            f"COPY archives_record ({', '.join(columns)}) FROM STDIN") as copy:
        for n in range(records):
            when = stamp + timedelta(seconds=n)
            copy.write_row((feed.pk, f"r{n:07d}",
                            f"{SUBJECTS[n % 15]} in {PLACES[n % 20]}, survey {n}",
                            f"Measured {n % 97} times at {PLACES[n % 19]} by Ōtautahi station "
                            f"{n % 1009}", Jsonb({}), Jsonb([]), when, when, None))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE archives_record")


def time_queries(runs: int) -> dict[str, tuple[float, int]]:
    from archives.html.pages import search
    from archives.models import Feed

    feed = Feed.objects.get(slug="search")
    timings = {}
    for label, query in QUERIES:
        search(feed, query, None)  # warm: pages in PostgreSQL's buffers, as a busy server's
        seconds = []
        for _ in range(runs):
            began = time.perf_counter()
            context = search(feed, query, None)
            seconds.append(time.perf_counter() - began)
        found = context["results"].paginator.count if "results" in context else 0
        timings[label] = (statistics.median(seconds), found)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    psql(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
    psql(f'CREATE DATABASE "{DB_NAME}"')
    manage("migrate", "-v0")
    import django

    django.setup()
    from django.db import connection

    index = importlib.import_module("archives.migrations.0017_record_search_folded").INDEX
    psql("DROP INDEX record_search_trgm", DB_NAME)
    began = time.perf_counter()
    write_records(options.records)
    print(f"{options.records:,} records written in {time.perf_counter() - began:.0f} s",
          flush=True)
    before = time_queries(options.runs)
    connection.close()
    began = time.perf_counter()
    psql(index, DB_NAME)
    built = time.perf_counter() - began
    psql("ANALYZE archives_record", DB_NAME)
    size = psql("SELECT pg_size_pretty(pg_relation_size('record_search_trgm'))", DB_NAME).strip()
    table = psql("SELECT pg_size_pretty(pg_relation_size('archives_record'))", DB_NAME).strip()
    print(f"the trigram index: built in {built:.0f} s, {size} (the table: {table})")
    after = time_queries(options.runs)
    print("\n| query | found (SEARCH_LIMIT at most) | no index | trigram index | ratio |\n"
          "|---|---|---|---|---|")
    for label, query in QUERIES:
        (slow, found), (fast, _) = before[label], after[label]
        print(f"| {label}: `{query}` | {found} | {1000 * slow:.1f} ms | {1000 * fast:.1f} ms | "
              f"{slow / fast:.1f} x |")
    print(f"\nMachine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"median of {options.runs} runs each")


if __name__ == "__main__":
    main()
