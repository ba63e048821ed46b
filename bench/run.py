"""feedpub's benchmark: one run, one machine, one table (see bench/README.md).

    .venv/bin/python bench/run.py [--duration 10] [--reuse]

It needs wrk and nginx (Debian: `apt-get install -y wrk nginx`) and PostgreSQL at
127.0.0.1:5432 (user postgres, trust). It (re)creates the database `bench` (BENCH_DB),
then, all in this one run:

1. writes: a 1,000,000-entry feed and a 20,050-entry feed through the write path's batch
   function (batch ingest, records/s), then starts the sealer exactly as
   docker-compose.yml does (`deploy/entrypoint.sh sealer`) and times it sealing them
   (entries/s, its peak memory); then 8 processes doing single `put_record` calls;
2. reads: starts gunicorn (`deploy/entrypoint.sh web`) and nginx (the compose file's
   template, deploy/nginx/feedpub.conf.template) and measures each URL with wrk.

Every read figure is also given as a ratio against a baseline measured in the same run,
since absolute figures on a shared 2-core machine move 15-20 % from run to run.
`--reuse` keeps an existing database and skips the write measurements; `--writes-only`
measures the writes alone (the sealing figure of docs/performance/ is one of them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
DB_NAME = os.environ.get("BENCH_DB", "bench")
# Other ports (BENCH_PORTS="web,nginx,static") let two runs share a machine.
WEB_PORT, NGINX_PORT, STATIC_PORT = (
    int(port) for port in os.environ.get("BENCH_PORTS", "8101,8180,8181").split(","))
WEB = f"http://127.0.0.1:{WEB_PORT}"
NGINX = f"http://127.0.0.1:{NGINX_PORT}"

# The deployment's own commands (docker-compose.yml runs the same names; tests/test_deploy.py
# checks that they agree).
ENTRYPOINT = "deploy/entrypoint.sh"
MIGRATE_COMMAND = [ENTRYPOINT, "migrate"]
WEB_COMMAND = [ENTRYPOINT, "web"]
SEALER_COMMAND = [ENTRYPOINT, "sealer"]
NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "feedpub.conf.template"

PAGE_SIZE = 100
BIG_ENTRIES = int(os.environ.get("BENCH_BIG_ENTRIES", "1000000"))  # smaller: a smoke run
SMALL_ENTRIES = 200 * PAGE_SIZE + 50  # 200 pages and 50 entries in its subscription document
BATCH = 1000
PUT_CLIENTS = 8

ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DEBUG": "false",
    "SECRET_KEY": "bench-only-" + "k" * 50,
    "SECURE_SSL_REDIRECT": "false",  # plain http on 127.0.0.1; TLS is the proxy's job
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "FEEDPUB_BASE_URL": NGINX,
    "FEEDPUB_PAGE_SIZE": str(PAGE_SIZE),
    "GUNICORN_BIND": f"127.0.0.1:{WEB_PORT}",
    "WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "4"),
    "SEAL_INTERVAL": "1",
    "FEEDPUB_SNAPSHOT_EVERY": "0",  # bench/snapshot.py measures snapshots on their own
    "LOG_LEVEL": "WARNING",
    "GUNICORN_LOGLEVEL": "warning",
    "BENCH_CONSTANT_FILE": str(WORK / "static" / "page.xml"),
    "FEEDPUB_PAGES_DIR": str(WORK / "pages"),  # the sealer exports, nginx serves
    "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
}
os.environ.update(ENV)
sys.path.insert(0, str(ROOT))

from bench.data import record  # noqa: E402

# Results ------------------------------------------------------------------------------

@dataclass
class Read:
    name: str
    url: str
    rps: float
    p50_ms: float
    p99_ms: float
    bad: int  # responses that were neither 2xx nor 3xx, plus socket errors


@dataclass
class Target:
    what: str
    value: float
    goal: float
    unit: str

    @property
    def met(self) -> bool:
        return self.value <= self.goal if self.unit == "MB" else self.value >= self.goal


# Processes ----------------------------------------------------------------------------

def sh(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, check=True, text=True, capture_output=True, **kwargs)


def start(args: list[str], log: str) -> subprocess.Popen:
    out = open(WORK / log, "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def peak_memory_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


# Database and data ----------------------------------------------------------------------

def fresh_database() -> None:
    admin = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"]
    sh(*admin, f'DROP DATABASE IF EXISTS "{DB_NAME}"')
    sh(*admin, f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(["rm", "-rf", ENV["FEEDPUB_PAGES_DIR"]], check=True)  # the old pages'


def wait_for_export(seconds: float = 900) -> tuple[int, float]:
    """Wait for the sealer to export every sealed page (it exports each once its
    Last-Modified second has passed, up to 500 a pass); (pages, seconds waited)."""
    from archives.models import ArchivePage
    from archives.storage import export

    began = time.perf_counter()
    while export.pending().exists() or ArchivePage.objects.filter(exported__isnull=True).exists():
        if time.perf_counter() - began > seconds:
            raise RuntimeError(f"the sealer has not exported every page in {seconds} s")
        time.sleep(0.5)
    return ArchivePage.objects.count(), time.perf_counter() - began


def ingest(slug: str, entries: int) -> float:
    """Create a feed of `entries` records through apply_batch; returns records/s."""
    from archives.log.publishing import apply_batch, create_feed

    feed = create_feed(slug=slug, title=f"Benchmark feed {slug}", page_size=PAGE_SIZE)
    began = time.perf_counter()
    for first in range(0, entries, BATCH):
        operations = [{"op": "put", "key": f"k{i}", "record": record(i)}
                      for i in range(first, min(first + BATCH, entries))]
        apply_batch(feed=feed, operations=operations)
    return entries / (time.perf_counter() - began)


def seal_with_sealer(slugs: list[str]) -> tuple[float, float, int]:
    """Start the deployment's sealer and time it sealing every full page of `slugs`.
    Returns (entries/s, peak MB, entries sealed); the sealer keeps running."""
    from archives.models import Feed

    def sealed() -> int:
        return sum(f.sealed_pages * f.page_size for f in Feed.objects.filter(slug__in=slugs))

    def full() -> int:
        return sum(f.full_pages * f.page_size for f in Feed.objects.filter(slug__in=slugs))

    goal, before = full(), sealed()
    began = time.perf_counter()
    sealer = start(SEALER_COMMAND, "sealer.log")
    while sealed() < goal:
        if sealer.poll() is not None:
            raise RuntimeError(f"the sealer died; see {WORK / 'sealer.log'}")
        time.sleep(0.1)
    seconds = time.perf_counter() - began
    State.sealer = sealer
    return (goal - before) / seconds, peak_memory_mb(sealer.pid), goal - before


def _put_client(worker: int, seconds: float) -> list[float]:
    """One of the concurrent writers: single put_record calls for `seconds`."""
    from django.db import connections

    from archives.log.publishing import put_record
    from archives.models import Feed

    feed = Feed.objects.get(slug="puts")
    latencies, i = [], 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        put_record(feed=feed, key=f"w{worker}-{i}", data=record(i))
        latencies.append(time.perf_counter() - began)
        i += 1
    connections.close_all()
    return latencies


def concurrent_puts(seconds: float) -> tuple[float, float, float]:
    """PUT_CLIENTS processes writing single records to one feed (seal-on-write on, as in
    production). Returns (records/s, p50 ms, p99 ms)."""
    from django.db import connections

    from archives.log.publishing import create_feed

    create_feed(slug="puts", title="Concurrent single puts", page_size=PAGE_SIZE)
    # The clients start as gunicorn's workers do (preload_app): from a parent that loaded
    # what feedpub/wsgi.py loads, the URLconf and the sealer. Without it each client's first
    # seal imported the URLconf (~0.5 s), eight at once on two cores: the p99 of the run.
    import feedpub.wsgi  # noqa: F401

    connections.close_all()  # each forked client opens its own connection
    with ProcessPoolExecutor(PUT_CLIENTS) as pool:
        results = list(pool.map(_put_client, range(PUT_CLIENTS), [seconds] * PUT_CLIENTS))
    latencies = sorted(x for result in results for x in result)
    return (len(latencies) / seconds, 1000 * latencies[len(latencies) // 2],
            1000 * latencies[int(len(latencies) * 0.99)])


# HTTP ---------------------------------------------------------------------------------

def start_nginx() -> subprocess.Popen:
    """nginx with the compose file's template, rendered for 127.0.0.1, plus a static file."""
    values = {"NGINX_PORT": str(NGINX_PORT), "FEEDPUB_UPSTREAM": f"127.0.0.1:{WEB_PORT}",
              "NGINX_CACHE_DIR": str(WORK / "nginx-cache"), "NGINX_CACHE_SIZE": "1g",
              "FEEDPUB_PAGES_DIR": ENV["FEEDPUB_PAGES_DIR"], "FEEDPUB_BASE_URL": NGINX,
              "FEEDPUB_MAX_AGE": "60",
              # As ENV: plain http, no redirect (and so no HSTS either).
              "FEEDPUB_SECURE_SSL_REDIRECT": ENV["SECURE_SSL_REDIRECT"],
              "FEEDPUB_SECURE_HSTS_SECONDS": "0", "FEEDPUB_SECURE_HSTS_INCLUDE_SUBDOMAINS": "false",
              "FEEDPUB_SECURE_HSTS_PRELOAD": "false",
              # No long polls here (bench/longpoll.py measures them): the same upstream.
              "FEEDPUB_LONGPOLL_UPSTREAM": f"127.0.0.1:{WEB_PORT}",
              # Upstreams by address here: the resolver is never asked.
              "NGINX_RESOLVER": "127.0.0.1 valid=10s ipv6=off",
              # No ACME challenges here, and plain http only (tls.sh, below).
              "NGINX_ACME_ROOT": str(WORK / "acme")}
    text = NGINX_TEMPLATE.read_text()
    for name, value in values.items():  # what the nginx image's envsubst does
        text = text.replace("${" + name + "}", value)
    (WORK / "feedpub.conf").write_text(text)
    (WORK / "nginx.conf").write_text(f"""
daemon off;
worker_processes auto;
pid {WORK}/nginx.pid;
error_log {WORK}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {WORK}/nginx-tmp/body;
    proxy_temp_path {WORK}/nginx-tmp/proxy;
    fastcgi_temp_path {WORK}/nginx-tmp/fastcgi;
    uwsgi_temp_path {WORK}/nginx-tmp/uwsgi;
    scgi_temp_path {WORK}/nginx-tmp/scgi;
    sendfile on;
    include {WORK}/feedpub.conf;
    server {{
        listen 127.0.0.1:{STATIC_PORT};
        location / {{ root {WORK}/static; default_type application/atom+xml; }}
    }}
}}
""")
    for folder in ("nginx-cache", "nginx-tmp"):
        subprocess.run(["rm", "-rf", str(WORK / folder)], check=True)
        (WORK / folder).mkdir()
    # What the template includes beside nginx.conf: no certificate, no trusted proxy.
    subprocess.run(["/bin/sh", str(ROOT / "deploy" / "nginx" / "tls.sh"), "render"],
                   env={"PATH": os.environ["PATH"], "NGINX_CONF_DIR": str(WORK)}, check=True)
    return start(["nginx", "-c", str(WORK / "nginx.conf"), "-p", str(WORK)], "nginx.log")


