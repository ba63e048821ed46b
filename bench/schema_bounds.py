"""The slowest checks the record-schema bounds let through (feedpub_consumer.schemabounds):
in this process, and served as production serves them.

    .venv/bin/python bench/schema_bounds.py
    .venv/bin/python bench/schema_bounds.py --served [--sqlite] [--seconds 20] [--rounds 2]
                                           [--clients 4] [--steps N]

For each schema at the bound (MAX_SCHEMA_STEPS subschemas at one place, or patterns of
MAX_PATTERN_SIZE) it builds the largest record metadata may be (MAX_METADATA_BYTES) that
makes every place cost the most, and times `RecordChecker.errors` on a record that matches
(every branch tried) and on one that does not (the refusal's report), in this process,
without a database. Target: each under 1 s (docs/performance/record-schemas.md).

`--served`: the same schemas set on feeds of a server run as deployed (`deploy/entrypoint.sh
web`, that is gunicorn with deploy/gunicorn.conf.py, WEB_CONCURRENCY=4 as in bench/run.py;
the sealer beside it, as in the compose file). `--clients` (4) processes each PUT those
records in a loop, every matching one to a new key (a create: an entry appended, pages
sealed on write as they fill) and every other one refused, each client starting at
another case; a fifth polls /healthz every 100 ms. Then the same, with the same records,
against feeds without a schema: the baseline. The two phases alternate, `--rounds` times
over. It reports each write's p50 and max, and /healthz's, in each phase, and their
ratios. Target: every write and every /healthz answered in under 1 s. PostgreSQL at
127.0.0.1:5432 (user postgres, trust): it (re)creates the database `bench_bounds`
(BENCH_BOUNDS_DB); --sqlite: a file in bench/.work/bounds. It serves on 127.0.0.1:8113
(BENCH_BOUNDS_PORT).

`--steps N`, in either mode: the same cases built for N steps (patterns of size N at most)
instead of the bounds': what a lower MAX_SCHEMA_STEPS would let through.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")

WORK = ROOT / "bench" / ".work" / "bounds"
DB_NAME = os.environ.get("BENCH_BOUNDS_DB", "bench_bounds")
SQLITE_PATH = WORK / f"{DB_NAME}.sqlite3"
PORT = int(os.environ.get("BENCH_BOUNDS_PORT", "8113"))
HEALTHZ_EVERY = 0.1  # seconds between /healthz polls


def cases(steps: int, size: int) -> list[tuple[str, dict, dict, dict]]:
    many = 33_000  # 100,000 bytes of "0, " items
    branches = steps - 3  # the array, the items, the anyOf itself
    items = {"anyOf": [{"minimum": n + 1} for n in range(branches - 1)] + [{"type": "integer"}]}
    failing = {"anyOf": [{"minimum": n + 1} for n in range(branches)]}
    lookaround = {"pattern": f"(?=x)x{{{size - 6}}}y"}
    long = "x" * 99_000
    return [
        ("anyOf at every item", {"properties": {"a": {"type": "array", "items": items}}},
         {"a": [0] * many}, {"a": [0] * many + [-1.5]}),
        ("anyOf failing at every item", {"properties": {"a": {"type": "array",
                                                               "items": failing}}},
         {"a": []}, {"a": [0] * many}),
        ("lookaround pattern, one long string", {"properties": {"s": lookaround}},
         {"s": long + "y"}, {"s": long}),  # (matched at its end: every place tried)
        ("patterns at every item", {"properties": {"a": {"items": {"allOf": [
            {"pattern": "^x+$"}] * (steps // 6)}}}}, {"a": ["x"] * 19_000},
         {"a": ["y"] * 19_000}),
    ]


def at_steps(steps: int | None) -> tuple[int, int]:
    """(steps, pattern size) of the cases: the bounds', or what a bound of `steps` would let
    through (--steps: a pattern counts its size among them)."""
    from feedpub_consumer.schemabounds import MAX_PATTERN_SIZE, MAX_SCHEMA_STEPS

    if steps is None:
        return MAX_SCHEMA_STEPS, MAX_PATTERN_SIZE
    return steps, min(steps, MAX_PATTERN_SIZE)


def in_process(steps: int | None) -> None:
    import django

    django.setup()
    from feedpub_consumer.schemabounds import schema_steps

    from archives.validation import check_record_schema, clean_record

    steps, size = at_steps(steps)
    print(f"schemas of {steps} steps, patterns of size {size}; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, schema, matching, failing in cases(steps, size):
        checker = check_record_schema(schema)  # taken: it is at the bound, not over
        for label, metadata in (("matches", matching), ("does not", failing)):
            data = clean_record({"title": "t", "metadata": metadata})  # within every limit
            began = time.perf_counter()
            said = checker.errors(data.metadata)
            took = time.perf_counter() - began
            print(f"{name} ({schema_steps(schema)} steps), a record that {label}: "
                  f"{took:.3f} s, {len(said)} place(s) named", flush=True)


# Served ---------------------------------------------------------------------------------

def served_environment(sqlite: bool) -> dict[str, str]:
    url = (f"sqlite:///{SQLITE_PATH}" if sqlite
           else f"postgres://postgres@127.0.0.1:5432/{DB_NAME}")
    return {
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "feedpub.settings",
        "DEBUG": "false",
        "SECRET_KEY": "bench-only-" + "k" * 50,
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "FEEDPUB_BASE_URL": f"http://127.0.0.1:{PORT}",
        "FEEDPUB_API_USER_RATE": "off",  # four clients of one user, as fast as they can
        "GUNICORN_BIND": f"127.0.0.1:{PORT}",
        "WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "4"),
        "SEAL_INTERVAL": "5",
        "FEEDPUB_SNAPSHOT_EVERY": "0",
        "LOG_LEVEL": "WARNING",
        "GUNICORN_LOGLEVEL": "warning",
        "FEEDPUB_PAGES_DIR": str(WORK / "pages"),
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
    }


def fresh_database(sqlite: bool) -> None:
    subprocess.run(["rm", "-rf", str(WORK / "pages"), str(SQLITE_PATH),
                    f"{SQLITE_PATH}-wal", f"{SQLITE_PATH}-shm"], check=True)
    if not sqlite:
        admin = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"]
        subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{DB_NAME}"'], check=True)
        subprocess.run([*admin, f'CREATE DATABASE "{DB_NAME}"'], check=True)


def producer_token() -> str:
    """An ordinary user allowed to create and change records, and its API token."""
    from django.contrib.auth.models import Permission, User

    from archives.models import ApiToken

    user = User.objects.create_user("producer")
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="archives", codename__in=["add_record", "change_record"]))
    return ApiToken.issue(user=user, name="bench")[1]


def writes(phase: str, steps: int | None) -> list[tuple[str, str, bytes]]:
    """(what, feed slug, body) of each worst-case write: for each case a feed (with its
    schema, or none in the baseline), a record that matches it and one that does not."""
    from archives.log.publishing import create_feed

    found = []
    for n, (name, schema, matching, failing) in enumerate(
            cases(*at_steps(steps))):
        slug = f"{phase}-{n}"
        create_feed(slug=slug, title=name, record_schema=schema if phase == "schema" else None)
        for label, metadata in (("matches", matching), ("does not", failing)):
            body = json.dumps({"title": "t", "metadata": metadata}).encode()
            found.append((f"{name}, a record that {label}", slug, body))
    return found


def _request(method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, float]:
    """(status, seconds) of one request on a new connection (gunicorn's sync workers close
    each); status 0 for no answer."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        response.read()
        status = response.status
    except OSError:
        status = 0
    finally:
        connection.close()
    return status, time.perf_counter() - began


