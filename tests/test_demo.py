from __future__ import annotations

from io import StringIO

from django.core.management import call_command

from archives.models import Entry, Feed, Record

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
