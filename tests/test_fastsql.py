from __future__ import annotations

import json
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from archives.db import fastsql
from archives.db import rows as shapes
from archives.db.fastsql import (
    PAGE_BODIES_SQL,
    copy_sql,
    existing_records,
    feed_by_slug,
    live_records,
    oai_records,
    page_bodies,
)
from archives.db.rows import ENTRY_ROW, LIVE_RECORD, OAI_ITEM, OaiItem
from archives.formats import record_atom_id
from archives.log import publishing
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import FeedFactory, record_data


def test_feed_by_slug_reads_the_same_feed_as_the_orm(db):
    feed = FeedFactory(slug="books", title="Bøøks ✓", subtitle="")
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    FeedFactory(slug="films")

    fast, orm = feed_by_slug("books"), Feed.objects.get(slug="books")
    for field in Feed._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(orm, field.attname), field.name
    assert fast.last_updated.tzinfo is not None
    assert fast.uuid == orm.uuid


def test_feed_by_slug_raises_does_not_exist_for_an_unknown_slug(db):
    with pytest.raises(Feed.DoesNotExist):
        feed_by_slug("nope")


@pytest.mark.parametrize("key", ["a", "collection-0001", "x" * 200, "Ünïcödé", "a.b_c~d-1"])
def test_record_atom_id_is_the_uuid5_of_the_feed_uuid_and_key(key):
    feed_uuid = uuid.UUID("0492efcc-6fb0-440b-9298-fbb452fc5427")
    assert record_atom_id(feed_uuid, key) == uuid.uuid5(feed_uuid, key).urn


def test_feed_by_slug_runs_one_indexed_lookup_by_slug(db):
    FeedFactory(slug="books")
    with CaptureQueriesContext(connection) as queries:
        feed_by_slug("books")
        feed_by_slug("books")  # compiled once, executed twice
    assert len(queries) == 2
    sql = queries[0]["sql"]
    assert sql.startswith('SELECT "archives_feed"."id"')
    assert sql.endswith('FROM "archives_feed" WHERE "archives_feed"."slug" = \'books\'')
    assert "ORDER BY" not in sql


def test_existing_records_probes_the_index_once_per_key(db):
    feed = FeedFactory(slug="books")
    for key in ("a", "b"):
        publishing.put_record(feed=feed, key=key, data=record_data(1))
    with CaptureQueriesContext(connection) as queries:
        found = sorted(record.key for record in existing_records(feed, ["a", "b", "zz"]))
    assert found == ["a", "b"]
    sql = queries[0]["sql"]
    if connection.vendor == "postgresql":
        assert "CROSS JOIN LATERAL" in sql
        assert "WHERE feed_id = " in sql
        assert "LIMIT 1" in sql
    else:
        assert '"archives_record"."key" IN (' in sql


def test_copy_names_the_table_and_columns_it_fills(db):
    assert copy_sql(Entry, ("feed_id", "seq")) == \
        'COPY "archives_entry" ("feed_id", "seq") FROM STDIN'
    assert copy_sql(Entry, ("seq",), binary=True) == \
        'COPY "archives_entry" ("seq") FROM STDIN (FORMAT BINARY)'


def test_live_records_reads_by_key_in_batches_what_the_orm_reads(db):
    feed = FeedFactory(slug="books")
    for key in ("b", "a", "d", "c"):
        publishing.put_record(feed=feed, key=key, data=record_data(1))
    publishing.delete_record(feed=feed, key="c")
    cut = Feed.objects.get(pk=feed.pk).last_updated
    publishing.delete_record(feed=feed, key="d")  # after the cut: still read
    publishing.put_record(feed=FeedFactory(slug="films"), key="a", data=record_data(2))
    orm = list(Record.objects.filter(feed=feed).exclude(key="c").order_by("key")
               .values_list(*LIVE_RECORD.orm_names))

    with CaptureQueriesContext(connection) as queries:
        first = live_records(feed, cut, after_key=None, limit=2)
        rest = live_records(feed, cut, after_key=first[-1].key, limit=2)
    assert first + rest == orm
    assert all(row.updated.tzinfo is not None for row in first + rest)
    assert len(queries) == 2
    assert queries[0]["sql"].startswith(
        f'SELECT {LIVE_RECORD.select()} FROM "archives_record" WHERE')  # noqa: S608
    assert "AND key > " not in queries[0]["sql"]
    assert "WHERE feed_id = " in queries[1]["sql"]
    assert "(deleted_at IS NULL OR updated > " in queries[1]["sql"]
    assert "AND key > " in queries[1]["sql"]
    assert queries[1]["sql"].endswith("ORDER BY key LIMIT 2")


