"""The search page's query is served by the trigram indexes of migration 0012 on PostgreSQL
(on 1,000,000 records it read every row: docs/performance/search.md), and finds the same
records with or without them (SQLite has none)."""

from __future__ import annotations

import pytest
from django.db import connection

from archives.html.pages import matching_records
from archives.log import publishing

from .factories import FeedFactory


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["r0042424", "GLACIER mass 42424"])
def test_a_search_uses_the_trigram_indexes(db, query):
    feed = FeedFactory(slug="searched")
    with connection.cursor() as cursor:
        # Enough rows for the planner to prefer an index to reading the feed's rows (it
        # chose these by itself on 1,000,000); written in SQL, as only the plan matters.
        cursor.execute(
            "INSERT INTO archives_record (feed_id, key, title, summary, metadata, links, "
            "created, updated) SELECT %s, 'r' || lpad(n::text, 7, '0'), "
            "'Glacier mass ' || n, '', '{}', '[]', now(), now() "
            "FROM generate_series(0, 99999) AS n", [feed.pk])
        cursor.execute("ANALYZE archives_record")
    plan = matching_records(feed, query).explain()
    assert "record_key_trgm" in plan, plan
    assert "record_title_trgm" in plan, plan
    assert [record.key for record in matching_records(feed, query)] == ["r0042424"]


def test_a_search_finds_any_part_of_a_key_or_title_in_any_case(db):
    feed = FeedFactory(slug="searched")
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"r{n:04d}", "record": {"title": f"Glacier mass {n}"}}
        for n in range(300)])
    assert [record.key for record in matching_records(feed, "ACIER MASS 42")] == ["r0042"]
    assert [record.key for record in matching_records(feed, "r029")] == [
        f"r{n:04d}" for n in range(290, 300)]
