"""Helpers for tests that harvest or check our own server through pytest-django's live_server."""

from __future__ import annotations

import random

from archives.formats import rfc3339
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed, Record

from .factories import FeedFactory, record_data


def make_live_feed(live_server, settings) -> tuple[Feed, str]:
    """A feed served by the live server, and its subscription URL."""
    # Before any page is sealed: archive bytes are frozen with the base URL of their day.
    settings.FEEDPUB_BASE_URL = live_server.url
    feed = FeedFactory(slug="live", page_size=3)
    return feed, f"{live_server.url}/feeds/live/"


def random_history(feed: Feed, rng: random.Random, changes: int, keys: list[str]) -> None:
    """Random puts and deletes through the write path, sealing now and then and at the end."""
    live = set(Record.objects.filter(feed=feed, deleted_at__isnull=True)
               .values_list("key", flat=True))
    for step in range(changes):
        key = rng.choice(keys)
        if key in live and rng.random() < 0.3:
            publishing.delete_record(feed=feed, key=key)
            live.discard(key)
        else:
            publishing.put_record(feed=feed, key=key, data=record_data(step, title=f"{key} {step}"))
            live.add(key)
        if rng.random() < 0.1:
            seal_feed(feed)
    seal_feed(feed)


def database_view(feed: Feed) -> dict[str, tuple[str, str]]:
    """atom:id -> (updated, title) of the feed's live records, as the database has them."""
    return {record.atom_id: (rfc3339(record.updated), record.title)
            for record in Record.objects.filter(feed=feed, deleted_at__isnull=True)}
