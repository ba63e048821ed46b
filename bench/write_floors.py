"""The write paths against the floor each could reach, measured in the same run.

    .venv/bin/python bench/write_floors.py [--records 20000] [--trials 3] [--sqlite]
                                           [--only ingest|sealing]

Absolute write rates moved 1.7 x between two machines of the same kind, so each figure
comes with its floor from the same trial, and the ratio is what counts:

- batch ingest: `publishing.apply_batch`, batches of 1,000 puts of new records (the
  records bench/run.py writes), against the same rows put into the same tables with no
  validation, no lookup and no lock: per batch one transaction that reserves the records'
  ids and COPYs the records, then their entries (PostgreSQL; on SQLite `executemany`
  INSERTs). Target: apply_batch >= 0.5 x the floor.
- sealing: `sealing.seal_feed` of a feed of `--records` entries (written by COPY, unsealed;
  pages of 100), against rendering the same pages in memory with no database: every format
  sealing stores (the Atom page, `ArchiveDocument.freeze`; the linked page,
  `linkedpages.render_page`; the RSS twin, `RssArchiveDocument.freeze`), from rows read
  before the clock starts. Target: sealing >= 0.5 x the floor.

Each trial measures both sides of both pairs on new feeds, the floor and the real path in
alternating order; the script prints each trial, the load average, and the medians of rates
and ratios over the trials. PostgreSQL at 127.0.0.1:5432 (user postgres, trust): it
(re)creates the database `bench_floors` (BENCH_FLOORS_DB); --sqlite: a file in /tmp.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_FLOORS_DB", "bench_floors")
SQLITE_PATH = Path(f"/tmp/{DB_NAME}.sqlite3")
PAGE_SIZE = 100
BATCH = 1000
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": str(PAGE_SIZE),
    "FEEDPUB_SEAL_ON_WRITE": "false",  # ingest and sealing are timed apart
    "DEBUG": "false",  # as in production: DEBUG keeps every query in memory
    "SECRET_KEY": "bench-only",
}


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def new_feed(name: str):
    from archives.log.publishing import create_feed

    return create_feed(slug=f"{name}-{time.time_ns()}", title=f"Write floors: {name}",
                       page_size=PAGE_SIZE)


def batches(records: int):
    """The operations bench/run.py sends: puts of new records, BATCH a batch."""
    from bench.data import record

    for first in range(0, records, BATCH):
        yield [{"op": "put", "key": f"k{i}", "record": record(i)}
               for i in range(first, min(first + BATCH, records))]


# Batch ingest ---------------------------------------------------------------------------

def ingest_apply_batch(records: int) -> float:
    from archives.log.publishing import apply_batch

    feed = new_feed("ingest")
    work = list(batches(records))
    began = time.perf_counter()
    for operations in work:
        apply_batch(feed=feed, operations=operations)
    return records / (time.perf_counter() - began)


def ingest_floor(records: int) -> float:
    """The same rows into the same tables, with nothing checked: the least a batch costs."""
    from django.db import connection, transaction
    from django.utils import timezone

    from archives.db import fastsql
    from archives.models import Entry, Record

    feed = new_feed("floor")
    work = list(batches(records))
    copy = fastsql.can_copy()
    # What a new record and its entry must hold; the rest is the columns' database defaults.
    record_columns = ("id", "feed_id", "key", "title", "summary", "metadata", "links",
                      "created", "updated", "datestamp")
    entry_columns = ("feed_id", "seq", "record_id", "kind", "updated", "title", "summary",
                     "links", "metadata")
    seq = 0
    began = time.perf_counter()
    for operations in work:
        with transaction.atomic():
            now = timezone.now()
            stamps = [now + timedelta(microseconds=n) for n in range(len(operations))]
            if copy:
                from psycopg.types.json import Jsonb

                with connection.cursor() as cursor:
                    cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id')) "
                                   "FROM generate_series(1, %s)",
                                   [Record._meta.db_table, len(operations)])
                    ids = [row[0] for row in cursor.fetchall()]
                fastsql.copy_rows(Record, record_columns, (
                    (pk, feed.pk, op["key"], op["record"]["title"], op["record"]["summary"],
                     Jsonb(op["record"]["metadata"]), Jsonb(op["record"]["links"]), stamp,
                     stamp, stamp) for pk, op, stamp in zip(ids, operations, stamps, strict=True)))
                fastsql.copy_rows(Entry, entry_columns, (
                    (feed.pk, seq + n, pk, "create", stamp, op["record"]["title"],
                     op["record"]["summary"], Jsonb(op["record"]["links"]),
                     Jsonb(op["record"]["metadata"]))
                    for n, (pk, op, stamp) in enumerate(zip(ids, operations, stamps,
                                                            strict=True), start=1)))
            else:
                _sqlite_floor(feed, operations, stamps, seq)
        seq += len(operations)
    return records / (time.perf_counter() - began)


def _sqlite_floor(feed, operations, stamps, seq) -> None:
    """SQLite has no COPY: one executemany INSERT a table, ids read back by key."""
    import json

    from django.db import connection

    from archives.models import Entry, Record

    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {Record._meta.db_table} (feed_id, key, title, summary, metadata, "  # noqa: S608
            "links, created, updated, datestamp) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(feed.pk, op["key"], op["record"]["title"], op["record"]["summary"],
              json.dumps(op["record"]["metadata"]), json.dumps(op["record"]["links"]),
              adapt(stamp), adapt(stamp), adapt(stamp))
             for op, stamp in zip(operations, stamps, strict=True)])
        cursor.execute(f"SELECT key, id FROM {Record._meta.db_table} WHERE feed_id = %s "  # noqa: S608
                       f"AND id > (SELECT coalesce(max(record_id), 0) FROM "
                       f"{Entry._meta.db_table} WHERE feed_id = %s)", [feed.pk, feed.pk])
        ids = dict(cursor.fetchall())
        cursor.executemany(
            f"INSERT INTO {Entry._meta.db_table} (feed_id, seq, record_id, kind, updated, "  # noqa: S608
            "title, summary, links, metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(feed.pk, seq + n, ids[op["key"]], "create", adapt(stamp), op["record"]["title"],
              op["record"]["summary"], json.dumps(op["record"]["links"]),
              json.dumps(op["record"]["metadata"]))
             for n, (op, stamp) in enumerate(zip(operations, stamps, strict=True), start=1)])


# Sealing --------------------------------------------------------------------------------

def unsealed_feed(entries: int):
    """A feed of `entries` create entries (bench/run.py's records), written by COPY (bulk
    inserts on SQLite), not sealed."""
    from django.db import connection

    from archives.db import fastsql
    from archives.models import Entry, Feed, Record
    from bench.data import record

    feed = new_feed("seal")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    copy = fastsql.can_copy()
    if copy:
        from psycopg.types.json import Jsonb as json
    else:
        json = lambda value: value  # noqa: E731
    data = [record(n) for n in range(entries)]
    stamps = [start + timedelta(microseconds=n + 1) for n in range(entries)]
    columns = ("feed_id", "key", "title", "summary", "metadata", "links", "created", "updated",
               "datestamp")
    rows = ((feed.pk, f"k{n}", d["title"], d["summary"], json(d["metadata"]),
             json(d["links"]), stamps[n], stamps[n], stamps[n]) for n, d in enumerate(data))
    if copy:
        fastsql.copy_rows(Record, columns, rows)
    else:
        Record.objects.bulk_create([Record(**dict(zip(columns, row, strict=True)))
                                    for row in rows], batch_size=2000)
    ids = dict(Record.objects.filter(feed=feed).values_list("key", "pk"))
    rows = ((feed.pk, n + 1, ids[f"k{n}"], "create", stamps[n], d["title"], d["summary"],
             json(d["links"]), json(d["metadata"])) for n, d in enumerate(data))
    entry_columns = ("feed_id", "seq", "record_id", "kind", "updated", "title", "summary",
                     "links", "metadata")
    if copy:
        fastsql.copy_rows(Entry, entry_columns, rows)
    else:
        names = [Entry._meta.get_field(column).attname for column in entry_columns]
        Entry.objects.bulk_create([Entry(**dict(zip(names, row, strict=True))) for row in rows],
                                  batch_size=2000)
    Feed.objects.filter(pk=feed.pk).update(last_seq=entries, last_updated=stamps[-1])
    if copy:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return Feed.objects.get(pk=feed.pk)


def seal(entries: int) -> float:
    from archives.log.sealing import seal_feed

    feed = unsealed_feed(entries)
    began = time.perf_counter()
    sealed = seal_feed(feed)
    seconds = time.perf_counter() - began
    assert len(sealed) == entries // PAGE_SIZE, len(sealed)
    return entries / seconds


def seal_floor(entries: int) -> float:
    """Every format sealing stores, rendered for the same pages with no database: the rows
    are read before the clock starts, pages link their next page as sealing's do."""
    from archives.documents import atom, linkedpages
    from archives.documents.feeds import ArchiveDocument, RssArchiveDocument

    feed = unsealed_feed(entries)
    rows = atom.entry_rows(feed, 1, entries)
    pages = entries // PAGE_SIZE
    began = time.perf_counter()
    for number in range(1, pages + 1):
        page_rows = rows[(number - 1) * PAGE_SIZE:number * PAGE_SIZE]
        ArchiveDocument.freeze(feed, number, page_rows, has_next=number < pages)
        linkedpages.render_page(feed, page_rows)
        RssArchiveDocument.freeze(feed, number, page_rows, has_next=number < pages)
    return entries / (time.perf_counter() - began)