def test_page_bodies_reads_the_bodies_the_orm_reads(sealed_feed):
    pages = ArchivePage.objects.filter(feed=sealed_feed)
    ids = list(pages.values_list("pk", flat=True))
    fast = page_bodies(ids)
    for page in pages:
        assert fast[page.pk] == (bytes(page.body), bytes(page.rss), bytes(page.multipart))
    assert page_bodies([]) == {}
    ArchivePage.objects.filter(pk=ids[0]).update(rss=None)
    assert page_bodies(ids[:1])[ids[0]][1] is None


def test_page_bodies_sql_names_the_page_table():
    assert ArchivePage._meta.db_table == "archives_archivepage"
    assert PAGE_BODIES_SQL == ("SELECT id, body, rss, multipart FROM archives_archivepage "
                               "WHERE id = ANY(%s)")


def test_entry_rows_reads_by_seq_what_the_orm_reads(db):
    from archives.documents import atom

    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="a", data=record_data(1, metadata={"x": ["ü", 1]}))
    publishing.put_record(feed=feed, key="b", data=record_data(2, links=[]))
    publishing.put_record(feed=feed, key="a", data=record_data(1, title="Again"))
    publishing.delete_record(feed=feed, key="b")
    Entry.objects.filter(feed=feed, seq=1).update(metadata=None)  # written before 0005
    publishing.put_record(feed=FeedFactory(slug="films"), key="a", data=record_data(3))
    orm = [atom.EntryRow._make(row) for row in Entry.objects.filter(feed=feed, seq__gte=2)
           .order_by("seq").values_list(*ENTRY_ROW.orm_names)]

    with CaptureQueriesContext(connection) as queries:
        rows = atom.entry_rows(feed, 2)
        ranged = atom.entry_rows(feed, 1, 3, newest_first=True)
    assert rows == orm
    assert [row.seq for row in ranged] == [3, 2, 1]
    assert ranged[2].metadata is None
    assert ranged[1].metadata == orm[0].metadata
    assert all(row.updated.tzinfo is not None and row.created.tzinfo is not None
               for row in rows + ranged)
    assert len(queries) == 2
    assert queries[0]["sql"].startswith(f"SELECT {ENTRY_ROW.select()} FROM")
    assert "WHERE e.feed_id = " in queries[0]["sql"]
    assert "AND e.seq <= " not in queries[0]["sql"]
    assert queries[0]["sql"].endswith("ORDER BY e.seq")
    assert "AND e.seq <= " in queries[1]["sql"]
    assert queries[1]["sql"].endswith("ORDER BY e.seq DESC")


@pytest.mark.postgres  # UPDATE ... FROM (VALUES ...) with casts; elsewhere bulk_update
def test_update_rows_sets_many_rows_in_one_statement_from_a_values_list(db):
    from archives.db.fastsql import update_rows

    feed = FeedFactory(slug="books")
    for key in ("a", "b", "c"):
        publishing.put_record(feed=feed, key=key, data=record_data(1))
    ids = dict(Record.objects.filter(feed=feed).values_list("key", "pk"))
    with CaptureQueriesContext(connection) as queries:
        update_rows(Record, ("title", "metadata"), [(ids["a"], "A ' quote", '{"x": [1]}'),
                                                     (ids["c"], "C", "{}")])
    assert len(queries) == 1
    sql = queries[0]["sql"]
    assert sql.startswith('UPDATE "archives_record" AS t SET "title" = v."title", '
                          '"metadata" = v."metadata" FROM (VALUES (')
    assert "::bigint, " in sql
    assert "::varchar, " in sql
    assert "::jsonb)" in sql
    assert sql.endswith(') AS v ("id", "title", "metadata") WHERE t."id" = v."id"')
    assert dict(Record.objects.filter(feed=feed).values_list("key", "title")) == \
        {"a": "A ' quote", "b": "Record 1", "c": "C"}
    assert Record.objects.get(pk=ids["a"]).metadata == {"x": [1]}