LUA_RANDOM_PAGE = """
local counter = 0
function setup(thread) counter = counter + 1; thread:set("id", counter) end
function init(args) math.randomseed(os.time() * 1000 + id) end
function request()
  return wrk.format(nil, "/feeds/big/archives/" .. math.random(1, %d) .. "/")
end
"""


# The same random draw, for the one static file: the baseline of the random page above, with
# the same cost of running the script in wrk (which shares the machine's two cores).
LUA_STATIC_FILE = """
local counter = 0
function setup(thread) counter = counter + 1; thread:set("id", counter) end
function init(args) math.randomseed(os.time() * 1000 + id) end
function request()
  local ignored = math.random(1, %d)
  return wrk.format(nil, "/page.xml")
end
"""


def wrk(name: str, url: str, *, headers: dict[str, str] | None = None,
        script: str | None = None, seconds: float) -> Read:
    args = ["wrk", "-t2", "-c32", f"-d{max(1, round(seconds))}s", "--latency"]
    for header, value in (headers or {}).items():
        args += ["-H", f"{header}: {value}"]
    if script:
        args += ["-s", script]
    output = sh(*args, url).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    bad = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       output)
    # A sync worker closes every connection; wrk counts those closes as read errors.
    bad += int(errors.group(1)) + int(errors.group(4)) if errors else 0
    read = Read(name, url, rps, _latency(output, "50%"), _latency(output, "99%"), bad)
    print(f"  {name:<52} {rps:>9.0f} req/s  p50 {read.p50_ms:6.2f} ms  "
          f"p99 {read.p99_ms:6.2f} ms{'  BAD ' + str(bad) if bad else ''}", flush=True)
    return read


