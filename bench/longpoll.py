"""Long polling at scale: many consumers held by one ASGI worker, all told of one write.

    .venv/bin/python bench/longpoll.py [--consumers 5000] [--rounds 3]

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust); (re)creates the database
`bench_longpoll` (BENCH_LONGPOLL_DB). It starts the deployment's long-poll service exactly as
docker-compose.yml does (`deploy/entrypoint.sh longpoll`: uvicorn, one worker) on
127.0.0.1:8102 (BENCH_LONGPOLL_PORT), then in each round:

1. opens `--consumers` HTTP connections (client processes of asyncio + uvloop, raw
   sockets), each sending a long poll of the subscription document (`Prefer: wait=60` and
   the current ETag), and waits until the server is idle: every poll is held;
2. reads the server's resident memory (VmRSS, and its peak VmHWM);
3. commits one write (`publishing.put_record`) and times, for each consumer, from the
   commit (put_record's return) to the last byte of its 200 (CLOCK_MONOTONIC is one clock
   for every process of the machine).

Before that, how stale a poll from memory can be (archives/db/heads.py): this process keeps
the feed's head, commits 200 writes one at a time, and times each from the commit to the
moment its head in memory shows it (NOTIFY delivered, row read again by the listener).

With --through-nginx the consumers poll through the deployment's nginx (deploy/nginx/nginx.conf
and feedpub.conf.template, run as tests/nginx_server.py runs them) in front of the service,
as in docker-compose.yml: each poll then holds two nginx connections.

Then, for comparison, the cost of answering through Django's full ASGI path: the same
document requested through `feedpub.asgi.django_application` in-process, one request after
another, as many times as there are consumers (what answering every waiter through Django
would cost, instead of one rendering sent to all).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
DB_NAME = os.environ.get("BENCH_LONGPOLL_DB", "bench_longpoll")
PORT = int(os.environ.get("BENCH_LONGPOLL_PORT", "8102"))
CLIENT_PORT = PORT  # where consumers connect: the service, or nginx in front of it
ENTRYPOINT = "deploy/entrypoint.sh"
LONGPOLL_COMMAND = [ENTRYPOINT, "longpoll"]  # docker-compose.yml's (tests/test_deploy.py)
ENTRIES = 50

ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only-" + "k" * 50,
    "SECURE_SSL_REDIRECT": "false",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "FEEDPUB_BASE_URL": f"http://127.0.0.1:{PORT}",
    "FEEDPUB_SEAL_ON_WRITE": "false",
    "FEEDPUB_LONG_POLL_MAX_WAIT": "120",
    "LONGPOLL_HOST": "127.0.0.1",
    "LONGPOLL_PORT": str(PORT),
    "LOG_LEVEL": "WARNING",
    "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
}
os.environ.update(ENV)
sys.path.insert(0, str(ROOT))


# Consumers: raw HTTP/1.1 over asyncio streams, as little client work as possible ----------

def request_bytes(etag: str) -> bytes:
    return (f"GET /feeds/lp/ HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: {etag}\r\n"
            f"Prefer: wait=60\r\n\r\n").encode()


async def consume(request: bytes, opened: asyncio.Semaphore) -> tuple[int, float]:
    """One consumer: its long poll's status and when its response's last byte came (status
    0: the connection was refused or closed without an answer)."""
    try:
        return await poll_once(request, opened)
    except (OSError, asyncio.IncompleteReadError):
        return 0, time.monotonic()


async def poll_once(request: bytes, opened: asyncio.Semaphore) -> tuple[int, float]:
    async with opened:  # connections are opened a few hundred at a time
        reader, writer = await asyncio.open_connection("127.0.0.1", CLIENT_PORT)
        writer.write(request)
        await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    if length:
        await reader.readexactly(int(length.group(1)))
    done = time.monotonic()
    writer.close()
    return status, done


def consumer_process(count: int, etag: str, results) -> None:
    import uvloop

    async def main():
        opened = asyncio.Semaphore(200)
        request = request_bytes(etag)
        return await asyncio.gather(*(consume(request, opened) for _ in range(count)))

    results.put(uvloop.run(main()))


# The server -----------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss, hwm = (int(re.search(rf"{name}:\s+(\d+) kB", status).group(1)) / 1024
                for name in ("VmRSS", "VmHWM"))
    return rss, hwm


def wait_until_idle(pid: int, *, quiet: float = 1.0, timeout: float = 120) -> None:
    """Until the server used under 3 % of a core for `quiet` seconds: every poll held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(quiet)
        if cpu_seconds(pid) - before < 0.03 * quiet:
            return
    raise RuntimeError("the server never went idle")


