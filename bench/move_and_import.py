"""What the two operator commands cost, each against its baseline in one run:

- `rerender_documents` after a move to another base URL: a feed of --entries entries
  (pages of 100) sealed and snapshotted, then rendered again with another base URL (its
  exported files written again too), against sealing and snapshotting it; then a second
  run, which finds every document current.
- `import_records`: --records new records from a JSON lines file, in batches of 500,
  against `apply_batch` given the same records from memory; then the same file again
  (which appends nothing).

    .venv/bin/python bench/move_and_import.py [--entries 50000] [--records 20000]

Uses the PostgreSQL database BENCH_MOVE_DB (`bench_move`; created if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = os.environ.get("BENCH_MOVE_DB", "bench_move")


def record(n: int) -> dict:
    return {"title": f"Record {n}", "summary": "A summary of the record. " * 3,
            "metadata": {"n": n, "subject": "Soil carbon", "tags": ["a", "b"]},
            "links": [{"href": f"https://data.example.org/{n}", "rel": "related",
                       "type": "text/html"}]}


def timed(function, *args, **kwargs) -> tuple[float, object]:
    began = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - began, result


def move(entries: int) -> None:
    from django.conf import settings

    from archives.log import publishing, rerendering
    from archives.log.sealing import seal_feed
    from archives.storage.snapshots import take_snapshot

    settings.FEEDPUB_BASE_URL = "http://127.0.0.1:8000"
    feed = publishing.create_feed(slug=f"move-{time.time_ns()}", title="Move", page_size=100)
    for start in range(0, entries, 1000):
        publishing.apply_batch(feed=feed, operations=[
            {"op": "put", "key": f"r{n}", "record": record(n)}
            for n in range(start, min(entries, start + 1000))])
    sealed, _ = timed(seal_feed, feed)
    snapshot, _ = timed(take_snapshot, feed)
    settings.FEEDPUB_BASE_URL = "https://feeds.example.org"
    first, report = timed(rerendering.rerender, slug=feed.slug)
    again, current = timed(rerendering.rerender, slug=feed.slug)
    print(f"rerender_documents, {entries:,} entries: {report.pages} pages and "
          f"{report.snapshot_pages} snapshot pages in {first:.1f} s (exported "
          f"{report.exported}), against {sealed + snapshot:.1f} s to seal ({sealed:.1f} s) "
          f"and snapshot it: {first / (sealed + snapshot):.2f}x; a second run "
          f"{again:.2f} s ({current.current} current)", flush=True)


def load(records: int) -> None:
    from archives.log import publishing
    from archives.management import importing

    rows = [{"key": f"r{n}", **record(n)} for n in range(records)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as file:
        file.writelines(json.dumps(row) + "\n" for row in rows)
    direct = publishing.create_feed(slug=f"direct-{time.time_ns()}", title="Direct")
    imported = publishing.create_feed(slug=f"imported-{time.time_ns()}", title="Imported")

    def batches():
        for start in range(0, records, 500):
            publishing.apply_batch(feed=direct, operations=[
                {"op": "put", "key": row["key"],
                 "record": {k: v for k, v in row.items() if k != "key"}}
                for row in rows[start:start + 500]])

    def run():
        return importing.import_records(feed=imported, path=file.name, file_format="jsonl",
                                        batch_size=500)

    baseline, _ = timed(batches)
    first, _ = timed(run)
    again, outcome = timed(run)
    os.unlink(file.name)
    print(f"import_records, {records:,} records: {records / first:,.0f} records/s against "
          f"apply_batch's {records / baseline:,.0f}/s from memory: {baseline / first:.2f}x; "
          f"the same file again {records / again:,.0f} records/s, "
          f"{outcome.appended} entries appended", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--records", type=int, default=20_000)
    options = parser.parse_args()
    (ROOT / "bench" / ".work").mkdir(exist_ok=True)
    pages = tempfile.mkdtemp(prefix="move-pages-", dir=ROOT / "bench" / ".work")
    os.environ.update(DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
                      DJANGO_SETTINGS_MODULE="feedpub.settings", LOG_LEVEL="WARNING",
                      DEBUG="false", SECRET_KEY="bench-only-" + "x" * 40,
                      FEEDPUB_SEAL_ON_WRITE="false", FEEDPUB_PAGES_DIR=pages)
    sys.path.insert(0, str(ROOT))
    subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DATABASE],
                   check=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DATABASE], check=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
    move(options.entries)
    load(options.records)


if __name__ == "__main__":
    main()
