"""Many feeds, not only big ones: a host with 100,000 feeds.

    .venv/bin/python bench/many_feeds.py [--feeds 100000]

Measures, on PostgreSQL (database BENCH_MANY_DB, default `bench_many`, created and filled
once; later runs reuse it):
- a sealer pass with nothing to seal: its queries, its plan, its time; and, as the
  baseline, what the pass cost before (visiting every feed);
- the HTML index and the API's feed list: the first and a deep page, with their queries;
- many feeds' subscription documents rendered in one process: the per-process caches'
  sizes against their bounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = os.environ.get("BENCH_MANY_DB", "bench_many")


def fill(count: int) -> None:
    """`count` feeds, each with one entry (nothing to seal), by COPY."""
    import uuid
    from datetime import UTC, datetime

    from django.db.models import Max

    from archives.db import fastsql
    from archives.models import Feed

    have = Feed.objects.count()
    if have >= count:
        return
    now = datetime.now(tz=UTC)
    start = (Feed.objects.aggregate(Max("id"))["id__max"] or 0) + 1
    columns = ("slug", "uuid", "title", "subtitle", "author", "language", "page_size",
               "created", "last_seq", "last_updated", "sealed_pages", "description_modified",
               "subscription_modified")
    fastsql.copy_rows(Feed, columns, (
        (f"feed-{n:06d}", uuid.uuid4(), f"Feed {n}", "", "feedpub", "en", 100, now, 0, None,
         0, now, now) for n in range(start, start + count - have)))
    from django.db import connection
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE archives_feed")


def timed(function, repeat: int) -> tuple[float, object]:
    """Median seconds of `repeat` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--feeds", type=int, default=100_000)
    parser.add_argument("--polls", type=int, default=20_000,
                        help="how many feeds' subscription documents to render (caches)")
    options = parser.parse_args()
    os.environ.update(DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
                      DJANGO_SETTINGS_MODULE="feedpub.settings", LOG_LEVEL="WARNING",
                      ALLOWED_HOSTS="testserver", FEEDPUB_API_ANON_RATE="1000000/second")
    sys.path.insert(0, str(ROOT))
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DATABASE],
                   stderr=subprocess.DEVNULL, check=False)  # exists already: fine
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
    from django.db import connection
    from django.db.models import Q
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from archives.documents import base
    from archives.documents import feeds as feed_documents
    from archives.log import sealing
    from archives.models import NEEDS_SEALING, Feed

    fill(options.feeds)
    feeds = Feed.objects.count()
    print(f"{feeds:,} feeds")

    sealing.seal_all()  # the first pass of a process looks for pages to backfill
    with CaptureQueriesContext(connection) as queries:
        sealing.seal_all()
    seconds, _ = timed(sealing.seal_all, 20)
    plan = Feed.objects.filter(Q(NEEDS_SEALING)).order_by("pk").explain(analyze=True)
    print(f"sealer pass, nothing to seal: {len(queries)} query, {seconds * 1000:.2f} ms")
    print("  " + plan.replace("\n", "\n  "))

    def old_pass():  # before: every feed visited, one refresh query each
        for feed in Feed.objects.all():
            sealing.seal_feed(feed)

    old_seconds, _ = timed(old_pass, 1)
    print(f"baseline (every feed visited): {old_seconds * 1000:,.0f} ms, "
          f"{old_seconds / seconds:,.0f} x the pass")

    client = Client()

    def get(url: str):
        """The response, and the queries it ran (counted by a wrapper: a request resets
        the connection's query log when it starts)."""
        queries = []
        with connection.execute_wrapper(
                lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response, len(queries)

    deep = client.get("/api/feeds/").json()
    for _ in range(50):  # 50 pages on by the cursor
        deep = client.get(deep["next"]).json()
    for what, url in (("/", "/"), ("/ last page", f"/?page={-(-feeds // 50)}"),
                      ("/api/feeds/", "/api/feeds/"), ("/api/feeds/ 51 pages on", deep["next"])):
        response, queries = get(url)
        seconds, _ = timed(lambda url=url: get(url), 5)
        print(f"GET {what}: {queries} queries, {seconds * 1000:.1f} ms, "
              f"{len(response.content):,} bytes")

    began = time.perf_counter()
    slugs = Feed.objects.order_by("?").values_list("slug", flat=True)[:options.polls]
    for slug in slugs:
        feed_documents.SubscriptionDocument.for_slug(slug).body()
    elapsed = time.perf_counter() - began
    print(f"rendered {len(slugs):,} feeds' subscription documents in {elapsed:.1f} s")
    caches = {"final_pages": base.final_pages,
              "subscription_bodies": base.subscription_bodies,
              "gzipped_bodies": base.gzipped_bodies,
              "sealed_pages_by_date": feed_documents.sealed_pages_by_date}
    for name, cache in caches.items():
        print(f"  {name}: {cache._bytes:,} of at most {cache.max_bytes:,} bytes, "
              f"{len(cache._values):,} entries")
        assert cache._bytes <= cache.max_bytes


if __name__ == "__main__":
    main()
