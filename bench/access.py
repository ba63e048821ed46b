"""What checking who may write costs: single PUTs and batch ingest by a producer of the feed
with a scoped token, against the same by the global `producers` group, and against a
checkout from before per-feed roles and tokens (`--base`), all measured in the same run.

    .venv/bin/python bench/access.py --base /path/to/older/checkout [--trials 5]
                                     [--rounds 6] [--requests 200] [--batches 2]

Three sides, each in processes of its own with its checkout first on the path:

- `base, group`: the older checkout; a user in the `producers` group, its token DRF's;
- `head, group`: this checkout; the same user, with an unscoped token;
- `head, role + scoped token`: this checkout; a user with no global permission, the
  producer role on the feeds written, and a token scoped to them (the rights are read with
  the locked feed row: no query of their own).

Each side's kinds are measured in one process, interleaved round by round (`--rounds`),
so that they share its state and differ only by who writes; the sides alternate in
processes of their own (`--trials`). Each round is, through Django's WSGI handler (no HTTP
server, no client: a request's own cost, as bench/single_put.py's in-process part),
`--requests` single PUTs of new records (`PUT /api/feeds/<slug>/records/<key>`, ms of CPU
and of wall a request) and `--batches` batches of 1,000 new records (`POST .../batch`, µs of
CPU a record). Sealing on write is off and throttling too: they cost the same on every
side. Printed: each trial's medians, then the medians of the ratios of trials: role
against group in the same processes (the check's own cost), head against base across
processes (noisier: a few %). Target: within 5 %.

PostgreSQL at 127.0.0.1:5432 (user postgres, trust): databases `bench_access_base` and
`bench_access_head`, (re)created and migrated by each side's checkout.
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
PAGE_SIZE = 100
BATCH = 1000
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only-" + "k" * 50,
    "SECURE_SSL_REDIRECT": "false",
    "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
    "FEEDPUB_BASE_URL": "http://127.0.0.1:8000",
    "FEEDPUB_SEAL_ON_WRITE": "false",
    "FEEDPUB_API_USER_RATE": "off",
    "FEEDPUB_SNAPSHOT_EVERY": "0",
    "LOG_LEVEL": "WARNING",
}
SIDES = (("base", "group"), ("head", "group"), ("head", "role"))
LABELS = {"group": "group", "role": "role + scoped token"}


def producer(kind: str, feeds: list) -> str:
    """A producer of `feeds` (by the global group, or by a role on each) and its token."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(f"producer-{time.time_ns()}")
    try:
        from archives.models import ApiToken, FeedRole
    except ImportError:  # a checkout from before API tokens: DRF's
        from rest_framework.authtoken.models import Token

        user.groups.add(Group.objects.get(name="producers"))
        return Token.objects.create(user=user).key
    if kind == "group":
        user.groups.add(Group.objects.get(name="producers"))
        return ApiToken.issue(user=user, name="bench")[1]
    for feed in feeds:
        FeedRole.objects.create(feed=feed, user=user, role=FeedRole.Role.PRODUCER)
    return ApiToken.issue(user=user, name="bench", feeds=feeds)[1]


