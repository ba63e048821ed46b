"""A single PUT against its floors, in one run, with the sealer running beside it.

    .venv/bin/python bench/single_put.py [--seconds 10] [--rounds 2] [--clients 1,8,32]
                                   [--requests 300]

Most producers write one record at a time. For 1, 8 and 32 concurrent clients this
measures, in turn and `--rounds` times over (each figure the mean of its rounds):

- `PUT /api/feeds/<slug>/records/<key>`: the producer API as shipped (seal on write on),
  one new record a request;
- the batch of one operation: `POST /api/feeds/<slug>/batch` with one put;
- a minimal DRF view (bench/minimal_put.py): the same token authentication and model
  permission, the same JSON body, the same transaction written plainly with the ORM;
- the raw transaction over psycopg, no HTTP: lock the feed, insert the record, insert its
  entry, advance the feed's counters, commit.

The HTTP ones are served by gunicorn as deployed (`deploy/entrypoint.sh web`, that is
deploy/gunicorn.conf.py: sync workers, WEB_CONCURRENCY=4 here as in bench/run.py) and
loaded by wrk (`-t1` for one client, else `-t2`); the sealer runs beside them all the
time (`deploy/entrypoint.sh sealer`, SEAL_INTERVAL=5 as in .env.example), as in the
compose file. API throttling is off (FEEDPUB_API_USER_RATE=off), as the minimal view has
none: its count in the shared cache costs a request ~2 ms in the database, under 1 ms in
Redis (docs/deploying/settings.md, the shared cache). The producer is an
ordinary user with the add_record and change_record permissions (not a superuser, whose
permission checks cost nothing).

Then each HTTP kind once more, in this process through Django's WSGI handler, one request
after another (`--requests` a round, 3 rounds): each request's own cost, which a loaded
machine hides from wrk (the load generator and the server share its two cores).

PostgreSQL at 127.0.0.1:5432 (user postgres, trust); it (re)creates the database
`bench_put` (BENCH_PUT_DB) and serves on 127.0.0.1:8111 (BENCH_PUT_PORT). Each
measurement writes new keys to a new feed (pages of 100 entries).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "put"
DB_NAME = os.environ.get("BENCH_PUT_DB", "bench_put")
PORT = int(os.environ.get("BENCH_PUT_PORT", "8111"))
WEB = f"http://127.0.0.1:{PORT}"
DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
PAGE_SIZE = 100
ENV = {
    "DATABASE_URL": DATABASE_URL,
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only-" + "k" * 50,
    "SECURE_SSL_REDIRECT": "false",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "FEEDPUB_BASE_URL": WEB,
    "FEEDPUB_PAGE_SIZE": str(PAGE_SIZE),
    "FEEDPUB_API_USER_RATE": "off",
    "GUNICORN_BIND": f"127.0.0.1:{PORT}",
    "WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "4"),
    "SEAL_INTERVAL": "5",
    "FEEDPUB_SNAPSHOT_EVERY": "0",
    "LOG_LEVEL": "WARNING",
    "GUNICORN_LOGLEVEL": "warning",
    "FEEDPUB_PAGES_DIR": str(WORK / "pages"),
    "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
}
sys.path.insert(0, str(ROOT))

from bench.data import record  # noqa: E402

# (bench.run sets its own environment when imported: ours goes on top of it.)
from bench.run import _latency, sh, start, stop, wait_for  # noqa: E402

os.environ.update(ENV)

BODY = json.dumps(record(7))

# One new key a request, unique per wrk thread: `id` is the thread's number.
LUA = """
local threads = 0
function setup(thread) threads = threads + 1; thread:set("id", threads) end
local n = 0
local headers = {["Authorization"] = "Token %(token)s", ["Content-Type"] = "application/json"}
function request()
  n = n + 1
  local key = "t" .. id .. "-" .. n
  %(request)s
