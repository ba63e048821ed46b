"""Peak memory of `manage.py harvest` on a large archived feed (see bench/README.md).

    .venv/bin/python bench/harvest_memory.py [--pages 10000] [--per-page 100]

A synthetic RFC 5005 feed (by default 10,000 documents of 100 entries: 9,999 archive pages and
the subscription document, 1,000,000 entries, as many requests as the harvester's default
budget) is generated page by page as it is requested, by a local HTTP server in a thread of
this process. The harvester runs as a child process, as a user runs
it (`manage.py harvest URL --state S -o records.jsonl`), twice: a first harvest, then a
second one that finds nothing new (one 304) and writes all the records again from its state.
Each child's peak resident memory comes from wait4(), so the server's memory never counts.

Entries look like feedpub's (an alternate and a related link, a summary: ~470 bytes each, a
page ~47 KB); every 50th entry deletes the record of 5,000 entries earlier.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2025, 1, 1, tzinfo=UTC)
ETAG = '"subscription-1"'


def stamp(n: int) -> str:
    return (T0 + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry(n: int) -> str:
    """Entry n: a put of record n, or (every 50th) the deletion of record n - 5000."""
    if n % 50 == 49 and n >= 5000:
        return (f"<entry><id>urn:x:record:{n - 5000}</id><title>Deleted</title>"
                f"<updated>{stamp(n)}</updated><content/></entry>")
    return (f"<entry><id>urn:x:record:{n}</id><title>Sensor data of station {n}, collected "
            f"in {2000 + n % 25}</title><updated>{stamp(n)}</updated>"
            f"<summary>Hourly temperature and salinity readings of station {n}, a buoy in the "
            f"estuary, quality-checked.</summary>"
            f'<link rel="alternate" type="application/atom+xml" '
            f'href="https://data.example.org/feeds/bench/records/record-{n:09d}"/>'
            f'<link rel="related" type="text/html" title="Landing page" '
            f'href="https://data.example.org/collections/record-{n:09d}"/></entry>')


class SyntheticFeed:
    """/archives/1 .. /archives/<pages - 1> and /feed (the subscription document, the newest
    `per_page` entries)."""

    def __init__(self, base: str, pages: int, per_page: int):
        self.base, self.pages, self.per_page = base, pages, per_page

    def document(self, path: str) -> bytes | None:
        if path == "/feed":
            return self.page(self.pages, archive=False)
        number = path.removeprefix("/archives/")
        if number.isdigit() and 1 <= int(number) < self.pages:
            return self.page(int(number), archive=True)
        return None

    def page(self, number: int, *, archive: bool) -> bytes:
        first = (number - 1) * self.per_page
        entries = range(first, first + self.per_page)
        links = [("self", f"/archives/{number}" if archive else "/feed"), ("current", "/feed")]
        if number > 1:
            links.append(("prev-archive", f"/archives/{number - 1}"))
        if archive and number < self.pages - 1:
            links.append(("next-archive", f"/archives/{number + 1}"))
        head = "".join(f'<link rel="{rel}" href="{self.base}{href}"/>' for rel, href in links)
        return ('<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom"'
                ' xmlns:fh="http://purl.org/syndication/history/1.0"><id>urn:x:bench</id>'
                f"<title>Bench</title><updated>{stamp(entries[-1])}</updated>{head}"
                + ("<fh:archive/>" if archive else "")
                + "".join(entry(n) for n in reversed(entries)) + "</feed>").encode()


def serve(pages: int, per_page: int) -> tuple[ThreadingHTTPServer, SyntheticFeed]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path == "/feed" and self.headers.get("If-None-Match") == ETAG:
                self.send_response(304)
                self.end_headers()
                return
            body = feed.document(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/atom+xml")
            self.send_header("Content-Length", str(len(body or b"")))
            if self.path == "/feed":
                self.send_header("ETag", ETAG)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    feed = SyntheticFeed(f"http://127.0.0.1:{server.server_address[1]}", pages, per_page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, feed


def harvest(url: str, state: Path, output: Path) -> dict:
    """One `manage.py harvest` in a child process: its summary, seconds and peak RSS."""
    command = [sys.executable, str(ROOT / "manage.py"), "harvest", url, "--state", str(state),
               "-o", str(output), "--summary-json", "--no-progress"]
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,  # noqa: S603
                             stderr=subprocess.PIPE, text=True)
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"harvest exited with {child.returncode}:\n{errors}")
    summary = json.loads(errors.strip().splitlines()[-1])
    return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "summary": summary}


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--per-page", type=int, default=100)
    args = parser.parse_args()
    server, feed = serve(args.pages, args.per_page)
    page_bytes = len(feed.document("/archives/1"))
    print(f"{args.pages:,} documents of {args.per_page} entries ({args.pages - 1:,} archive "
          f"pages and the subscription document), {page_bytes:,} bytes a page")
    with tempfile.TemporaryDirectory() as work:
        state, output = Path(work) / "state", Path(work) / "records.jsonl"
        for run in ("first harvest", "second harvest (304)"):
            result = harvest(f"{feed.base}/feed", state, output)
            summary = result["summary"]
            print(f"{run}: peak RSS {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, "
                  f"{summary['requests']:,} requests, {summary['entries_applied']:,} entries "
                  f"applied, {summary['live_records']:,} live records; state "
                  f"{state.stat().st_size / 1e6:.0f} MB, output "
                  f"{output.stat().st_size / 1e6:.0f} MB, "
                  f"sha256 {file_hash(output)}")
    server.shutdown()


if __name__ == "__main__":
    main()
