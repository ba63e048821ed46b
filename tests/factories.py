"""Factories: feeds directly, records through the write path (as every record is made)."""

from __future__ import annotations

import factory
from factory.django import DjangoModelFactory

from archives.log import publishing
from archives.models import ApiToken, Feed, Record


class FeedFactory(DjangoModelFactory):
    class Meta:
        model = Feed

    slug = factory.Sequence(lambda n: f"feed-{n}")
    title = factory.Sequence(lambda n: f"Feed {n}")
    subtitle = "Metadata records for tests"
    author = "Test Producer"
    page_size = 3


def record_data(n: int = 1, **overrides) -> dict:
    """A valid record body, as a producer would send it."""
    data = {
        "title": f"Record {n}",
        "summary": f"Summary of record {n}",
        "metadata": {"n": n, "tags": ["a", "b"]},
        "links": [{"href": f"https://example.org/records/{n}", "rel": "related",
                   "type": "text/html", "title": "Landing page"}],
    }
    data.update(overrides)
    return data


class RecordFactory(factory.Factory):
    """Creates a record with put_record, so that it has its entry like any other."""

    class Meta:
        model = Record

    feed = factory.SubFactory(FeedFactory)
    key = factory.Sequence(lambda n: f"rec-{n}")
    data = factory.Sequence(lambda n: record_data(n))

    @classmethod
    def _create(cls, model_class, *, feed, key, data):
        publishing.put_record(feed=feed, key=key, data=data)
        return Record.objects.get(feed=feed, key=key)


def token_for(user, *, name: str | None = None, **scope) -> str:
    """A new API token of `user` (scope: feeds, read_only, expires), as its secret."""
    name = name or f"token {ApiToken.objects.filter(user=user).count() + 1}"
    return ApiToken.issue(user=user, name=name, **scope)[1]
