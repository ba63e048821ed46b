"""The complete feed of a feed of N records: entries/s and peak memory of the stream.

    .venv/bin/python bench/complete.py [--records 1000000] [--sqlite]

PostgreSQL at 127.0.0.1:5432 (user postgres, trust): (re)creates the database
`bench_complete`; with --sqlite, a file bench_complete.sqlite3 in /tmp instead. The feed is
written straight into the tables by bench/snapshot.py's `write_feed` (one create entry per
record, an update for a tenth, a delete for a twentieth: 950,000 live records of
1,000,000); nothing is sealed (the complete feed reads records, not pages).

Then, in a process of its own so that its peak RSS (VmHWM, reset before each step) is the
stream's: the baseline, iterating the same live rows (`values_list(...).iterator()`, ordered
by key) and doing nothing with them; then GET /feeds/big/complete/ through Django's WSGI
handler, reading the streamed body piece by piece (counting bytes and entries), as a
server would send it; then the same with Accept-Encoding: gzip, inflating the pieces only to
count the entries (that time is the client's, and left out). Prints the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "bench_complete"
SQLITE_PATH = Path("/tmp/bench_complete.sqlite3")
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": "100",
    "FEEDPUB_SEAL_ON_WRITE": "false",
    # As in production: DEBUG keeps every query in memory.
    "DEBUG": "false",
    "SECRET_KEY": "bench-only",
}


def peak_mb() -> float:
    """VmHWM, the peak resident set since the last reset_peak()."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := current RSS


def populate(records: int) -> None:
    import django

    django.setup()
    from bench.snapshot import write_feed

    started = time.perf_counter()
    feed = write_feed(records, slug="big", title="Complete feed benchmark")
    print(f"written: {records:,} records, {feed.last_seq:,} entries in "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def measure() -> None:
    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    from archives.models import Record

    client = Client(HTTP_HOST="127.0.0.1")
    client.get("/feeds/big/complete/", secure=True, HTTP_IF_NONE_MATCH="warm-up")
    print(f"{connection.vendor}; RSS after setup {peak_mb():.0f} MB", flush=True)

    reset_peak()
    started = time.perf_counter()
    rows = (Record.objects.filter(feed__slug="big", deleted_at__isnull=True).order_by("key")
            .values_list("key", "title", "summary", "links", "updated", "created")
            .iterator(chunk_size=2000))
    live = sum(1 for _ in rows)
    baseline = time.perf_counter() - started
    baseline_peak = peak_mb()

    print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())}")
    print(f"baseline, iterating the {live:,} live rows (values_list, by key): "
          f"{baseline:.1f} s = {live / baseline:,.0f} rows/s; peak RSS {baseline_peak:.0f} MB",
          flush=True)
    plain = None
    for encoding in ("", "gzip"):
        reset_peak()
        started = time.perf_counter()
        response = client.get("/feeds/big/complete/", secure=True,  # SECURE_SSL_REDIRECT
                              HTTP_ACCEPT_ENCODING=encoding)
        assert response.get("Content-Encoding", "") == encoding
        size = entries = 0
        inflate = zlib.decompressobj(wbits=31)  # the gzip stream, to count its entries
        unzipping = 0.0  # the client's work, not counted
        tail = b""
        for piece in response.streaming_content:
            size += len(piece)
            if encoding:
                before = time.perf_counter()
                piece = inflate.decompress(piece)
                unzipping += time.perf_counter() - before
            # (an entry's tag may straddle two pieces of the gzip stream)
            entries += (tail + piece).count(b"<entry>")
            tail = piece[-6:]
        response.close()
        seconds = time.perf_counter() - started - unzipping
        assert entries == live, (entries, live)
        plain = plain or seconds
        name = "gzip-encoded" if encoding else "plain"
        print(f"complete feed, {name}: {entries:,} entries, {size / 1e6:,.0f} MB in "
              f"{seconds:.1f} s = {entries / seconds:,.0f} entries/s ({baseline / seconds:.2f} "
              f"x the baseline's rate, {plain / seconds:.2f} x plain); peak RSS "
              f"{peak_mb():.0f} MB", flush=True)
    print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="skip writing the feed")
    options = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    if not options.reuse:
        if options.sqlite:
            SQLITE_PATH.unlink(missing_ok=True)
        else:
            for command in ("dropdb", "createdb"):
                subprocess.run([command, "-h", "127.0.0.1", "-U", "postgres", DB_NAME]
                               + (["--if-exists"] if command == "dropdb" else []), check=True)
        subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True,
                       env=environment(options.sqlite))
        subprocess.run([python, __file__, "--populate", str(options.records)], cwd=ROOT,
                       check=True, env=environment(options.sqlite))
    subprocess.run([python, __file__, "--measure"], cwd=ROOT, check=True,
                   env=environment(options.sqlite))


def environment(sqlite: bool) -> dict[str, str]:
    url = f"sqlite:///{SQLITE_PATH}" if sqlite else \
        f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
    return {**os.environ, **ENV, "DATABASE_URL": url}


if __name__ == "__main__":
    if sys.argv[1:2] in (["--populate"], ["--measure"]):
        sys.path.insert(0, str(ROOT))
        populate(int(sys.argv[2])) if sys.argv[1] == "--populate" else measure()
    else:
        main()