def alternating(runs: list[tuple], *, rounds: int = 3, seconds: float) -> list[Read]:
    """wrk runs (name, url, options) measured in turn, `rounds` times over, each the mean
    of its rounds: a ratio between them survives a load that changes during the run."""
    measured: dict[str, list[Read]] = {}
    for _ in range(rounds):
        for name, url, options in runs:
            measured.setdefault(name, []).append(wrk(name, url, seconds=seconds, **options))
    return [Read(name, reads[0].url, sum(r.rps for r in reads) / rounds,
                 sum(r.p50_ms for r in reads) / rounds, sum(r.p99_ms for r in reads) / rounds,
                 sum(r.bad for r in reads)) for name, reads in measured.items()]


def _latency(output: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", output).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def warm(url: str, **kwargs) -> None:
    """Let every gunicorn worker (and nginx) see the URL before it is measured."""
    wrk("(warm-up)", url, seconds=2, **kwargs)


def etag_of(url: str) -> str:
    with urllib.request.urlopen(url) as response:
        return response.headers["ETag"]


# The run -------------------------------------------------------------------------------

class State:
    sealer: subprocess.Popen | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per wrk run")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the existing database; skip the write measurements")
    parser.add_argument("--writes-only", action="store_true",
                        help="measure the writes (ingest, sealing, single puts) and stop")
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    (WORK / "static").mkdir(exist_ok=True)
    web = nginx = None
    try:
        if not options.reuse:
            fresh_database()
        sh(*MIGRATE_COMMAND)
        import django

        django.setup()
        writes = measure_writes(options) if not options.reuse else {}
        if options.writes_only:
            print(f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}")
            return
        if State.sealer is None:
            State.sealer = start(SEALER_COMMAND, "sealer.log")
        write_constant_page()
        exported, waited = wait_for_export()
        print(f"  the sealer has exported all {exported:,} pages (waited {waited:.0f} s)",
              flush=True)
        web = start(WEB_COMMAND, "web.log")
        nginx = start_nginx()
        wait_for(f"{WEB}/healthz")
        wait_for(f"http://127.0.0.1:{STATIC_PORT}/page.xml")
        reads = measure_reads(options.duration)
    finally:
        for process in (nginx, web, State.sealer):
            stop(process)
    report(reads, writes, options)


