from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from archives.html import activity
from archives.log import publishing
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import record_data
from .walking import walk


def test_the_demo_feed_has_a_walkable_history_of_creates_updates_and_deletes(db, client):
    out = StringIO()
    call_command("demo_feed", "--records", "20", "--changes", "40", "--page-size", "10",
                 stdout=out)

    feed = Feed.objects.get(slug="demo")
    kinds = set(Entry.objects.filter(feed=feed).values_list("kind", flat=True))
    assert kinds == {"create", "update", "delete"}
    assert feed.sealed_pages == feed.last_seq // 10 >= 1
    walked = walk(client, "http://127.0.0.1:8000/feeds/demo/")
    assert len(walked.live) == Record.objects.filter(feed=feed, deleted_at=None).count()
    assert f"{len(walked.live)} live records" in out.getvalue()


def test_the_demo_command_leaves_an_existing_feed_alone(db):
    call_command("demo_feed", "--records", "3", "--changes", "0", stdout=StringIO())
    out = StringIO()
    call_command("demo_feed", stdout=out)
    assert "exists already" in out.getvalue()
    assert Entry.objects.count() == 3


@pytest.mark.parametrize("seal_on_write", [True, False])
def test_the_demo_says_how_many_pages_it_sealed(db, settings, seal_on_write):
    settings.FEEDPUB_SEAL_ON_WRITE = seal_on_write
    out = StringIO()

    call_command("demo_feed", "--records", "20", "--changes", "45", "--page-size", "10",
                 stdout=out)

    assert Feed.objects.get(slug="demo").sealed_pages == 6
    assert "sealed 6 archive pages (10 entries each), 5 entries not archived yet" \
        in out.getvalue()


def test_the_demo_spreads_its_history_over_past_days(db):
    started = timezone.now()
    call_command("demo_feed", "--days", "30", stdout=StringIO())

    feed = Feed.objects.get(slug="demo")
    stamps = list(Entry.objects.filter(feed=feed).order_by("seq")
                  .values_list("updated", flat=True))
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
    assert stamps[0] < started - timedelta(days=25)
    assert started - timedelta(days=2) < stamps[-1] <= timezone.now()
    unit, bars = activity.counts(feed)
    assert unit.name == "day"
    assert len([bar for _, bar in bars if bar]) > 20  # a chart of days, not one bar
    pages = ArchivePage.objects.filter(feed=feed).order_by("number")
    assert pages.first().last_updated < pages.last().first_updated - timedelta(days=15)


def test_a_write_after_the_demo_is_stamped_now(db):
    call_command("demo_feed", "--records", "5", "--changes", "5", stdout=StringIO())
    feed = Feed.objects.get(slug="demo")

    entry = publishing.put_record(feed=feed, key="new", data=record_data(1))

    assert entry.updated > timezone.now() - timedelta(minutes=1)


def test_getting_started_quotes_what_the_demo_prints(db):
    out = StringIO()
    call_command("demo_feed", "--no-progress", stdout=out)

    page = (Path(__file__).resolve().parent.parent / "docs" / "getting-started.md").read_text()
    quoted = re.search(r"```text\n(feed 'demo'.*)\n```", page).group(1)
    assert quoted in out.getvalue().splitlines()