# The run --------------------------------------------------------------------------------

def measure(records: int, trials: int, only: str) -> None:
    import django

    django.setup()
    from django.db import connection

    print(f"{connection.vendor}; {records:,} records / entries a measurement; "
          f"load average {load()}", flush=True)
    pairs = {"batch ingest, records/s": (ingest_apply_batch, ingest_floor),
             "sealing, entries/s": (seal, seal_floor)}
    pairs = {name: pair for name, pair in pairs.items() if name.startswith(only)}
    results = {name: [] for name in pairs}
    for trial in range(1, trials + 1):
        for name, (real, floor) in pairs.items():
            # The floor first in odd trials, last in even ones: neither side always runs
            # on the warmer (or more loaded) machine.
            order = [floor, real] if trial % 2 else [real, floor]
            rates = {function: function(records) for function in order}
            ratio = rates[real] / rates[floor]
            results[name].append((rates[real], rates[floor], ratio))
            print(f"trial {trial}: {name}: {rates[real]:,.0f} against a floor of "
                  f"{rates[floor]:,.0f} = {ratio:.2f} x (load average {load()})", flush=True)
    print()
    for name, rows in results.items():
        real, floor, ratio = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"median of {trials}: {name}: {real:,.0f} against a floor of {floor:,.0f}; "
              f"ratio {ratio:.2f} x (ratios {', '.join(f'{row[2]:.2f}' for row in rows)})")
    print(f"load average {load()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--only", choices=("ingest", "sealing"), help="one pair only")
    options = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    if options.sqlite:
        SQLITE_PATH.unlink(missing_ok=True)
    else:
        subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB_NAME],
                       check=True)
        subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB_NAME], check=True)
    env = environment(options.sqlite)
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True, env=env)
    subprocess.run([python, __file__, "--measure", str(options.records), str(options.trials),
                    {"ingest": "batch", "sealing": "seal"}.get(options.only, "")],
                   cwd=ROOT, check=True, env=env)


def environment(sqlite: bool) -> dict[str, str]:
    url = f"sqlite:///{SQLITE_PATH}" if sqlite else \
        f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
    return {**os.environ, **ENV, "DATABASE_URL": url}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        sys.path.insert(0, str(ROOT))
        measure(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        main()