def measure_writes(options) -> dict:
    from django.test.utils import override_settings

    print("writes", flush=True)
    with override_settings(FEEDPUB_SEAL_ON_WRITE=False):  # the sealer is timed on its own
        began = time.perf_counter()
        ingest_rate = ingest("big", BIG_ENTRIES)
        ingest("bench", SMALL_ENTRIES)
        print(f"  batch ingest {ingest_rate:,.0f} records/s "
              f"({time.perf_counter() - began:.0f} s for both feeds)", flush=True)
    seal_rate, seal_mb, sealed = seal_with_sealer(["big", "bench"])
    print(f"  sealing {sealed:,} entries: {seal_rate:,.0f} entries/s, peak {seal_mb:.0f} MB",
          flush=True)
    put_rate, put_p50, put_p99 = concurrent_puts(options.duration)
    print(f"  {PUT_CLIENTS} clients of single puts: {put_rate:,.0f} records/s, "
          f"p50 {put_p50:.1f} ms, p99 {put_p99:.1f} ms", flush=True)
    return {"ingest_rps": ingest_rate, "seal_eps": seal_rate, "seal_peak_mb": seal_mb,
            "sealed_entries": sealed, "put_rps": put_rate, "put_p50_ms": put_p50,
            "put_p99_ms": put_p99}


def write_constant_page() -> None:
    """The bytes of a sealed archive page: what the constant view and nginx's static file
    serve, so that every body compared has the same size."""
    from archives.models import ArchivePage

    body = ArchivePage.objects.get(feed__slug="bench", number=1).body
    (WORK / "static" / "page.xml").write_bytes(bytes(body))