def test_a_finished_thread_connection_is_not_kept_alive_by_its_compiled_lookup(db):
    """Under ASGI Django serves each request in a thread of its own: the lookup compiled for
    that thread's connection must go with it, not keep it (and its socket) forever."""
    import contextlib
    import gc
    import threading
    import weakref

    from django.db import connections

    kept = []

    def poll():
        with contextlib.suppress(Feed.DoesNotExist):  # compiled all the same
            feed_by_slug("books")
        kept.append(weakref.ref(connections["default"]))
        connections.close_all()

    thread = threading.Thread(target=poll)
    thread.start()
    thread.join()
    del thread
    gc.collect()
    assert kept[0]() is None


def test_oai_records_reads_what_the_orm_reads_in_datestamp_order(db):
    books, films = FeedFactory(slug="books"), FeedFactory(slug="films")
    for feed in (books, films, books):
        for key in ("b", "a", "c"):
            publishing.put_record(feed=feed, key=key, data=record_data(1, title=f"{key} ✓"))
    publishing.delete_record(feed=films, key="a")
    columns = OAI_ITEM.orm_names
    everything = list(Record.objects.order_by("datestamp", "pk").values_list(*columns))
    start, end = everything[1][1], everything[4][1]
    after = (everything[2][1], everything[2][6])

    def orm(queryset, content=True):
        return [OaiItem._make(row) if content else OaiItem(*row[:7])
                for row in queryset.order_by("datestamp", "pk").values_list(*columns)[:2]]

    with CaptureQueriesContext(connection) as queries:
        assert oai_records(feed_id=None, start=None, end=None, after=None, content=True,
                           limit=2) == everything[:2]
        assert oai_records(feed_id=books.pk, start=start, end=end, after=None, content=False,
                           limit=2) == orm(Record.objects.filter(
                               feed=books, datestamp__gte=start, datestamp__lt=end), content=False)
        assert oai_records(feed_id=None, start=None, end=None, after=after, content=True,
                           limit=2) == everything[3:5]
    fast = oai_records(feed_id=films.pk, start=None, end=None, after=None, content=True,
                       limit=10)
    assert [row[0] for row in fast] == ["b", "c", "a"]  # the deleted one is the last change
    assert fast[-1][3] is not None
    assert fast[0][1].tzinfo is not None
    assert "OFFSET" not in " ".join(query["sql"] for query in queries)
    assert queries[-1]["sql"].endswith("ORDER BY r.datestamp, r.id LIMIT 2")


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [true, false, null], "c": {"d": "\\u00fc\\n\\"x\\""}}', "[]", '"text"',
    "12345678901234567890123", "-1.5e300", '{"dup": 1, "dup": 2}', '["\\ud83d\\ude00"]',
])
def test_jsonb_text_decodes_as_json_loads_does(text):
    assert shapes._jsonb(text) == json.loads(text)


def test_jsonb_text_with_more_after_its_value_is_refused():
    with pytest.raises(ValueError, match="more after its value"):
        shapes._jsonb('{"a": 1} {"b": 2}')