end
"""
PUT_REQUEST = 'return wrk.format("PUT", "%(prefix)s" .. key, headers, [[%(body)s]])'
BATCH_REQUEST = ('return wrk.format("POST", "%(path)s", headers, [[{"operations": '
                 '[{"op": "put", "key": "]] .. key .. [[", "record": %(body)s}]}]])')


def fresh_database() -> None:
    admin = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"]
    sh(*admin, f'DROP DATABASE IF EXISTS "{DB_NAME}"')
    sh(*admin, f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(["rm", "-rf", ENV["FEEDPUB_PAGES_DIR"]], check=True)


def producer_token() -> str:
    """An ordinary user allowed to create and change records, and its API token."""
    from django.contrib.auth.models import Permission, User

    from archives.models import ApiToken

    user = User.objects.create_user("producer")
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="archives", codename__in=["add_record", "change_record"]))
    return ApiToken.issue(user=user, name="bench")[1]


def new_feed(label: str):
    from archives.log.publishing import create_feed

    return create_feed(slug=f"{label}-{time.time_ns()}", title=f"Single puts: {label}",
                       page_size=PAGE_SIZE)


def wrk(request: str, token: str, clients: int, seconds: float) -> tuple[float, float, float]:
    script = WORK / "put.lua"
    script.write_text(LUA % {"token": token, "request": request})
    threads = 1 if clients == 1 else 2
    output = sh("wrk", f"-t{threads}", f"-c{clients}", f"-d{max(1, round(seconds))}s",
                "--latency", "-s", str(script), WEB).stdout
    bad = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    if bad:
        raise RuntimeError(f"{bad} answers were not 2xx; see {WORK.parent / 'web.log'}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    return rps, _latency(output, "50%"), _latency(output, "99%")


def api_put(token: str, clients: int, seconds: float):
    feed = new_feed("api")
    return wrk(PUT_REQUEST % {"prefix": f"/api/feeds/{feed.slug}/records/", "body": BODY},
               token, clients, seconds)


def batch_of_one(token: str, clients: int, seconds: float):
    feed = new_feed("batch")
    return wrk(BATCH_REQUEST % {"path": f"/api/feeds/{feed.slug}/batch", "body": BODY},
               token, clients, seconds)


def minimal_view(token: str, clients: int, seconds: float):
    feed = new_feed("minimal")
    return wrk(PUT_REQUEST % {"prefix": f"/bench/minimal-put/{feed.slug}/", "body": BODY},
               token, clients, seconds)


# The raw transaction: what the PUT's database work costs with nothing around it.
LOCK = "SELECT last_seq, last_updated FROM archives_feed WHERE id = %s FOR UPDATE"
INSERT_RECORD = (
    "INSERT INTO archives_record (feed_id, key, title, summary, metadata, links, created, "
    "updated) VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s) "
    "ON CONFLICT (feed_id, key) DO UPDATE SET title = EXCLUDED.title, "
    "summary = EXCLUDED.summary, metadata = EXCLUDED.metadata, links = EXCLUDED.links, "
    "updated = EXCLUDED.updated, deleted_at = NULL RETURNING id")
INSERT_ENTRY = (
    "INSERT INTO archives_entry (feed_id, seq, record_id, kind, updated, title, summary, "
    "links, metadata) VALUES (%s, %s, %s, 'create', %s, %s, %s, %s::jsonb, %s::jsonb)")
ADVANCE = "UPDATE archives_feed SET last_seq = %s, last_updated = %s WHERE id = %s"


def _raw_client(feed_id: int, client: int, seconds: float) -> list[float]:
    import psycopg

    data = record(7)
    metadata, links = json.dumps(data["metadata"]), json.dumps(data["links"])
    latencies, n = [], 0
    with psycopg.connect(DATABASE_URL.replace("postgres://", "postgresql://")) as connection:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            n += 1
            with connection.transaction(), connection.cursor() as cursor:
                last_seq, last_updated = cursor.execute(LOCK, [feed_id]).fetchone()
                now = datetime.now(UTC)
                if last_updated is not None and now <= last_updated:
                    now = last_updated + timedelta(microseconds=1)
                record_id, = cursor.execute(INSERT_RECORD, [
                    feed_id, f"r{client}-{n}", data["title"], data["summary"], metadata, links,
                    now, now]).fetchone()
                cursor.execute(INSERT_ENTRY, [feed_id, last_seq + 1, record_id, now,
                                              data["title"], data["summary"], links, metadata])
                cursor.execute(ADVANCE, [last_seq + 1, now, feed_id])
            latencies.append(time.perf_counter() - began)
    return latencies


def raw_transaction(token: str, clients: int, seconds: float):
    from django.db import connections

    feed = new_feed("raw")
    connections.close_all()  # the clients are forked
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        results = pool.starmap(_raw_client, [(feed.pk, n, seconds) for n in range(clients)])
    latencies = sorted(x for result in results for x in result)
    return (len(latencies) / seconds, 1000 * latencies[len(latencies) // 2],
            1000 * latencies[int(len(latencies) * 0.99)])


KINDS = {
    "PUT /api/feeds/<slug>/records/<key>": api_put,
    "batch of one (POST .../batch)": batch_of_one,
    "minimal DRF view": minimal_view,
    "raw transaction over psycopg": raw_transaction,
}


def in_process(token: str, requests: int, rounds: int) -> dict[str, tuple[float, float]]:
    """The same three kinds of request through Django's WSGI handler in this process, one
    after another: no HTTP server, no client, no other request. The load generator and
    the server share the machine's two cores with everything else, and under load they
    decide what wrk sees; this is each request's own cost: (wall ms, CPU ms of this
    process) a request, the medians of `rounds`."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import RequestFactory

    handler, factory = WSGIHandler(), RequestFactory(HTTP_HOST="127.0.0.1")
    auth = {"HTTP_AUTHORIZATION": f"Token {token}", "content_type": "application/json"}
    kinds = {
        "PUT /api/feeds/<slug>/records/<key>": lambda slug, key: factory.put(
            f"/api/feeds/{slug}/records/{key}", BODY, **auth),
        "batch of one (POST .../batch)": lambda slug, key: factory.post(
            f"/api/feeds/{slug}/batch",
            f'{{"operations": [{{"op": "put", "key": "{key}", "record": {BODY}}}]}}', **auth),
        "minimal DRF view": lambda slug, key: factory.put(
            f"/bench/minimal-put/{slug}/{key}", BODY, **auth),
    }

    def answer(environ) -> None:
        statuses = []
        response = handler(environ, lambda status, headers: statuses.append(status))
        b"".join(response)
        response.close()  # request_finished: where an API write seals a page it filled
        if not statuses[0].startswith("20"):
            raise RuntimeError(f"{environ['PATH_INFO']}: {statuses[0]}")

    measured: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for name, make in kinds.items():
            slug = new_feed("inprocess").slug
            environs = [make(slug, f"k{n}").environ for n in range(requests + 1)]
            answer(environs[0])  # not timed: the first request of a new feed
            wall, cpu = time.perf_counter(), time.process_time()
            for environ in environs[1:]:
                answer(environ)
            measured.setdefault(name, []).append(
                (1000 * (time.perf_counter() - wall) / requests,
                 1000 * (time.process_time() - cpu) / requests))
    return {name: tuple(statistics.median(column) for column in zip(*rows, strict=True))
            for name, rows in measured.items()}


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def warm_up(token: str) -> None:
    """Every worker answers each kind of request, and seals on write, before anything is
    measured: a worker's first requests and first seals build what it caches (2 s of each
    kind left a first-round p99 of one client at 4-7 x its p50, where 6 s gives ~1.6 x:
    the first seconds after a server starts). Then the sealer's next pass seals what they
    wrote, before the first measurement rather than during it."""
    for kind in (api_put, batch_of_one, minimal_view):
        kind(token, 8, 6)
    # The sealer seals the pages these filled on its next pass: not during a measurement.
    time.sleep(2 * int(ENV["SEAL_INTERVAL"]))