def _writer(client: int, work: list[tuple[str, str, bytes]], token: str, seconds: float,
            run: str) -> list[tuple[str, int, float]]:
    """One client: the writes in turn, for `seconds`, from a case of its own (client n
    starts at case n: four clients, four feeds); (what, status, seconds) each. A record
    that matches goes to a new key each time (a create; `run` tells the runs apart)."""
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    done: list[tuple[str, int, float]] = []
    deadline, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        what, slug, body = work[(2 * client + n) % len(work)]
        n += 1
        status, took = _request("PUT", f"/api/feeds/{slug}/records/{run}c{client}-{n}", body,
                                headers)
        done.append((what, status, took))
    return done


def _healthz(seconds: float) -> list[tuple[str, int, float]]:
    """/healthz every HEALTHZ_EVERY seconds (at once after a slower answer)."""
    done: list[tuple[str, int, float]] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        status, took = _request("GET", "/healthz")
        done.append(("/healthz", status, took))
        time.sleep(max(0.0, HEALTHZ_EVERY - took))
    return done


def run_phase(work: list[tuple[str, str, bytes]], token: str, clients: int,
              seconds: float, run: str) -> list[tuple[str, int, float]]:
    from django.db import connections

    connections.close_all()  # the clients are forked
    with multiprocessing.get_context("fork").Pool(clients + 1) as pool:
        polled = pool.apply_async(_healthz, (seconds,))
        written = [pool.apply_async(_writer, (n, work, token, seconds, run))
                   for n in range(clients)]
        return [*polled.get(), *(row for result in written for row in result.get())]


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def summary(rows: list[tuple[str, int, float]]
            ) -> dict[str, tuple[int, float, float, int, dict]]:
    """{what: (answers, p50 s, max s, answers over 1 s, {status: count})}."""
    found: dict[str, list[tuple[int, float]]] = {}
    for what, status, took in rows:
        found.setdefault(what, []).append((status, took))
    return {what: (len(answers), statistics.median(took for _, took in answers),
                   max(took for _, took in answers),
                   sum(1 for _, took in answers if took >= 1),
                   {status: sum(1 for s, _ in answers if s == status)
                    for status in sorted({s for s, _ in answers})})
            for what, answers in found.items()}


