"""Snapshot throughput and memory: `manage.py snapshot` of a feed of N live records.

    .venv/bin/python bench/snapshot.py [--records 1000000]

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust); (re)creates the database
`bench_snapshot`. The feed's rows are written with COPY (this measures the snapshot, not
ingest: bench/run.py measures that), one create entry per record plus one update for a
tenth of them and one delete for a twentieth, so the cut has to pick each record's newest
entry; then sealed. The snapshot runs in a process of its own, whose peak RSS it reports.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "bench_snapshot"
ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": "100",
}


def write_feed(records: int, *, slug: str = "big", title: str = "Snapshot benchmark"):
    """A feed of `records` records written straight into the tables (COPY on PostgreSQL,
    bulk_create elsewhere), one create entry per record plus one update for a tenth of them
    and one delete for a twentieth; not sealed. Returns the feed."""
    from django.db import connection
    from psycopg.types.json import Jsonb

    from archives.db import fastsql
    from archives.log import publishing
    from archives.models import Entry, Feed, Record

    feed = publishing.create_feed(slug=slug, title=title)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    metadata = {"subject": "Soil carbon", "place": "Tasmania", "year": 2003, "version": 1}
    links = [{"href": "https://data.example.org/x", "rel": "related", "type": "text/html"}]
    copy = fastsql.can_copy()
    json = Jsonb if copy else (lambda value: value)
    changes = [(n, "create") for n in range(records)]
    changes += [(n, "update") for n in range(0, records, 10)]
    changes += [(n, "delete") for n in range(5, records, 20)]
    last = {n: seq for seq, (n, _) in enumerate(changes, start=1)}  # each record's newest
    stamp = {seq: start + timedelta(microseconds=seq) for seq in range(len(changes) + 1)}
    record_columns = ("feed_id", "key", "title", "summary", "metadata", "links", "created",
                      "updated", "datestamp", "deleted_at")
    record_rows = (
        (feed.pk, f"r{n:07d}", f"Record {n}", "A summary of a record.", json(metadata),
         json(links), stamp[n + 1], stamp[last[n]], stamp[last[n]],
         stamp[last[n]] if n % 20 == 5 else None) for n in range(records))
    _write(Record, record_columns, record_rows, copy)
    ids = dict(Record.objects.filter(feed=feed).values_list("key", "pk"))
    entry_rows = (
        (feed.pk, seq, ids[f"r{n:07d}"], kind, stamp[seq], f"Record {n}",
         "A summary of a record.", json(links), None if kind == "delete" else json(metadata))
        for seq, (n, kind) in enumerate(changes, start=1))
    _write(Entry, ("feed_id", "seq", "record_id", "kind", "updated", "title", "summary",
                   "links", "metadata"), entry_rows, copy)
    Feed.objects.filter(pk=feed.pk).update(last_seq=len(changes), last_updated=stamp[len(changes)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return Feed.objects.get(pk=feed.pk)


def _write(model, columns, rows, copy: bool) -> None:
    from itertools import islice

    from archives.db import fastsql

    if copy:
        fastsql.copy_rows(model, columns, rows)
        return
    names = [model._meta.get_field(column).attname for column in columns]
    while batch := list(islice(rows, 5000)):
        model.objects.bulk_create([model(**dict(zip(names, row, strict=True)))
                                   for row in batch])


def populate(records: int) -> None:
    import django

    django.setup()
    from archives.log.sealing import seal_feed

    feed = write_feed(records)
    started = time.perf_counter()
    sealed = seal_feed(feed)
    print(f"{records:,} records, {feed.last_seq:,} entries; sealed {len(sealed):,} pages "
          f"in {time.perf_counter() - started:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    options = parser.parse_args()
    os.environ.update(ENV)
    sys.path.insert(0, str(ROOT))
    python = str(ROOT / ".venv" / "bin" / "python")
    subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB_NAME],
                   check=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB_NAME], check=True)
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    subprocess.run([python, __file__, "--populate", str(options.records)], cwd=ROOT,
                   check=True)
    subprocess.run([python, __file__, "--take"], cwd=ROOT, check=True)


def take() -> None:
    """In its own process, so that its peak RSS is the snapshot's alone."""
    import django

    django.setup()
    from archives.models import Feed
    from archives.storage.snapshots import take_snapshot

    feed = Feed.objects.get(slug="big")
    started = time.perf_counter()
    snapshot = take_snapshot(feed)
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"snapshot: {snapshot.records:,} live records ({snapshot.pages:,} pages) in "
          f"{seconds:.1f} s = {snapshot.records / seconds:,.0f} records/s; "
          f"peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    if sys.argv[1:2] in (["--populate"], ["--take"]):
        os.environ.update(ENV)
        sys.path.insert(0, str(ROOT))
        populate(int(sys.argv[2])) if sys.argv[1] == "--populate" else take()
    else:
        main()