def measure(token: str, clients: list[int], rounds: int, seconds: float) -> dict:
    warm_up(token)
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for count in clients:
        for turn in range(rounds):
            names = list(KINDS)
            if turn % 2:  # neither side always runs first on a machine whose load moves
                names.reverse()
            for name in names:
                rps, p50, p99 = KINDS[name](token, count, seconds)
                results.setdefault((name, count), []).append((rps, p50, p99))
                print(f"  {count:>2} clients  {name:<38} {rps:>7.0f} records/s  "
                      f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  (load {load()})", flush=True)
    return {key: tuple(statistics.mean(column) for column in zip(*rows, strict=True))
            for key, rows in results.items()}


def report(results: dict, clients: list[int]) -> None:
    print("\n| clients | what | records/s | p50 | p99 | p99 / p50 | x minimal DRF view |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for count in clients:
        floor = results[("minimal DRF view", count)][0]
        for name in KINDS:
            rps, p50, p99 = results[(name, count)]
            print(f"| {count} | {name} | {rps:,.0f} | {p50:.1f} ms | {p99:.1f} ms | "
                  f"{p99 / p50:.1f} | {rps / floor:.2f} x |")
    print("\nTargets (the API's PUT, the sealer beside it): >= 0.6 x the minimal DRF view, "
          "p99 <= 3 x p50")
    for count in clients:
        rps, p50, p99 = results[("PUT /api/feeds/<slug>/records/<key>", count)]
        ratio = rps / results[("minimal DRF view", count)][0]
        print(f"  {count:>2} clients: {ratio:.2f} x ({'met' if ratio >= 0.6 else 'NOT met'}), "
              f"p99 {p99 / p50:.1f} x p50 ({'met' if p99 <= 3 * p50 else 'NOT met'})")


def report_in_process(results: dict[str, tuple[float, float]], requests: int) -> None:
    print(f"\nIn process, one request after another ({requests} a round, the sealer "
          "beside):\n")
    print("| what | wall a request | CPU a request (this process) | wall x minimal DRF view |")
    print("|---|---:|---:|---:|")
    floor = results["minimal DRF view"][0]
    for name, (wall, cpu) in results.items():
        print(f"| {name} | {wall:.2f} ms | {cpu:.2f} ms | {wall / floor:.2f} x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests", type=int, default=300,
                        help="a round of the in-process measurement")
    options = parser.parse_args()
    clients = [int(n) for n in options.clients.split(",") if n]  # "": in process only
    WORK.mkdir(parents=True, exist_ok=True)
    fresh_database()
    sh("deploy/entrypoint.sh", "migrate")
    import django

    django.setup()
    token = producer_token()
    web = sealer = None
    try:
        web = start(["deploy/entrypoint.sh", "web"], "put/web.log")
        sealer = start(["deploy/entrypoint.sh", "sealer"], "put/sealer.log")
        wait_for(f"{WEB}/healthz")
        print(f"{os.cpu_count()} cores, load average {load()}; {options.seconds:.0f} s a "
              f"measurement, {options.rounds} rounds, the sealer beside", flush=True)
        results = measure(token, clients, options.rounds, options.seconds) if clients else {}
        alone = in_process(token, options.requests, 3)
        if sealer.poll() is not None:
            raise RuntimeError(f"the sealer died; see {WORK / 'sealer.log'}")
    finally:
        stop(web)
        stop(sealer)
    if clients:
        report(results, clients)
    report_in_process(alone, options.requests)
    print(f"load average at the end {load()}")


if __name__ == "__main__":
    main()
