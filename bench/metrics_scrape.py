"""What a scrape of /metrics costs with many feeds (feedpub/metrics.py), in one run.

    .venv/bin/python bench/metrics_scrape.py [--feeds 10000] [--scrapes 20]

Makes `--feeds` feeds, one in ten with a full page not sealed (its filling entry written),
and a subscription for one in five; then scrapes `GET /metrics` from loopback through
Django's WSGI handler in this process, as Prometheus would, `--scrapes` times. Prints the
queries a scrape makes, the median and slowest scrape, the answer's size and the load
average. PostgreSQL at 127.0.0.1:5432 (user postgres, trust): it (re)creates the database
`bench_metrics`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from datetime import timedelta

DB_NAME = "bench_metrics"


def load() -> str:
    return " ".join(f"{n:.1f}" for n in os.getloadavg())


def populate(feeds: int) -> None:
    from django.utils import timezone

    from archives.models import Entry, Feed, Record, Subscription

    now = timezone.now()
    Feed.objects.bulk_create([Feed(slug=f"feed-{n}", title=f"Feed {n}", page_size=10,
                                   last_seq=10 if n % 10 == 0 else 5) for n in range(feeds)],
                             batch_size=5000)
    full = list(Feed.objects.filter(last_seq=10))
    Record.objects.bulk_create([Record(feed=feed, key="k", title="t", created=now,
                                       updated=now, datestamp=now) for feed in full],
                               batch_size=5000)
    records = {record.feed_id: record for record in Record.objects.all()}
    Entry.objects.bulk_create([Entry(feed=feed, seq=10, record=records[feed.pk],
                                     kind="create", updated=now - timedelta(seconds=30),
                                     title="t") for feed in full], batch_size=5000)
    Subscription.objects.bulk_create([
        Subscription(feed=feed, format="atom", topic=f"https://feeds.example/{feed.slug}/",
                     callback="https://subscriber.example/cb",
                     expires_at=now + timedelta(days=1))
        for feed in Feed.objects.order_by("pk")[:: 5]], batch_size=5000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    options = parser.parse_args()
    subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB_NAME],
                   check=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB_NAME], check=True)
    os.environ.update({"DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
                       "DJANGO_SETTINGS_MODULE": "feedpub.settings", "FEEDPUB_DOTENV": "",
                       "ALLOWED_HOSTS": "testserver", "LOG_LEVEL": "WARNING",
                       "DEBUG": "false", "SECRET_KEY": "bench-only"})
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", verbosity=0)
    populate(options.feeds)
    client = Client()
    client.get("/metrics")
    queries = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        size = len(client.get("/metrics").content)
    times = []
    for _ in range(options.scrapes):
        began = time.perf_counter()
        assert client.get("/metrics").status_code == 200  # noqa: S101
        times.append(time.perf_counter() - began)
    print(f"{options.feeds:,} feeds: {len(queries)} queries a scrape, {size:,} bytes; "
          f"median {statistics.median(times) * 1000:.0f} ms, slowest "
          f"{max(times) * 1000:.0f} ms over {options.scrapes} scrapes "
          f"(load average {load()})")


if __name__ == "__main__":
    main()
