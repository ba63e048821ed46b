"""What checking records against a feed's record schema costs the write path, in one run.

    .venv/bin/python bench/schema_cost.py [--records 20000] [--trials 3] [--requests 300]
                                          [--sqlite]

Records carry ten metadata properties (bench/data.py `catalogue_record`); two feeds take
the same records, one declaring `CATALOGUE_SCHEMA` (ten properties: integers, an enum, a
date, a pattern, an array of objects) and one without a schema, so the only difference is
the check:

- batch ingest: `publishing.apply_batch`, batches of 1,000 puts of new records. Target:
  with the schema >= 0.8 x without.
- a single PUT: `PUT /api/feeds/<slug>/records/<key>` of one new record, through Django's
  WSGI handler in this process (token authentication, the producer's permissions, the
  JSON parser, the write, the answer), one request after another. Target: >= 0.9 x.

Each trial measures both sides, in alternating order; the script prints each trial, the
load average, and the medians of rates and ratios. PostgreSQL at 127.0.0.1:5432 (user
postgres, trust): it (re)creates the database `bench_schema` (BENCH_SCHEMA_DB); --sqlite:
a file in /tmp.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_SCHEMA_DB", "bench_schema")
BATCH = 1000
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": "100",
    "FEEDPUB_SEAL_ON_WRITE": "false",  # the check is timed, not the sealing after it
    "FEEDPUB_API_USER_RATE": "off",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only",
    "ALLOWED_HOSTS": "testserver",
}


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def new_feed(name: str, *, schema: bool):
    from archives.log.publishing import create_feed
    from bench.data import CATALOGUE_SCHEMA

    return create_feed(slug=f"{name}-{time.time_ns()}", title=f"Schema cost: {name}",
                       record_schema=CATALOGUE_SCHEMA if schema else None)


def ingest(records: int, *, schema: bool) -> float:
    from archives.log.publishing import apply_batch
    from bench.data import catalogue_record

    feed = new_feed("ingest", schema=schema)
    work = [[{"op": "put", "key": f"k{i}", "record": catalogue_record(i)}
             for i in range(first, min(first + BATCH, records))]
            for first in range(0, records, BATCH)]
    began = time.perf_counter()
    for operations in work:
        apply_batch(feed=feed, operations=operations)
    return records / (time.perf_counter() - began)


def producer_headers() -> dict[str, str]:
    from django.contrib.auth.models import Permission, User

    from archives.models import ApiToken

    user, _ = User.objects.get_or_create(username="bench-producer")
    user.user_permissions.set(Permission.objects.filter(
        codename__in=["add_record", "change_record"]))
    ApiToken.objects.filter(user=user, name="bench").delete()
    secret = ApiToken.issue(user=user, name="bench")[1]
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def single_puts(requests: int, *, schema: bool, headers: dict[str, str]) -> float:
    from django.test import Client

    from bench.data import catalogue_record

    feed = new_feed("put", schema=schema)
    client = Client()
    bodies = [json.dumps(catalogue_record(i)) for i in range(requests)]
    began = time.perf_counter()
    for i, body in enumerate(bodies):
        answer = client.put(f"/api/feeds/{feed.slug}/records/k{i}", body, secure=True,
                            content_type="application/json", **headers)
        if answer.status_code != 201:
            raise SystemExit(f"PUT answered {answer.status_code}: {answer.content[:300]!r}")
    return requests / (time.perf_counter() - began)


def measure(records: int, trials: int, requests: int) -> None:
    import django

    django.setup()
    from django.db import connection

    print(f"{connection.vendor}; {records:,} records a batch measurement, {requests} PUTs a "
          f"single-PUT one; load average {load()}", flush=True)
    headers = producer_headers()
    pairs = {"batch ingest, records/s": lambda schema: ingest(records, schema=schema),
             "single PUT, requests/s": lambda schema: single_puts(requests, schema=schema,
                                                                  headers=headers)}
    results = {name: [] for name in pairs}
    for trial in range(1, trials + 1):
        for name, run in pairs.items():
            # Without the schema first in odd trials, last in even ones: neither side always
            # runs on the warmer (or more loaded) machine.
            order = [False, True] if trial % 2 else [True, False]
            rates = {schema: run(schema) for schema in order}
            ratio = rates[True] / rates[False]
            results[name].append((rates[True], rates[False], ratio))
            print(f"trial {trial}: {name}: {rates[True]:,.0f} with the schema, "
                  f"{rates[False]:,.0f} without = {ratio:.2f} x (load average {load()})",
                  flush=True)
    print()
    for name, rows in results.items():
        real, floor, ratio = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"median of {trials}: {name}: {real:,.0f} with the schema, {floor:,.0f} "
              f"without; ratio {ratio:.2f} x (ratios {', '.join(f'{r[2]:.2f}' for r in rows)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--sqlite", action="store_true")
    options = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    sys.path.insert(0, str(ROOT))
    from bench.databases import fresh_database, migrate

    url = fresh_database(DB_NAME, sqlite=options.sqlite)
    env = {**os.environ, **ENV, "DATABASE_URL": url}
    migrate(ROOT, env, python)
    subprocess.run([python, __file__, "--measure", str(options.records), str(options.trials),
                    str(options.requests)], cwd=ROOT, check=True, env=env)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        sys.path.insert(0, str(ROOT))
        measure(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
