"""Canaries for the places feedpub reaches past a library's public API, each kept in one
module per library (archives/db/django_internals.py, archives/db/psycopg_internals.py):
each test checks what that code relies on, through what a user of it would see, and fails
naming the library's version, so that an upgrade that changes it says so here rather than
as a wrong answer somewhere else."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from unittest import mock

import django
import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from archives.db import django_internals
from archives.log import publishing
from archives.models import Feed, Record

from .factories import FeedFactory, record_data

DJANGO = f"Django {django.get_version()}"


def test_a_compiled_select_runs_again_with_another_value_and_reads_as_the_orm(db):
    books = FeedFactory(slug="books", title="Bøøks ✓")
    FeedFactory(slug="films")

    sql, names, first_row = django_internals.compile_select(
        Feed.objects.filter(slug="films").order_by(), connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, ["books"])
        compiled = Feed.from_db("default", names, first_row(cursor.fetchall()))

    orm = Feed.objects.get(slug="books")
    changed = f"{DJANGO}: the ORM's compiler changed (archives/db/django_internals.py)"
    assert names == [field.attname for field in Feed._meta.concrete_fields], changed
    for field in Feed._meta.concrete_fields:
        assert getattr(compiled, field.attname) == getattr(orm, field.attname), \
            f"{changed}: {field.name} reads differently"
    assert compiled.pk == books.pk, changed
    assert isinstance(compiled.uuid, uuid.UUID), changed  # text on SQLite, converted
    assert compiled.created.tzinfo is not None, changed


def test_records_marked_saved_are_as_bulk_create_leaves_them(db):
    feed = FeedFactory()
    now = datetime.now(UTC)
    [by_bulk_create] = Record.objects.bulk_create([
        Record(feed=feed, key="a", title="A", created=now, updated=now, datestamp=now)])
    publishing.put_record(feed=feed, key="b", data=record_data(2))
    inserted = Record(pk=Record.objects.get(key="b").pk, feed=feed, key="b")
    assert inserted._state.adding  # what a record inserted by COPY is before it is marked

    django_internals.mark_saved([inserted])

    changed = f"{DJANGO}: a model instance's saved state changed (django_internals.mark_saved)"
    assert vars(inserted._state).keys() >= {"adding", "db"}, changed
    assert (inserted._state.adding, inserted._state.db) == \
        (by_bulk_create._state.adding, by_bulk_create._state.db) == (False, "default"), changed
    # Saved, its own row is no clash with its unique (feed, key)...
    inserted.validate_constraints()
    # ...as it is for a record that is not.
    with pytest.raises(ValidationError, match="already exists"):
        Record(feed=feed, key="b").validate_constraints()


def test_an_instance_takes_the_state_of_another_of_the_same_row(db):
    feed = FeedFactory(title="Old")
    Feed.objects.filter(pk=feed.pk).update(title="New")
    unsaved = Feed(slug=feed.slug)

    django_internals.take_state(unsaved, Feed.objects.get(pk=feed.pk))

    changed = f"{DJANGO}: a model instance's state is no longer its __dict__ (take_state)"
    assert (unsaved.pk, unsaved.title) == (feed.pk, "New"), changed
    assert not unsaved._state.adding, changed
    unsaved.validate_constraints()  # its own slug is no clash: it is that row


def test_model_backend_answers_from_the_permissions_cached_on_a_user(db):
    user = User.objects.create_user("producer")
    add_record = Permission.objects.get(codename="add_record")
    user.user_permissions.add(add_record)

    # The cache is where ModelBackend keeps what it reads...
    fresh = User.objects.get(pk=user.pk)
    assert fresh.has_perm("archives.add_record")
    changed = (f"{DJANGO}: ModelBackend no longer keeps a user's permissions in "
               f"{django_internals.PERMISSION_CACHE} (django_internals.cache_permissions)")
    assert getattr(fresh, django_internals.PERMISSION_CACHE, None) == \
        {"archives.add_record"}, changed

    # ...and what is put there is all it reads.
    cached = User.objects.get(pk=user.pk)
    django_internals.cache_permissions(cached, {"archives.add_record", "archives.add_feed"})
    with CaptureQueriesContext(connection) as queries:
        answers = [cached.has_perm("archives.add_feed"), cached.has_perm("archives.add_record"),
                   cached.has_perm("archives.delete_feed")]
        everything = ModelBackend().get_all_permissions(cached)
    assert answers == [True, True, False], changed
    assert everything == {"archives.add_record", "archives.add_feed"}, changed
    assert len(queries) == 0, changed


def test_a_connection_that_had_an_error_is_asked_whether_it_still_works(db):
    from django.db import DatabaseError, transaction

    changed = f"{DJANGO}: a connection's error flag or is_usable() changed (connection_lost)"
    connection.ensure_connection()
    assert not connection.errors_occurred, changed
    with mock.patch.object(connection, "is_usable", return_value=False) as is_usable:
        assert not django_internals.connection_lost(connection, check=False), changed
        assert is_usable.call_count == 0  # no error: not even a round trip
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT * FROM no_such_table")
        except DatabaseError:
            pass
        try:
            assert connection.errors_occurred, changed  # Django flags the error...
            # ...and the connection is asked, and found lost when it fails.
            assert django_internals.connection_lost(connection, check=False), changed
            assert is_usable.call_count == 1, changed
        finally:
            connection.errors_occurred = False
    assert not django_internals.connection_lost(connection, check=True), changed


# psycopg, beneath Django's PostgreSQL backend --------------------------------------------

def versions() -> str:
    import psycopg

    return f"psycopg {psycopg.__version__} under {DJANGO}"


def timestamptz_loader(cursor):
    from psycopg import postgres
    from psycopg.pq import Format

    return cursor.cursor.adapters.get_loader(postgres.types["timestamptz"].oid, Format.TEXT)


@pytest.mark.postgres
def test_psycopg_reads_timestamps_on_one_cursor_and_django_on_the_next(db):
    from psycopg.types.datetime import TimestamptzLoader

    from archives.db import psycopg_internals

    moment = datetime(2026, 3, 29, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    changed = f"{versions()}: the timestamptz loader (archives/db/psycopg_internals.py)"
    with connection.cursor() as cursor:
        psycopg_internals.load_timestamps_in_c(cursor)
        loader = timestamptz_loader(cursor)
        # psycopg's own (its C twin from psycopg[binary] when installed), not Django's
        assert loader.__name__ == TimestamptzLoader.__name__, changed
        assert loader.__module__.split(".")[0] in ("psycopg", "psycopg_binary"), changed
        cursor.execute("SELECT %s::timestamptz", [moment])
        [(read,)] = cursor.fetchall()
    assert read == moment, changed
    assert read.astimezone(UTC) == datetime(2026, 3, 28, 22, 30, tzinfo=UTC), changed
    # Registered on that cursor only: Django's own loader is back on the next one.
    with connection.cursor() as cursor:
        assert timestamptz_loader(cursor).__module__.startswith("django."), \
            f"{changed}: it stayed registered on the connection"
        cursor.execute("SELECT %s::timestamptz", [moment])
        [(read,)] = cursor.fetchall()
    assert read == moment, changed


@pytest.mark.postgres
def test_a_binary_cursor_on_djangos_connection_reads_bytea_as_bytes(db):
    from archives.db import psycopg_internals

    body = bytes(range(256)) * 4
    with psycopg_internals.binary_cursor(connection) as cursor:
        [(read,)] = cursor.execute("SELECT %s::bytea", [body], binary=True).fetchall()
    assert bytes(read) == body, \
        f"{versions()}: a binary cursor on Django's connection (psycopg_internals)"
    # The connection is still Django's, and still works for Django.
    assert Feed.objects.count() == 0
