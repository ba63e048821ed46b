"""Record search (archives/db/search.py): any part of a key, title or summary, whatever its
case and accents, alike on SQLite and PostgreSQL, for the search page and the admin; on
PostgreSQL it is served by migration 0017's trigram index on the folded text (on 1,000,000
records a search without one read every row: docs/performance/search.md)."""

from __future__ import annotations

import pytest
from django.db import connection

from archives.html.pages import matching_records
from archives.log import publishing

from .factories import FeedFactory, record_data


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["r0042424", "GLACIER mass 42424", "glaciér MASS 42424",
                                   "42424 in Ōtautahi"])
def test_a_search_uses_the_trigram_index(db, query):
    feed = FeedFactory(slug="searched")
    with connection.cursor() as cursor:
        # Enough rows for the planner to prefer an index to reading the feed's rows (it
        # chose these by itself on 1,000,000); written in SQL, as only the plan matters.
        cursor.execute(
            "INSERT INTO archives_record (feed_id, key, title, summary, metadata, links, "
            "created, updated, datestamp) SELECT %s, 'r' || lpad(n::text, 7, '0'), "
            "'Glacier mass ' || n, 'Measured ' || n || ' in Otautahi', '{}', '[]', "
            "now(), now(), now() "
            "FROM generate_series(0, 99999) AS n", [feed.pk])
        cursor.execute("ANALYZE archives_record")
    plan = matching_records(feed, query).explain()
    assert "record_search_trgm" in plan, plan
    assert [record.key for record in matching_records(feed, query)] == ["r0042424"]


def test_a_search_finds_any_part_of_a_key_or_title_in_any_case(db):
    feed = FeedFactory(slug="searched")
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"r{n:04d}", "record": {"title": f"Glacier mass {n}"}}
        for n in range(300)])
    assert [record.key for record in matching_records(feed, "ACIER MASS 42")] == ["r0042"]
    assert [record.key for record in matching_records(feed, "r029")] == [
        f"r{n:04d}" for n in range(290, 300)]


def test_a_search_finds_what_a_person_types_without_its_accents(db):
    feed = FeedFactory(slug="searched")
    publishing.put_record(feed=feed, key="chc", data=record_data(title="Ōtautahi"))
    publishing.put_record(feed=feed, key="crd", data=record_data(
        title="Cardiff", summary="Caerdydd, Cymru: Llandaf and Pontcanna"))
    publishing.put_record(feed=feed, key="zur", data=record_data(title="ZÜRICH, Straße"))
    assert [r.key for r in matching_records(feed, "otautahi")] == ["chc"]
    assert [r.key for r in matching_records(feed, "ōtautahi")] == ["chc"]
    assert [r.key for r in matching_records(feed, "PONTCANNA")] == ["crd"]  # a summary
    assert [r.key for r in matching_records(feed, "zurich, strasse")] == ["zur"]
    assert [r.key for r in matching_records(feed, "ZÜRICH")] == ["zur"]
    assert list(matching_records(feed, "cardiffcaerdydd")) == []  # nor across fields


def test_the_admins_record_search_is_the_same_search(admin_client, db):
    feed = FeedFactory(slug="searched")
    publishing.put_record(feed=feed, key="chc", data=record_data(
        title="Ōtautahi", summary="Christchurch, Waitaha"))
    publishing.put_record(feed=feed, key="akl", data=record_data(
        title="Tāmaki Makaurau", summary="Auckland"))

    def found(query):
        response = admin_client.get("/admin/archives/record/", {"q": query})
        assert response.status_code == 200
        return sorted(record.key for record in response.context["cl"].result_list)

    assert found("otautahi") == ["chc"]
    assert found("tamaki AUCKLAND") == ["akl"]  # every word, each anywhere
    assert found('"makaurau auckland"') == []  # a phrase spans no two fields
    assert found("waitaha") == ["chc"]


def test_a_query_the_index_cannot_serve_is_not_folded_row_by_row(db):
    """One or two characters (no trigram): folding every row of a large feed would cost
    about five times comparing keys and titles, so these look in keys and titles, any
    case."""
    feed = FeedFactory(slug="searched")
    publishing.put_record(feed=feed, key="k2", data=record_data(title="Ōtautahi"))
    publishing.put_record(feed=feed, key="x1", data=record_data(title="K2 base camp"))
    assert [r.key for r in matching_records(feed, "K2")] == ["k2", "x1"]
    assert "feedpub_search" not in str(matching_records(feed, "K2").query)
    assert "feedpub_search_text" in str(matching_records(feed, "K2 ").query)
