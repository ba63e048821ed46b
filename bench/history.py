"""What reading a record's history costs: `GET /api/feeds/<slug>/records/<key>/history` of a
record with 10,000 versions, against the goal of 100 ms.

    .venv/bin/python bench/history.py [--versions 10000] [--requests 50] [--sqlite]

The record is written through the write path, 1,000 puts a batch, each changing its title,
by an actor with a user, a token name and a note (as an import or a sync would leave them).
Then the history is read through Django's WSGI handler in this process (token
authentication, the permission check, the query, the JSON answer), one request after
another, and the script prints the median, p95 and slowest time, the answer's size, and the
same for a record of one version (what the request costs whatever the history). PostgreSQL
at 127.0.0.1:5432 (user postgres, trust): it (re)creates the database `bench_history`
(BENCH_HISTORY_DB); --sqlite: a file in /tmp. docs/performance/history.md has its figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_HISTORY_DB", "bench_history")
BATCH = 1000
GOAL_MS = 100
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_SEAL_ON_WRITE": "false",  # the read is timed, not the sealing of the writes
    "FEEDPUB_API_USER_RATE": "off",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only",
    "ALLOWED_HOSTS": "testserver",
}


def write_versions(feed, key: str, versions: int, actor) -> None:
    from archives.log.publishing import apply_batch
    from bench.data import catalogue_record

    for first in range(0, versions, BATCH):
        apply_batch(feed=feed, actor=actor, operations=[
            {"op": "put", "key": key,
             "record": catalogue_record(1) | {"title": f"Version {n + 1}"}}
            for n in range(first, min(first + BATCH, versions))])


def credentials(user) -> dict[str, str]:
    """A producer's `Authorization` header: a new API token of theirs."""
    from archives.models import ApiToken

    _token, secret = ApiToken.issue(user=user, name=f"bench {time.time_ns()}")
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def timed(path: str, requests: int, headers: dict[str, str]) -> tuple[list[float], int]:
    """Milliseconds of each GET of `path` (after one not timed) and the answer's bytes."""
    from django.test import Client

    client = Client()
    first = client.get(path, secure=True, **headers)
    if first.status_code != 200:
        raise SystemExit(f"GET {path} answered {first.status_code}: {first.content[:300]!r}")
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        client.get(path, secure=True, **headers)
        times.append((time.perf_counter() - began) * 1000)
    return times, len(first.content)


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1]


def measure(versions: int, requests: int) -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection

    from archives.log.access import Actor
    from archives.log.publishing import create_feed
    from archives.models import FeedRole, Via

    feed = create_feed(slug=f"history-{time.time_ns()}", title="History cost")
    user = User.objects.create_user(f"bench-{time.time_ns()}")
    FeedRole.objects.create(feed=feed, user=user, role=FeedRole.Role.PRODUCER)
    actor = Actor(via=Via.IMPORT, user=user, note="Nightly catalogue export, run 2026-11-24")
    began = time.perf_counter()
    write_versions(feed, "many", versions, actor)
    write_versions(feed, "one", 1, actor)
    print(f"{connection.vendor}: {versions:,} versions written in "
          f"{time.perf_counter() - began:.1f} s; load average "
          f"{' '.join(f'{value:.1f}' for value in os.getloadavg())}", flush=True)
    headers = credentials(user)
    for key, count in (("one", 1), ("many", versions)):
        times, size = timed(f"/api/feeds/{feed.slug}/records/{key}/history", requests, headers)
        median = statistics.median(times)
        verdict = "" if key == "one" else (
            f"; goal {GOAL_MS} ms: {'met' if p95(times) < GOAL_MS else 'NOT met'}")
        print(f"history of {count:,} version(s), {size:,} bytes, {requests} requests: median "
              f"{median:.1f} ms, p95 {p95(times):.1f} ms, slowest {max(times):.1f} ms"
              f"{verdict}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--sqlite", action="store_true")
    options = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    sys.path.insert(0, str(ROOT))
    from bench.databases import fresh_database, migrate

    url = fresh_database(DB_NAME, sqlite=options.sqlite)
    env = {**os.environ, **ENV, "DATABASE_URL": url}
    migrate(ROOT, env, python)
    subprocess.run([python, __file__, "--measure", str(options.versions),
                    str(options.requests)], cwd=ROOT, check=True, env=env)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        sys.path.insert(0, str(ROOT))
        measure(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
