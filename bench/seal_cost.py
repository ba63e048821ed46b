"""What storing linked pages and RSS twins costs sealing: the same 20,000 entries sealed
in one run as today (Atom, linked pages and RSS), with the RSS rendering stubbed out, and
with both stubbed out (Atom only). With --export: what exporting the sealed pages as files
(archives/storage/export.py, to a local directory) adds to sealing them, each run sealing then
exporting everything it sealed, against sealing alone.

    .venv/bin/python bench/seal_cost.py [--entries 20000] [--export]

Uses the PostgreSQL database of bench/snapshot.py (`bench_snapshot`, or BENCH_SEAL_DB;
created if missing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = os.environ.get("BENCH_SEAL_DB", "bench_snapshot")


def seal(entries: int, *, linked_pages: bool = True, rss_twins: bool = True,
         export_pages: bool = False) -> float:
    """Entries/s sealing a new feed of `entries` creates, written by COPY (and exporting
    its pages, as the sealer's next passes do, if `export_pages`)."""
    from psycopg.types.json import Jsonb

    from archives.db import fastsql
    from archives.documents import base, linkedpages, rss
    from archives.log import publishing, sealing
    from archives.models import Entry, Feed, Record
    from archives.storage import export

    feed = publishing.create_feed(slug=f"seal-{time.time_ns()}", title="Sealing cost",
                                  page_size=100)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    metadata = {"subject": "Soil carbon", "place": "Tasmania", "year": 2003, "version": 1}
    links = [{"href": "https://data.example.org/x", "rel": "related", "type": "text/html"}]
    fastsql.copy_rows(Record, ("feed_id", "key", "title", "summary", "metadata", "links",
                               "created", "updated", "datestamp"), (
        (feed.pk, f"r{n:07d}", f"Record {n}", "A summary.", Jsonb(metadata), Jsonb(links),
         start, start, start) for n in range(entries)))
    ids = dict(Record.objects.filter(feed=feed).values_list("key", "pk"))
    # Named columns (the rest at their database defaults): a new column breaks nothing here.
    fastsql.copy_rows(Entry, ("feed_id", "seq", "record_id", "kind", "updated", "title",
                              "summary", "links", "metadata"), (
        (feed.pk, n + 1, ids[f"r{n:07d}"], "create", start + timedelta(microseconds=n + 1),
         f"Record {n}", "A summary.", Jsonb(links), Jsonb(metadata)) for n in range(entries)))
    Feed.objects.filter(pk=feed.pk).update(
        last_seq=entries, last_updated=start + timedelta(microseconds=entries))
    feed = Feed.objects.get(pk=feed.pk)
    saved = linkedpages.render_page, rss.render_archive, rss.add_next_archive
    if not linked_pages:
        linkedpages.render_page = lambda feed, rows: b""
    if not rss_twins:
        rss.render_archive = lambda feed, number, rows, has_next: b""
        rss.add_next_archive = lambda body, href: body  # (there is nothing to link)
    try:
        began = time.perf_counter()
        sealing.seal_feed(feed)
        sealed = time.perf_counter()
        if export_pages:
            clock = base.now  # as if a second had passed: the pages are settled
            base.now = lambda: clock() + timedelta(seconds=5)
            try:
                export.export_pending(slug=feed.slug, limit=None)
            finally:
                base.now = clock
            EXPORT_SHARES.append((time.perf_counter() - sealed) / (sealed - began))
        return entries / (time.perf_counter() - began)
    finally:
        linkedpages.render_page, rss.render_archive, rss.add_next_archive = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--export", action="store_true",
                        help="sealing with the export of its pages against sealing alone")
    options = parser.parse_args()
    (ROOT / "bench" / ".work").mkdir(exist_ok=True)
    pages = tempfile.mkdtemp(prefix="seal-cost-pages-", dir=ROOT / "bench" / ".work")
    os.environ.update(DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
                      DJANGO_SETTINGS_MODULE="feedpub.settings", LOG_LEVEL="WARNING",
                      FEEDPUB_PAGES_DIR=pages)
    sys.path.insert(0, str(ROOT))
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DATABASE],
                   stderr=subprocess.DEVNULL, check=False)  # exists already: fine
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
    if options.export:
        compare_export(options.entries)
        shutil.rmtree(pages)
        return
    runs = [("Atom, linked pages, RSS", True, True), ("Atom and linked pages", True, False),
            ("Atom pages only", False, False)]
    rates: dict[str, list[float]] = {}
    for name, linked_pages, rss_twins in runs + runs[::-1]:  # each twice, in mirrored order
        rate = seal(options.entries, linked_pages=linked_pages, rss_twins=rss_twins)
        rates.setdefault(name, []).append(rate)
        print(f"{name:>24}: {rate:,.0f} entries/s", flush=True)
    mean = {name: sum(values) / len(values) for name, values in rates.items()}
    for name, _, _ in runs:
        print(f"{name:>24}: mean {mean[name]:,.0f} entries/s, "
              f"{mean[name] / mean['Atom pages only']:.2f} x Atom only, "
              f"{mean[name] / mean['Atom and linked pages']:.2f} x Atom and linked pages")


# Each export's time over the time of the sealing just before it, in the same run: less
# at the mercy of a load that changes between runs than the runs' rates are.
EXPORT_SHARES: list[float] = []


def compare_export(entries: int) -> None:
    rates: dict[str, list[float]] = {}
    runs = [("sealing", False), ("sealing and export", True)]
    for name, export_pages in runs + runs[::-1] + runs + runs[::-1]:  # mirrored, twice
        rate = seal(entries, export_pages=export_pages)
        rates.setdefault(name, []).append(rate)
        print(f"{name:>20}: {rate:,.0f} entries/s", flush=True)
    mean = {name: sum(values) / len(values) for name, values in rates.items()}
    cost = mean["sealing"] / mean["sealing and export"] - 1
    print(f"sealing alone: mean {mean['sealing']:,.0f} entries/s; with export: "
          f"{mean['sealing and export']:,.0f} entries/s; the export adds {cost:.1%} "
          "to sealing time")
    shares = ", ".join(f"{share:.0%}" for share in EXPORT_SHARES)
    print(f"each export's time / its sealing's time: {shares}; mean "
          f"{sum(EXPORT_SHARES) / len(EXPORT_SHARES):.1%}")


if __name__ == "__main__":
    main()