def measure_reads(seconds: float) -> list[Read]:
    from archives.models import Feed

    big = Feed.objects.get(slug="big")
    deep = big.sealed_pages - 1  # the deepest page that has its next-archive link
    lua = WORK / "random-page.lua"
    lua.write_text(LUA_RANDOM_PAGE % deep)
    # The whole 1M feed's pages, final ones from their files (the newest, open one too).
    lua_all = WORK / "random-exported-page.lua"
    lua_all.write_text(LUA_RANDOM_PAGE % big.sealed_pages)
    lua_static = WORK / "static-file.lua"
    lua_static.write_text(LUA_STATIC_FILE % big.sealed_pages)
    urls = {
        "constant": f"{WEB}/bench/constant",
        "syndication": f"{WEB}/bench/syndication/bench/",
        "subscription": f"{WEB}/feeds/bench/",
        "archive": f"{WEB}/feeds/bench/archives/1/",
        "linked": f"{WEB}/feeds/bench/pages/1",
        "rss archive": f"{WEB}/feeds/bench/archives/1/rss/",
        "date": f"{WEB}/feeds/bench/archives/2000/01/",
        "big first": f"{WEB}/feeds/big/archives/1/",
        "big deep": f"{WEB}/feeds/big/archives/{deep}/",
        "big subscription": f"{WEB}/feeds/big/",
        "big date": f"{WEB}/feeds/big/archives/2100/01/",
        "nginx static": f"http://127.0.0.1:{STATIC_PORT}/page.xml",
        "nginx archive": f"{NGINX}/feeds/bench/archives/1/",
    }
    gzip = {"Accept-Encoding": "gzip"}
    poll = {"If-None-Match": etag_of(urls["subscription"])}
    archive_304 = {"If-None-Match": etag_of(urls["archive"])}
    print("reads (wrk -t2 -c32)", flush=True)
    for url in (urls["constant"], urls["archive"], urls["linked"], urls["rss archive"],
                urls["subscription"],
                urls["big first"],
                urls["big deep"], urls["nginx archive"], urls["nginx static"]):
        warm(url)
    for url in (urls["archive"], urls["nginx archive"]):
        warm(url, headers=gzip)
    reads = [
        wrk("constant-body Django view (baseline)", urls["constant"], seconds=seconds),
        wrk("django.contrib.syndication, 50 newest entries", urls["syndication"],
            seconds=seconds),
        wrk("subscription document, 50 entries", urls["subscription"], seconds=seconds),
        wrk("archive page, warm", urls["archive"], seconds=seconds),
        wrk("archive page, warm, gzip", urls["archive"], headers=gzip, seconds=seconds),
        wrk("linked page (multipart), warm", urls["linked"], seconds=seconds),
        wrk("RSS archive page, warm", urls["rss archive"], seconds=seconds),
        wrk("archive page, random of 9,999 (1M feed)", f"{WEB}/", script=str(lua),
            seconds=seconds),
        wrk("304: subscription poll, nothing new", urls["subscription"], headers=poll,
            seconds=seconds),
        wrk("304: archive page revalidation", urls["archive"], headers=archive_304,
            seconds=seconds),
        wrk("date redirect (301)", urls["date"], seconds=seconds),
        wrk("1M feed: first page", urls["big first"], seconds=seconds),
        wrk(f"1M feed: deep page ({deep})", urls["big deep"], seconds=seconds),
        wrk("1M feed: subscription document", urls["big subscription"], seconds=seconds),
        wrk("1M feed: date not sealed yet (302)", urls["big date"], seconds=seconds),
        # nginx's rows in turn, three rounds (each row the mean of its three runs).
        *alternating([
            ("nginx: static file, same bytes", urls["nginx static"], {}),
            ("nginx: archive page from its exported file", urls["nginx archive"], {}),
            ("nginx: archive page from its exported file, gzip", urls["nginx archive"],
             {"headers": gzip}),
            ("nginx: static file, same bytes, by the random script", urls["nginx static"],
             {"script": str(lua_static)}),
            (f"nginx: exported file, random of {big.sealed_pages:,} (1M feed), cold",
             f"{NGINX}/", {"script": str(lua_all)}),
        ], seconds=seconds),
        wrk("constant-body Django view (again)", urls["constant"], seconds=seconds),
    ]
    return reads