def report(measured: dict[str, list[tuple[str, int, float]]], seconds: float) -> None:
    schema, baseline = summary(measured["schema"]), summary(measured["baseline"])
    print("\n| what | answers (status) | p50 | max | over 1 s | without a schema: p50 | max "
          "| over 1 s | p50 ratio | max ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for what in sorted(schema, key=lambda what: what != "/healthz"):  # (/healthz first)
        n, p50, top, slow, statuses = schema[what]
        _, base_p50, base_top, base_slow, _ = baseline[what]
        said = ", ".join(f"{count} x {status or 'none'}" for status, count in statuses.items())
        print(f"| {what} | {n} ({said}) | {1000 * p50:.0f} ms | {1000 * top:.0f} ms | {slow} | "
              f"{1000 * base_p50:.0f} ms | {1000 * base_top:.0f} ms | {base_slow} | "
              f"{p50 / base_p50:.2f} x | {top / base_top:.2f} x |")
    for phase, found in (("schema", schema), ("baseline", baseline)):
        written = sum(n for what, (n, *_rest) in found.items() if what != "/healthz")
        print(f"{phase}: {written / seconds:.1f} writes/s")
    slowest = max(top for _, _, top, _, _ in schema.values())
    failed = sum(count for found in (schema, baseline) for *_, statuses in found.values()
                 for status, count in statuses.items() if status == 0 or status >= 500)
    print(f"\nTarget: every write and /healthz answered in under 1 s, none failed: slowest "
          f"{slowest:.2f} s, {failed} failed: {'met' if slowest < 1 and not failed else 'NOT met'}")


def served(options: argparse.Namespace) -> None:
    env = served_environment(options.sqlite)
    os.environ.update(env)
    from bench.run import start, stop, wait_for  # (it sets its environment: ours wins)

    os.environ.update(env)
    WORK.mkdir(parents=True, exist_ok=True)
    fresh_database(options.sqlite)
    subprocess.run(["deploy/entrypoint.sh", "migrate"], cwd=ROOT, check=True,
                   capture_output=True)
    import django

    django.setup()
    token = producer_token()
    work = {phase: writes(phase, options.steps) for phase in ("baseline", "schema")}
    web = sealer = None
    measured: dict[str, list] = {"baseline": [], "schema": []}
    try:
        web = start(["deploy/entrypoint.sh", "web"], "bounds/web.log")
        sealer = start(["deploy/entrypoint.sh", "sealer"], "bounds/sealer.log")
        wait_for(f"http://127.0.0.1:{PORT}/healthz")
        print(f"{os.cpu_count()} cores, load average {load()}; "
              f"{'SQLite' if options.sqlite else 'PostgreSQL'}, "
              f"{env['WEB_CONCURRENCY']} gunicorn workers, {options.clients} clients and "
              f"/healthz every {1000 * HEALTHZ_EVERY:.0f} ms, {options.seconds:.0f} s a phase, "
              f"{options.rounds} rounds", flush=True)
        run_phase(work["baseline"], token, options.clients, 3, "warm")  # every worker
        for turn in range(options.rounds):
            phases = ["baseline", "schema"]
            if turn % 2:  # neither always first on a machine whose load moves
                phases.reverse()
            for phase in phases:
                rows = run_phase(work[phase], token, options.clients, options.seconds,
                                 f"r{turn}")
                measured[phase] += rows
                slowest = max(took for what, _, took in rows if what != "/healthz")
                print(f"  round {turn + 1}, {phase}: {len(rows)} answers, slowest write "
                      f"{slowest:.2f} s (load {load()})", flush=True)
        if sealer.poll() is not None:
            raise RuntimeError(f"the sealer died; see {WORK / 'sealer.log'}")
    finally:
        stop(web)
        stop(sealer)
    report(measured, options.seconds * options.rounds)
    print(f"load average at the end {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--served", action="store_true",
                        help="through gunicorn, with concurrent clients and /healthz")
    parser.add_argument("--sqlite", action="store_true", help="--served on a SQLite file")
    parser.add_argument("--seconds", type=float, default=20, help="a phase of --served")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--steps", type=int, help="schemas of this many steps, not the "
                        "bound's: what a lower bound would let through")
    options = parser.parse_args()
    if options.served:
        served(options)
    else:
        in_process(options.steps)


if __name__ == "__main__":
    main()