def uvicorn_pid(shell: subprocess.Popen) -> int:
    """The entrypoint execs env, which execs uvicorn: the same pid."""
    return shell.pid


def round_trip(consumers: int, processes: int, etag: str, pid: int, n: int) -> dict:
    from archives.log import publishing
    from archives.models import Feed

    results = multiprocessing.Queue()
    shares = [consumers // processes + (i < consumers % processes) for i in range(processes)]
    clients = [multiprocessing.Process(target=consumer_process, args=(share, etag, results))
               for share in shares]
    began = time.monotonic()
    for client in clients:
        client.start()
    time.sleep(0.5)
    wait_until_idle(pid)
    held_after = time.monotonic() - began
    rss, hwm = memory_mb(pid)
    feed = Feed.objects.get(slug="lp")
    cpu_before = cpu_seconds(pid)
    publishing.put_record(feed=feed, key=f"new-{n}", data={"title": f"New {n}"})
    committed = time.monotonic()
    answers = [answer for _ in clients for answer in results.get(timeout=120)]
    server_cpu = cpu_seconds(pid) - cpu_before  # waking, rendering, sending
    for client in clients:
        client.join()
    statuses = {status for status, _ in answers}
    answered = sum(status == 200 for status, _ in answers)
    latencies = sorted(1000 * (done - committed) for status, done in answers if status == 200)
    latencies = latencies or [float("nan")]
    return {"consumers": len(answers), "answered": answered, "statuses": statuses,
            "held_after_s": held_after,
            "rss_mb": rss, "hwm_mb": hwm,
            "p50_ms": latencies[len(latencies) // 2],
            "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)],
            "max_ms": latencies[-1], "mean_ms": statistics.fmean(latencies),
            "server_cpu_ms": 1000 * server_cpu}


def staleness(writes: int) -> list[float]:
    """Milliseconds from each write's commit to this process's head showing it."""
    from archives.db.heads import heads
    from archives.log import publishing
    from archives.models import Feed

    heads.start()
    assert heads.wait_until_listening(10)
    # As another process sees a write: announce's forgetting of the writer's own copy off.
    heads.forget = lambda feed_id: None
    feed = Feed.objects.get(slug="lp")
    delays = []
    for n in range(writes):
        heads.feed_by_slug("lp")  # kept (a read outside any transaction)
        publishing.put_record(feed=feed, key=f"stale-{n}", data={"title": f"Stale {n}"})
        committed = time.monotonic()
        while (head := heads.cached("lp")) is None or head.last_seq < feed.last_seq:
            if time.monotonic() - committed > 5:
                raise RuntimeError("a write was not seen within 5 s")
            time.sleep(0.0001)
        delays.append(1000 * (time.monotonic() - committed))
    heads.stop()
    return sorted(delays)


def django_path_cost(requests: int) -> float:
    """Seconds for Django's full ASGI path to answer the subscription document `requests`
    times, one after another, in this process (no network)."""
    from feedpub.asgi import django_application

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/feeds/lp/", "raw_path": b"/feeds/lp/",
             "query_string": b"", "root_path": "", "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", PORT)}

    async def one():
        sent = asyncio.Event()

        async def receive():
            if not sent.is_set():
                sent.set()
                return {"type": "http.request", "body": b""}
            await asyncio.Future()

        statuses = []

        async def send(message):
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await django_application(scope, receive, send)
        assert statuses == [200], statuses

    async def main():
        await one()  # warm
        began = time.perf_counter()
        for _ in range(requests):
            await one()
        return time.perf_counter() - began

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--consumers", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--staleness-writes", type=int, default=200)
    parser.add_argument("--through-nginx", action="store_true",
                        help="poll through the deployment's nginx, not the service itself")
    parser.add_argument("--image-defaults", action="store_true",
                        help="with --through-nginx: the nginx image's 1,024 connections a "
                             "worker instead of deploy/nginx/nginx.conf's (the old set-up)")
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    admin = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"]
    subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{DB_NAME}"'], check=True)
    subprocess.run([*admin, f'CREATE DATABASE "{DB_NAME}"'], check=True)
    subprocess.run([ENTRYPOINT, "migrate"], cwd=ROOT, check=True, capture_output=True)
    import django

    django.setup()
    from django.db import connections

    from archives.log import publishing

    feed = publishing.create_feed(slug="lp", title="Long-polled feed", page_size=1000)
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{i}", "record": {"title": f"Record {i}", "summary": "s" * 200}}
        for i in range(ENTRIES)])
    delays = staleness(options.staleness_writes)
    p99 = delays[int(len(delays) * 0.99) - 1]
    print(f"staleness, commit -> this process's head shows it, {len(delays)} writes: "
          f"p50 {delays[len(delays) // 2]:.2f} ms, p99 {p99:.2f} ms, max {delays[-1]:.2f} ms",
          flush=True)
    connections.close_all()
    log = open(WORK / "longpoll.log", "w")  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen(LONGPOLL_COMMAND, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    rounds = []
    nginx = None
    if options.through_nginx:
        global CLIENT_PORT
        from tests.nginx_server import Nginx

        class ImageDefaults(Nginx):
            def write_config(self):
                super().write_config()
                text = self.config.read_text()
                for old, new in (("worker_connections  24576;", "worker_connections  1024;"),):
                    assert old in text
                    text = text.replace(old, new)
                self.config.write_text(text)

        kind = ImageDefaults if options.image_defaults else Nginx
        nginx = kind(WORK / "nginx", f"127.0.0.1:{PORT}").start()
        CLIENT_PORT = nginx.port
        setup = ("1,024 connections a worker" if options.image_defaults
                 else "deploy/nginx/nginx.conf")
        print(f"through nginx ({setup}) on port {nginx.port}", flush=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/feeds/lp/") as answer:
                    etag = answer.headers["ETag"]
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        pid = uvicorn_pid(server)
        for n in range(options.rounds):
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/feeds/lp/") as answer:
                etag = answer.headers["ETag"]
            result = round_trip(options.consumers, options.client_processes, etag, pid, n)
            rounds.append(result)
            print(f"round {n + 1}: {result['consumers']} consumers, {result['answered']} "
                  f"answered 200, statuses {sorted(result['statuses'])} (0: dropped), "
                  f"all held after {result['held_after_s']:.1f} s, "
                  f"server RSS {result['rss_mb']:.0f} MB (peak {result['hwm_mb']:.0f} MB); "
                  f"commit -> response p50 {result['p50_ms']:.1f} ms, "
                  f"p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms; server CPU "
                  f"for the wake-up {result['server_cpu_ms']:.0f} ms "
                  f"({1000 * result['server_cpu_ms'] / result['consumers']:.0f} us a consumer); "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if nginx is not None:
            errors = [line.split(": ", 1)[-1] for line in nginx.error_log().splitlines()
                      if re.search(r"\[(warn|error|crit|alert|emerg)\]", line)]
            print(f"nginx error log: {len(errors)} warnings or errors" +
                  "".join(f"\n  {errors.count(line)} x {line}" for line in sorted(set(errors))),
                  flush=True)
            nginx.stop()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    seconds = django_path_cost(options.consumers)
    print(f"Django's full ASGI path, {options.consumers} requests of the same document one "
          f"after another: {seconds:.2f} s ({1e6 * seconds / options.consumers:.0f} us "
          f"each)", flush=True)
    print(f"\nMachine: {os.cpu_count()} cores, {platform.platform()}, Python "
          f"{platform.python_version()}; client processes: {options.client_processes}")


if __name__ == "__main__":
    main()