@pytest.mark.postgres  # the single write's INSERTs (elsewhere bulk_create)
def test_insert_rows_inserts_in_one_statement_and_returns_one_new_id(db):
    from django.db import connection

    feed = FeedFactory(slug="books")
    columns = ("feed_id", "key", "title", "summary", "metadata", "links", "created", "updated",
               "datestamp")
    row = (feed.pk, "k1", "Title", "", '{"a": "ü"}', "[]", *[feed.created] * 3)
    with CaptureQueriesContext(connection) as queries:
        [pk] = fastsql.insert_rows(Record, columns, [row], returning_id=True)
        fastsql.insert_rows(Record, columns, [(feed.pk, f"k{n}", *row[2:]) for n in (2, 3)])
    assert len(queries) == 2
    assert Record.objects.get(pk=pk).metadata == {"a": "ü"}
    assert sorted(Record.objects.values_list("key", flat=True)) == ["k1", "k2", "k3"]
    with pytest.raises(ValueError, match="not promised for many rows"):
        fastsql.insert_rows(Record, columns, [row, row], returning_id=True)


def test_the_access_clauses_say_what_the_orms_exists_says(db):
    from django.contrib.auth.models import Group, User
    from django.db.models import Exists, OuterRef, Q

    from archives.models import ApiToken, FeedRole

    feeds = [FeedFactory(slug=f"f{n}") for n in range(4)]
    own, by_group, neither = (User.objects.create_user(name) for name in ("own", "grouped", "no"))
    team = Group.objects.create(name="team")
    by_group.groups.add(team)
    FeedRole.objects.create(feed=feeds[0], user=own, role="producer")
    FeedRole.objects.create(feed=feeds[1], group=team, role="maintainer")
    FeedRole.objects.create(feed=feeds[2], user=by_group, role="producer")
    scoped, _ = ApiToken.issue(user=own, name="scoped", feeds=[feeds[1], feeds[3]])

    expected = {own: {"f0"}, by_group: {"f1", "f2"}, neither: set()}
    for user, slugs in expected.items():
        orm = Exists(FeedRole.objects.filter(Q(user=user) | Q(group__user=user),
                                             feed=OuterRef("pk")))
        rows = Feed.objects.annotate(fast=fastsql.holds_role(user.pk), orm=orm).values_list(
            "slug", "fast", "orm")
        assert {slug for slug, fast, _ in rows if fast} == {
            slug for slug, _, by_orm in rows if by_orm} == slugs
    in_scope = Feed.objects.annotate(fast=fastsql.in_token_scope(scoped.pk)).values_list(
        "slug", "fast")
    assert {slug for slug, fast in in_scope if fast} == {"f1", "f3"}


def test_lock_feed_reads_the_row_as_the_orm_does_with_the_rights_asked(db):
    from django.contrib.auth.models import User
    from django.db import transaction

    from archives.models import ApiToken, FeedRole

    books = FeedFactory(slug="books")
    FeedFactory(slug="films")
    publishing.put_record(feed=books, key="k1", data=record_data(1))
    user = User.objects.create_user("pat")
    FeedRole.objects.create(feed=books, user=user, role="producer")
    token, _ = ApiToken.issue(user=user, name="books only", feeds=[books])
    fields = [field.attname for field in Feed._meta.concrete_fields]

    with transaction.atomic():
        for lookup, value in (("slug", "books"), ("pk", books.pk)):
            plain = fastsql.lock_feed(lookup, value)
            asked = fastsql.lock_feed(lookup, value, user_id=user.pk, token_id=token.pk)
            other = fastsql.lock_feed("slug", "films", user_id=user.pk, token_id=token.pk)

            expected = Feed.objects.get(slug="books")
            assert [getattr(plain, name) for name in fields] == [
                getattr(expected, name) for name in fields]
            assert [getattr(asked, name) for name in fields] == [
                getattr(expected, name) for name in fields]
            assert not hasattr(plain, "actor_role")
            assert not hasattr(plain, "in_token_scope")
            assert (asked.actor_role, asked.in_token_scope) == (True, True)
            assert (other.actor_role, other.in_token_scope) == (False, False)
        with pytest.raises(Feed.DoesNotExist):
            fastsql.lock_feed("slug", "nope", user_id=user.pk)