def report(reads: list[Read], writes: dict, options) -> None:
    by = {read.name: read for read in reads}
    first, again = by.pop("constant-body Django view (baseline)"), by.pop(
        "constant-body Django view (again)")
    baseline = (first.rps + again.rps) / 2
    static = by["nginx: static file, same bytes"].rps
    random_file = next(r for name, r in by.items() if name.startswith("nginx: exported file"))
    lines = [
        "| what | req/s | p50 ms | p99 ms | x constant view |",
        "|---|---:|---:|---:|---:|",
        f"| constant-body Django view (baseline; mean of first and last run: "
        f"{first.rps:,.0f} / {again.rps:,.0f}) | {baseline:,.0f} | {first.p50_ms:.2f} | "
        f"{first.p99_ms:.2f} | 1.00 |",
    ]
    for read in by.values():
        bad = f" ({read.bad} errors)" if read.bad else ""
        lines.append(f"| {read.name}{bad} | {read.rps:,.0f} | {read.p50_ms:.2f} | "
                     f"{read.p99_ms:.2f} | {read.rps / baseline:.2f} |")
    big_deep = next(r for name, r in by.items() if name.startswith("1M feed: deep"))
    targets = [
        Target("warm archive page / constant view", by["archive page, warm"].rps / baseline,
               0.8, "x"),
        Target("warm archive page: gzip / plain", by["archive page, warm, gzip"].rps
               / by["archive page, warm"].rps, 1.0, "x"),
        Target("nginx exported archive page: gzip / plain",
               by["nginx: archive page from its exported file, gzip"].rps
               / by["nginx: archive page from its exported file"].rps, 1.0, "x"),
        Target("warm linked page (multipart) / constant view",
               by["linked page (multipart), warm"].rps / baseline, 0.8, "x"),
        Target("warm RSS archive page / constant view",
               by["RSS archive page, warm"].rps / baseline, 0.8, "x"),
        Target("nginx exported archive page / nginx static file",
               by["nginx: archive page from its exported file"].rps / static, 0.8, "x"),
        Target("nginx random exported page of the 1M feed, cold / nginx static file "
               "(both requested by a wrk script)", random_file.rps
               / by["nginx: static file, same bytes, by the random script"].rps, 0.8, "x"),
        Target("subscription document / Django syndication",
               by["subscription document, 50 entries"].rps
               / by["django.contrib.syndication, 50 newest entries"].rps, 6, "x"),
        Target("304 subscription poll / constant view",
               by["304: subscription poll, nothing new"].rps / baseline, 0.9, "x"),
        Target("304 archive revalidation / constant view",
               by["304: archive page revalidation"].rps / baseline, 0.5, "x"),
        Target("1M feed: deep page / first page",
               big_deep.rps / by["1M feed: first page"].rps, 0.9, "x"),
    ]
    if writes:
        lines += [
            "",
            "| writes | figure |",
            "|---|---:|",
            f"| batch ingest (apply_batch, {BATCH} puts a batch, {BIG_ENTRIES:,} records) | "
            f"{writes['ingest_rps']:,.0f} records/s |",
            f"| sealing (`seal_archives --watch`, {writes['sealed_entries']:,} entries) | "
            f"{writes['seal_eps']:,.0f} entries/s, peak {writes['seal_peak_mb']:.0f} MB |",
            f"| single puts, {PUT_CLIENTS} concurrent clients (seal on write) | "
            f"{writes['put_rps']:,.0f} records/s (p50 {writes['put_p50_ms']:.1f} ms, "
            f"p99 {writes['put_p99_ms']:.1f} ms) |",
        ]
        targets += [
            Target("batch ingest, records/s", writes["ingest_rps"], 5000, "/s"),
            Target("sealing, entries/s", writes["seal_eps"], 20000, "/s"),
            Target("sealing peak memory", writes["seal_peak_mb"], 200, "MB"),
        ]
    lines += ["", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for target in targets:
        comparison = "<=" if target.unit == "MB" else ">="
        value = (f"{target.value:.2f} x" if target.unit == "x"
                 else f"{target.value:,.0f} {target.unit}".replace(" /s", "/s"))
        lines.append(f"| {target.what} | {value} | {comparison} {target.goal:,} "
                     f"{target.unit} | {'yes' if target.met else '**NO**'} |")
    table = "\n".join(lines)
    print("\n" + machine() + "\n\n" + table)
    (WORK / "results.md").write_text(machine() + "\n\n" + table + "\n")
    (WORK / "results.json").write_text(json.dumps(
        {"reads": [asdict(r) for r in reads], "writes": writes,
         "duration": options.duration}, indent=2))


def machine() -> str:
    cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    memory = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    versions = {
        "PostgreSQL": sh("psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc",
                         "show server_version").stdout.strip(),
        "nginx": sh("nginx", "-v").stderr.strip().split("/")[-1],
        "gunicorn": sh("gunicorn", "--version").stdout.strip().split()[-1].strip(")"),
        "Python": platform.python_version(),
    }
    import django

    versions["Django"] = django.get_version()
    return (f"Machine: {os.cpu_count()} cores ({cpu.group(1) if cpu else '?'}), "
            f"{memory // 1024 ** 2} GB RAM, {platform.platform()}; "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"; gunicorn sync x{ENV['WEB_CONCURRENCY']}; wrk -t2 -c32.")


if __name__ == "__main__":
    main()
