"""WebSub: how long a commit takes to reach 1,000 subscribers' callbacks.

    .venv/bin/python bench/websub.py [--subscribers 1000] [--commits 10]

Recreates the PostgreSQL database BENCH_WEBSUB_DB (default `bench_websub`) at
127.0.0.1:5432, makes a feed of 50 entries (its subscription document is what each
subscriber is sent) and subscribes 1,000 callbacks through the hub's own request path,
served by one local HTTP server in a process of its own that timestamps each arrival. The
worker runs as deployed (`deploy/entrypoint.sh websub`: `manage.py websub_worker`) and
verifies them. Then, `--commits` times: one record is written through the write path (whose
transaction sends `NOTIFY feedpub_changes, '<feed pk>'`), and the time from the commit to each
callback's arrival is taken.

Baseline in the same run: the same body POSTed to the same callbacks by a bare aiohttp
session (the worker's client) at the same concurrency, timed from the first request (what
delivery costs without a hub: the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from multiprocessing import Process
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_WEBSUB_DB", "bench_websub")
DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
ENV = {**os.environ, "DATABASE_URL": DATABASE_URL, "DJANGO_SETTINGS_MODULE": "feedpub.settings",
       "DEBUG": "false", "SECRET_KEY": "bench-only-" + "x" * 40, "LOG_LEVEL": "WARNING",
       "FEEDPUB_BASE_URL": "http://127.0.0.1:8000",
       "FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS": "true",  # the callbacks are local
       "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
WORKER_COMMAND = ["deploy/entrypoint.sh", "websub"]


# The callbacks: one asyncio HTTP/1.1 server in a process of its own ---------------------

def serve_callbacks(port: int) -> None:
    """Answers verifications (echoing hub.challenge), deliveries (204, timestamped) and
    GET /arrivals (the timestamps so far, JSON), with keep-alive. Plain asyncio streams: a
    threaded http.server could not take 200 connections at once fast enough to measure
    the worker rather than itself."""
    arrivals: list[float] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                length = int(headers.get("Content-Length", headers.get("content-length", 0)))
                if length:
                    await reader.readexactly(length)
                if method == "POST":
                    arrivals.append(time.time())
                    status, body = "204 No Content", b""
                elif target.startswith("/arrivals"):
                    status, body = "200 OK", json.dumps(arrivals).encode()
                else:
                    query = dict(part.split("=", 1) for part in
                                 target.split("?", 1)[1].split("&"))
                    status, body = "200 OK", query.get("hub.challenge", "").encode()
                writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n"
                             .encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        await server.serve_forever()

    asyncio.run(main())


def arrivals(base: str) -> list[float]:
    with urllib.request.urlopen(f"{base}/arrivals") as response:  # noqa: S310 - ours
        return json.loads(response.read())


def wait_for(base: str, count: int, timeout: float = 60) -> list[float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = arrivals(base)
        if len(seen) >= count:
            return seen
        time.sleep(0.02)
    raise SystemExit(f"only {len(arrivals(base))} of {count} deliveries arrived")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# The run ------------------------------------------------------------------------------

def recreate_database() -> None:
    import psycopg
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        db.execute(f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=ENV,  # noqa: S603
                   check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--port", type=int, default=8190)
    args = parser.parse_args()

    recreate_database()
    os.environ.update(ENV)
    sys.path.insert(0, str(ROOT))
    import django
    django.setup()
    from django.http import QueryDict

    from archives.log import publishing
    from archives.models import Feed
    from archives.push import hub, subscriptions

    callbacks = Process(target=serve_callbacks, args=(args.port,), daemon=True)
    callbacks.start()
    base = f"http://127.0.0.1:{args.port}"
    time.sleep(0.5)

    feed = Feed.objects.create(slug="bench", title="Bench", page_size=100)
    for n in range(50):
        publishing.put_record(feed=feed, key=f"r{n}", data={"title": f"Record {n}"})
    topic = hub.topic_url("bench", "atom")
    for n in range(args.subscribers):
        query = QueryDict(mutable=True)
        query.update({"hub.mode": "subscribe", "hub.topic": topic,
                      "hub.callback": f"{base}/cb/{n}", "hub.secret": f"secret-{n}"})
        hub.record_request(query)

    worker = subprocess.Popen(WORKER_COMMAND, cwd=ROOT, env=ENV)  # noqa: S603
    try:
        from archives.models import Subscription
        deadline = time.monotonic() + 60
        while Subscription.objects.filter(expires_at__isnull=True).exists():
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not verify the subscribers")
            time.sleep(0.1)
        time.sleep(1)  # its LISTEN is up (it listens before its first round)

        latencies, body_size = [], 0
        for commit in range(1, args.commits + 1):
            # The write path's own NOTIFY (archives/db/heads.py) wakes the worker.
            publishing.put_record(feed=feed, key=f"new{commit}", data={"title": f"New {commit}"})
            committed = time.time()
            seen = wait_for(base, commit * args.subscribers)
            latencies += [t - committed for t in seen[-args.subscribers:]]
            time.sleep(0.3)
        content = subscriptions.current_content(Feed.objects.get(pk=feed.pk), "atom")
        body_size = len(content.body)
    finally:
        worker.terminate()
        worker.wait(timeout=10)

    floor = asyncio.run(baseline(base, args.subscribers, args.commits, content.body))
    callbacks.terminate()
    report(args, latencies, floor, body_size)


async def baseline(base: str, subscribers: int, commits: int, body: bytes) -> list[float]:
    """The same POSTs by a bare aiohttp session (the worker's client) at the worker's
    concurrency."""
    import aiohttp

    from archives.conf import settings
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=settings.FEEDPUB_WEBSUB_CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as client:
        async def post(n: int) -> None:
            async with client.post(f"{base}/cb/{n}", data=body,
                                   headers={"Content-Type": "application/atom+xml"}) as r:
                await r.read()
        for _ in range(commits):
            already = len(arrivals(base))
            started = time.time()
            await asyncio.gather(*(post(n) for n in range(subscribers)))
            latencies += [t - started for t in arrivals(base)[already:]]
    return latencies


def report(args, latencies: list[float], floor: list[float], body_size: int) -> None:
    def row(name, values):
        p50, p99 = percentile(values, 50), percentile(values, 99)
        return f"| {name} | {p50 * 1000:,.0f} | {p99 * 1000:,.0f} | {max(values) * 1000:,.0f} |"

    print(f"{args.subscribers} subscribers x {args.commits} commits, "
          f"{body_size:,} byte subscription document, "
          f"FEEDPUB_WEBSUB_CONCURRENCY {os.environ.get('FEEDPUB_WEBSUB_CONCURRENCY', '200')}")
    print("| commit -> callback | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|")
    print(row("websub_worker (NOTIFY wake-up, claim, render, sign, POST)", latencies))
    print(row("bare aiohttp POSTs of the same bytes (floor)", floor))
    print(f"p99 ratio worker / floor: {percentile(latencies, 99) / percentile(floor, 99):.2f}")


if __name__ == "__main__":
    main()
