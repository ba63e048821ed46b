from __future__ import annotations

import uuid

import pytest

from archives import publishing
from archives.models import Feed, record_atom_id

from .factories import FeedFactory, record_data


def test_get_by_slug_reads_the_same_feed_as_the_orm(db):
    feed = FeedFactory(slug="books", title="Bøøks ✓", subtitle="")
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    FeedFactory(slug="films")

    fast, orm = Feed.objects.get_by_slug("books"), Feed.objects.get(slug="books")
    for field in Feed._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(orm, field.attname), field.name
    assert fast.last_updated.tzinfo is not None
    assert fast.uuid == orm.uuid


def test_get_by_slug_raises_does_not_exist_for_an_unknown_slug(db):
    with pytest.raises(Feed.DoesNotExist):
        Feed.objects.get_by_slug("nope")


@pytest.mark.parametrize("key", ["a", "collection-0001", "x" * 200, "Ünïcödé", "a.b_c~d-1"])
def test_record_atom_id_is_the_uuid5_of_the_feed_uuid_and_key(key):
    feed_uuid = uuid.UUID("0492efcc-6fb0-440b-9298-fbb452fc5427")
    assert record_atom_id(feed_uuid, key) == uuid.uuid5(feed_uuid, key).urn