def work(kinds: list[str], requests: int, batches: int, rounds: int) -> dict[str, dict]:
    """One side's measurement, in this process (its checkout on the path): its kinds
    interleaved, round by round, so that they share the process's state (caches, memory,
    the database's) and differ only by who writes."""
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import RequestFactory

    from archives.log.publishing import create_feed
    from bench.data import record

    handler, factory = WSGIHandler(), RequestFactory()
    body = json.dumps(record(7))

    def answer(request) -> None:
        statuses: list[str] = []
        response = handler(request.environ, lambda status, headers: statuses.append(status))
        b"".join(response)
        response.close()
        if not statuses[0].startswith("20"):
            raise RuntimeError(f"{request.environ['PATH_INFO']}: {statuses[0]}")

    writers = {}
    for kind in kinds:
        stamp = time.time_ns()
        feeds = [create_feed(slug=f"{name}-{kind}-{stamp}", title=f"Access: {name}",
                             page_size=PAGE_SIZE) for name in ("puts", "batches")]
        secret = producer(kind, feeds)
        writers[kind] = feeds, {"HTTP_AUTHORIZATION": f"Token {secret}",
                                "content_type": "application/json"}
        answer(factory.put(f"/api/feeds/{feeds[0].slug}/records/first", body,
                           **writers[kind][1]))  # not timed: the first request of a kind

    def batch(kind: str, n: int):
        feeds, auth = writers[kind]
        operations = [{"op": "put", "key": f"b{n}-{i}", "record": record(n * BATCH + i)}
                      for i in range(BATCH)]
        return factory.post(f"/api/feeds/{feeds[1].slug}/batch",
                            json.dumps({"operations": operations}), **auth)

    measured: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    for round_ in range(rounds):
        for kind in kinds if round_ % 2 == 0 else reversed(kinds):
            feeds, auth = writers[kind]
            puts = [factory.put(f"/api/feeds/{feeds[0].slug}/records/k{round_}-{n}", body,
                                **auth) for n in range(requests)]
            posts = [batch(kind, round_ * batches + n) for n in range(batches)]
            wall, cpu = time.perf_counter(), time.process_time()
            for request in puts:
                answer(request)
            figures = measured[kind]
            figures.setdefault("put_wall_ms", []).append(
                1000 * (time.perf_counter() - wall) / requests)
            figures.setdefault("put_cpu_ms", []).append(
                1000 * (time.process_time() - cpu) / requests)
            cpu = time.process_time()
            for request in posts:
                answer(request)
            figures.setdefault("batch_cpu_us", []).append(
                1e6 * (time.process_time() - cpu) / (batches * BATCH))
    return {kind: {name: statistics.median(values) for name, values in figures.items()}
            for kind, figures in measured.items()}


def side_env(checkout: Path, name: str) -> dict[str, str]:
    return {**os.environ, **ENV,
            "PYTHONPATH": f"{checkout}:{checkout / 'consumer'}",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/bench_access_{name}"}


def prepare(checkout: Path, name: str) -> None:
    """A fresh database for the side `name`, migrated by its checkout."""
    sys.path.insert(0, str(ROOT))
    from bench.databases import fresh_database, migrate

    fresh_database(f"bench_access_{name}")
    migrate(checkout, side_env(checkout, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="the older checkout to compare against")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6, help="of each kind, in a trial")
    parser.add_argument("--requests", type=int, default=200, help="single PUTs a round")
    parser.add_argument("--batches", type=int, default=2, help="batches a round")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        print(json.dumps(work(options.worker.split(","), options.requests, options.batches,
                              options.rounds)))
        return
    if options.base is None:
        parser.error("--base is needed: the checkout to compare against")
    checkouts = {"base": options.base.resolve(), "head": ROOT}
    for name, checkout in checkouts.items():
        prepare(checkout, name)
    results: dict[tuple[str, str], list[dict[str, float]]] = {side: [] for side in SIDES}
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    for trial in range(options.trials):
        for name in ("base", "head") if trial % 2 == 0 else ("head", "base"):
            kinds = [kind for side, kind in SIDES if side == name]
            # This file from this checkout, its imports from the side's (PYTHONPATH first).
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", ",".join(kinds),
                 "--requests", str(options.requests), "--batches", str(options.batches),
                 "--rounds", str(options.rounds)],
                env=side_env(checkouts[name], name), check=True, capture_output=True,
                text=True, cwd=checkouts[name])
            for kind, figures in json.loads(done.stdout.strip().splitlines()[-1]).items():
                results[name, kind].append(figures)
                print(f"trial {trial + 1} {name}, {LABELS[kind]}: "
                      + ", ".join(f"{key} {value:.3f}" for key, value in figures.items()),
                      flush=True)
    medians = {side: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
               for side, runs in results.items()}
    print(f"\nmedians of {options.trials} trials, load average {os.getloadavg()[0]:.1f}")
    for side, figures in medians.items():
        print(f"  {side[0]}, {LABELS[side[1]]}: " + ", ".join(
            f"{key} {value:.3f}" for key, value in figures.items()))
    # Across processes (base against head) and within one (role against group).
    for label, (side, against) in {
            "head, group / base, group": (("head", "group"), ("base", "group")),
            "head, role + scoped token / head, group": (("head", "role"), ("head", "group")),
            "head, role + scoped token / base, group": (("head", "role"), ("base", "group")),
    }.items():
        ratios = {key: statistics.median(run[key] / other[key] for run, other in
                                         zip(results[side], results[against], strict=True))
                  for key in medians[side]}
        print(f"  {label}: " + ", ".join(f"{key} {value:.3f}x" for key, value in ratios.items()))


if __name__ == "__main__":
    main()
