"""Speed shortcuts past the ORM, each measured and each pinned by a test to its SQL
(tests/test_fastsql.py). Everything else goes through the ORM.

- `feed_by_slug`, `feed_by_pk`: the poll's one query (when archives/db/heads.py cannot
  answer it from memory), compiled once per connection.
- `lock_feed`: the write path's read of the feed it locks, with what the writer's rights
  depend on (`holds_role`, `in_token_scope`), compiled once per connection.
- `existing_records`: one index probe per key, whatever the planner's statistics.
- `copy_rows`, `insert`: COPY for rows nothing points back to (entries, sealed pages,
  snapshot pages).
- `reserve_ids`: ids for rows that others point to (new records), so those go by COPY too.
- `insert_rows`: the few rows of a single write in one INSERT (COPY costs more round trips).
- `update_rows`: many rows' new values in one UPDATE ... FROM (VALUES ...) (changed
  records).
- `live_records`: the complete feed's records, a batch a query, without the ORM's
  per-row costs.
- `page_bodies`: sealed pages' bodies for their export, in binary: 7 x faster than the
  hex text in which bytea otherwise comes back (archives/storage/export.py).
- `entry_rows`: a range of a feed's entries, for every document that shows them (sealing
  reads each entry once), without the ORM's per-row costs.
- `oai_records`: a page of records in (datestamp, id) order, for OAI-PMH's lists
  (archives/oai/repository.py), without the ORM's per-row and compiling costs.
- `holds_role`, `in_token_scope`: who may write, read with the feed a write locks, as
  EXISTS clauses written once: the ORM's Exists() of the same cost a single PUT ~0.5 ms of
  compiling (bench/access.py).
- `history_rows`: a record's entries, newest first, for its history (archives/api/
  history.py), their times formatted by the database: parsing ten thousand timestamps and
  formatting them again cost as much as the rest of the request.

The rows of `live_records`, `entry_rows` and `oai_records` each have one shape, declared in
archives/db/rows.py: their SELECT lists and the conversion of their rows (per database)
come from it.

What these reach of Django's and psycopg's insides (the ORM's compiler, the psycopg cursor
beneath Django's) is in archives/db/django_internals.py and psycopg_internals.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import RawSQL

from archives.db import django_internals, psycopg_internals
from archives.db.rows import (
    ENTRY_ROW,
    LIVE_RECORD,
    OAI_ITEM,
    EntryRow,
    HistoryRow,
    LiveRecord,
    OaiItem,
    Row,
    Shape,
)
from archives.models import ApiToken, ArchivePage, Entry, Feed, FeedRole, Record

# Compiled lookups (archives/db/django_internals.py) live on the connection (one per thread
# and alias) that runs them, so each compiler and its converters belong to it, and go when
# it does. (Not in a WeakKeyDictionary of connections: its values, holding the compiler
# that holds the connection, kept every connection alive, and under ASGI, where Django
# serves each request in a thread of its own, one more for every request.)
COMPILED = "_feedpub_compiled_lookups"


def feed_by_slug(slug: str, *, using: str = "default") -> Feed:
    """One feed by its slug, for the read path every poll takes.

    The query is compiled once per database connection and then only executed:
    compiling it each time cost more than the indexed lookup itself (~0.25 ms of
    ~0.5 ms). The compiler also supplies the backend's value converters (SQLite
    stores UUIDs and datetimes as text). Raises Feed.DoesNotExist.
    """
    return _feed_by("slug", slug, connections[using])


def feed_by_pk(pk: int, *, db: BaseDatabaseWrapper) -> Feed:
    """One feed by its primary key, on the connection `db` (archives/db/heads.py's listener
    has one of its own): the same row, converted as feed_by_slug converts it, so that
    documents built from either give the same ETag. Raises Feed.DoesNotExist."""
    return _feed_by("pk", pk, db)


def _feed_by(lookup: str, value, db: BaseDatabaseWrapper) -> Feed:
    lookups = db.__dict__.setdefault(COMPILED, {})
    compiled = lookups.get(lookup)
    if compiled is None:
        # One row: no ORDER BY.
        compiled = lookups[lookup] = django_internals.compile_select(
            Feed.objects.using(db.alias).filter(**{lookup: value}).order_by(), db)
    sql, names, first_row = compiled
    with db.cursor() as cursor:
        cursor.execute(sql, [value])
        rows = cursor.fetchall()
    if not rows:
        raise Feed.DoesNotExist(f"No feed {value!r}")
    return Feed.from_db(db.alias, names, first_row(rows))


def lock_feed(lookup: str, value: Any, *, user_id: Any = None,
              token_id: int | None = None) -> Feed:
    """The feed whose `lookup` ("slug" or "pk") is `value`, its row locked (SELECT ... FOR
    UPDATE: the write path's, inside its transaction), read with `actor_role` (whether the
    user `user_id` holds a role on it) and `in_token_scope` (whether the token `token_id`'s
    scope names it) when they are given. Compiled once per connection and variant: the
    ORM's compiling cost a single PUT more than the lookup (~0.15 ms of the query, ~0.05 ms
    an annotation). Raises Feed.DoesNotExist."""
    db = connections["default"]
    variants = db.__dict__.setdefault(COMPILED, {})
    asked = {name: value_ for name, value_ in (("actor_role", user_id),
                                               ("in_token_scope", token_id))
             if value_ is not None}
    key = ("lock", lookup, *asked)
    compiled = variants.get(key)
    if compiled is None:
        annotations = {"actor_role": holds_role(0), "in_token_scope": in_token_scope(0)}
        rows = Feed.objects.select_for_update().filter(**{lookup: value}).order_by().annotate(
            **{name: annotations[name] for name in asked})
        compiled = variants[key] = django_internals.compile_select(rows, db)
    sql, names, first_row = compiled
    # The annotations' parameters come first (in the SELECT list), then the lookup's.
    params = [*(user_id, user_id)[:2 if "actor_role" in asked else 0],
              *([token_id] if "in_token_scope" in asked else []), value]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    if not found:
        raise Feed.DoesNotExist(f"No feed {value!r}")
    values = first_row(found)
    columns = len(names) - len(asked)
    feed = Feed.from_db(db.alias, names[:columns], values[:columns])
    for name, flag in zip(names[columns:], values[columns:], strict=True):
        setattr(feed, name, bool(flag))
    return feed


def existing_records(feed: Feed, keys: list[str]):
    """The feed's records with these keys, one probe of the (feed, key) index per key.

    On PostgreSQL `key IN (...1000 keys)` let the planner scan all of a feed's records
    whenever its statistics were behind (a feed that grew since the last ANALYZE, or a
    server without autovacuum): a batch then cost time in proportion to the feed's size
    (ingest fell from ~5,300 to ~3,700 records/s by 300,000 records). A LATERAL lookup
    with LIMIT 1 cannot be planned as anything but one index probe per key.
    """
    if connection.vendor != "postgresql":
        return Record.objects.filter(feed=feed, key__in=keys)
    table = Record._meta.db_table
    return Record.objects.raw(
        f"SELECT r.* FROM unnest(%s::text[]) AS wanted(key) CROSS JOIN LATERAL "  # noqa: S608
        f"(SELECT * FROM {table} WHERE feed_id = %s AND key = wanted.key LIMIT 1) AS r",
        [keys, feed.pk],
    )


def insert(model: type[models.Model], objects: Sequence[models.Model],
           columns: Sequence[str]) -> None:
    """Insert `objects` whose ids nobody needs back: on PostgreSQL by a binary COPY of
    `columns` (large bytea values go as they are, not escaped into text), with the types
    the model's fields say; elsewhere by bulk_create."""
    if not can_copy():
        model._default_manager.bulk_create(objects)
        return
    types = [_type_name(_field(model, column)) for column in columns]
    copy_rows(model, columns, ([getattr(row, column) for column in columns] for row in objects),
              binary_types=types)


def reserve_ids(model: type[models.Model], count: int) -> list[int]:
    """`count` new ids from the sequence of model's primary key, in one query (PostgreSQL).

    For rows that other rows point to, inserted by COPY (which returns no ids): a batch's
    new records, whose entries need their ids. Django 5.2's bulk_create, which returns
    them, inserts through UNNEST of arrays that psycopg quotes in pure Python: for a batch
    of 1,000 records it cost more than all the rest of the batch.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) "
                       "FROM generate_series(1, %s)",
                       [model._meta.db_table, _column(_primary_key(model)), count])
        return [pk for pk, in cursor.fetchall()]


def update_rows(model: type[models.Model], columns: Sequence[str],
                rows: Sequence[Sequence]) -> None:
    """Set `columns` of many rows in one statement (PostgreSQL): each row is its primary key
    then its values in the order of `columns`, each cast to its column's type.

    Django's bulk_update builds a CASE of one WHEN per row for every column, and compiling
    those cost ~2 ms a row: a batch of 1,000 changed records took 1.5 s of Python, ten
    times a batch of new ones. A VALUES list is plain parameters.
    """
    if not rows:
        return
    quote = connection.ops.quote_name
    fields = [_primary_key(model), *(_field(model, column) for column in columns)]
    row = "(" + ", ".join(f"%s::{_type_name(field)}" for field in fields) + ")"
    names = [quote(_column(field)) for field in fields]
    sql = (f"UPDATE {quote(model._meta.db_table)} AS t SET "  # noqa: S608
           + ", ".join(f"{name} = v.{name}" for name in names[1:])
           + f" FROM (VALUES {', '.join([row] * len(rows))}) AS v ({', '.join(names)})"
           + f" WHERE t.{names[0]} = v.{names[0]}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for values in rows for value in values])


def insert_rows(model: type[models.Model], columns: Sequence[str], rows: Sequence[Sequence],
                *, returning_id: bool = False) -> list[int]:
    """INSERT `rows` (values in the order of `columns`) in one statement; with
    `returning_id`, the one row's new id. For the few rows of a single write: COPY costs
    two round trips a table (the COPY, then its data) and the ids of new rows one more
    (`reserve_ids`), which made them most of a single PUT's time in the database."""
    if returning_id and len(rows) != 1:
        raise ValueError("RETURNING ids in row order is not promised for many rows")
    quote = connection.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    sql = (f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608
           f"({', '.join(map(quote, columns))}) VALUES {', '.join([row] * len(rows))}")
    if returning_id:
        sql += f" RETURNING {quote(_column(_primary_key(model)))}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for values in rows for value in values])
        return [pk for pk, in cursor.fetchall()] if returning_id else []


def _field(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{model.__name__}.{name} is a relation, not a column")
    return field


def _primary_key(model: type[models.Model]) -> models.Field:
    if model._meta.pk is None:
        raise TypeError(f"{model.__name__} has no primary key")
    return model._meta.pk


def _column(field: models.Field) -> str:
    if field.column is None:
        raise TypeError(f"{field} has no column")
    return field.column


def _type_name(field: models.Field) -> str:
    """The column's type without its length (varchar(80) -> varchar): what COPY and a cast
    need to know."""
    db_type = field.db_type(connection)
    if db_type is None:
        raise TypeError(f"{field} has no column")
    return db_type.split("(")[0]


def can_copy() -> bool:
    return connection.vendor == "postgresql"


def copy_sql(model: type[models.Model], columns: Sequence[str], *, binary: bool = False) -> str:
    names = ", ".join(connection.ops.quote_name(column) for column in columns)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    return sql + " (FORMAT BINARY)" if binary else sql


def copy_rows(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence],
              *, binary_types: Sequence[str] | None = None) -> None:
    """COPY `rows` (values in the order of `columns`, column names) into model's table.

    Django 5.2's bulk_create inserts through UNNEST of arrays that psycopg quotes in pure
    Python (and it sends bytes as hex literals): for the entries of a batch and the bodies
    of sealed pages, COPY, whose rows psycopg formats in C, took a third of the time.
    Callers use it only where no ids are needed back, and bulk_create on other databases.
    With `binary_types` (PostgreSQL type names, one per column) the rows go in COPY's
    binary format: large bytea values as they are, instead of escaped into text.
    """
    sql = copy_sql(model, columns, binary=binary_types is not None)
    # As Django does for execute(): psycopg's errors become django.db's (IntegrityError...).
    with connection.wrap_database_errors, connection.cursor() as cursor, \
            cursor.copy(sql) as copy:
        if binary_types is not None:
            copy.set_types(binary_types)
        for row in rows:
            copy.write_row(row)


def live_records_sql(*, after_key: bool) -> str:
    table = connection.ops.quote_name(Record._meta.db_table)
    keyset = "AND key > %s " if after_key else ""
    return (f"SELECT {LIVE_RECORD.select()} FROM {table} "  # noqa: S608
            f"WHERE feed_id = %s AND (deleted_at IS NULL OR updated > %s) {keyset}"
            f"ORDER BY key LIMIT %s")


def live_records(feed: Feed, cut_updated: datetime, *, after_key: str | None,
                 limit: int) -> list[LiveRecord]:
    """Up to `limit` of the feed's records after `after_key`, by key (the (feed, key)
    index): those live now and those deleted after `cut_updated` (maybe live at it), as
    LiveRecords (archives/db/rows.py: `links` decoded, `updated` aware).

    For the complete feed, which reads every live record: through the ORM, its converters
    and the queryset machinery cost ~19 us a row, more than reading it; this is one query
    a batch, the JSON decoded as JSONField would. On PostgreSQL the timestamps are read by
    psycopg's own loader (in C: aware, in the session's time zone), not Django's, which
    wraps it in Python to force the zone and cost ~5 us a row, two thirds of the read; on
    SQLite they come naive (UTC) and are made aware.
    """
    params: list[Any] = [feed.pk, connection.ops.adapt_datetimefield_value(cut_updated)]
    if after_key is not None:
        params.append(after_key)
    params.append(limit)
    return _read(LIVE_RECORD, live_records_sql(after_key=after_key is not None), params)


def entry_rows_sql(*, last: bool, newest_first: bool) -> str:
    entries = connection.ops.quote_name(Entry._meta.db_table)
    records = connection.ops.quote_name(Record._meta.db_table)
    upto = "AND e.seq <= %s " if last else ""
    return (f"SELECT {ENTRY_ROW.select()} "  # noqa: S608
            f"FROM {entries} e JOIN {records} r ON r.id = e.record_id "
            f"WHERE e.feed_id = %s AND e.seq >= %s {upto}"
            f"ORDER BY e.seq{' DESC' if newest_first else ''}")


def entry_rows(feed: Feed, first_seq: int, last_seq: int | None, *,
               newest_first: bool) -> list[EntryRow]:
    """The feed's entries first_seq..last_seq (the (feed, seq) index), as EntryRows
    (archives/db/rows.py): JSON decoded and timestamps aware.

    What the ORM's values_list read, at a third of the cost a row: sealing reads every
    entry once, and through the ORM reading a page cost as much as rendering all three of
    its formats. On PostgreSQL the timestamps come from psycopg's own loader, as in
    `live_records`.
    """
    params = [feed.pk, first_seq] + ([] if last_seq is None else [last_seq])
    return _read(ENTRY_ROW, entry_rows_sql(last=last_seq is not None,
                                           newest_first=newest_first), params)


def oai_records_sql(*, feed: bool, start: bool, end: bool, after: bool,
                    content: bool) -> str:
    records = connection.ops.quote_name(Record._meta.db_table)
    feeds = connection.ops.quote_name(Feed._meta.db_table)
    where = [condition for condition, wanted in (
        ("r.feed_id = %s", feed),
        ("r.datestamp >= %s", start),
        ("r.datestamp < %s", end),
        # The row comparison (datestamp, id) > (%s, %s), spelt so that every database uses
        # the (datestamp, id) or (feed, datestamp, id) index for it.
        ("r.datestamp >= %s AND (r.datestamp > %s OR r.id > %s)", after),
    ) if wanted]
    return (f"SELECT {OAI_ITEM.select(head=not content)}"  # noqa: S608
            + f" FROM {records} r JOIN {feeds} f ON f.id = r.feed_id"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + " ORDER BY r.datestamp, r.id LIMIT %s")


def oai_records(*, feed_id: int | None, start: datetime | None, end: datetime | None,
                after: tuple[datetime, int] | None, content: bool,
                limit: int) -> list[OaiItem]:
    """Up to `limit` records (of one feed, or all) with start <= datestamp < end, after the
    position `after` = (datestamp, id), in (datestamp, id) order, as OaiItems
    (archives/db/rows.py): their headers and, with `content`, their content; JSON decoded,
    timestamps aware, the uuid a UUID."""
    moment = connection.ops.adapt_datetimefield_value  # as the ORM sends a timestamp
    params = [value for value, wanted in ((feed_id, feed_id is not None),
                                          (moment(start), start is not None),
                                          (moment(end), end is not None)) if wanted]
    if after is not None:
        params += [moment(after[0]), moment(after[0]), after[1]]
    sql = oai_records_sql(feed=feed_id is not None, start=start is not None,
                          end=end is not None, after=after is not None, content=content)
    return _read(OAI_ITEM, sql, [*params, limit], head=not content)


def rfc3339_sql(column: str) -> str:
    """`column`, a timestamp, as formats.rfc3339 writes it (UTC, microseconds, "Z"), in the
    database's SQL. SQLite keeps timestamps as naive UTC text, without the fraction when it
    is zero."""
    if connection.vendor == "postgresql":
        return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
    return f"replace(substr({column} || '.000000', 1, 26), ' ', 'T') || 'Z'"


def history_rows_sql() -> str:
    entries = connection.ops.quote_name(Entry._meta.db_table)
    columns = [rfc3339_sql(name) if name == "updated" else name for name in HistoryRow._fields]
    return (f"SELECT {', '.join(columns)} FROM {entries} "  # noqa: S608
            "WHERE record_id = %s ORDER BY seq DESC")


def history_rows(record_id: int) -> list[HistoryRow]:
    """The record's entries, newest first (the (record, seq) index), as HistoryRows."""
    with connection.cursor() as cursor:
        cursor.execute(history_rows_sql(), [record_id])
        return list(map(HistoryRow._make, cursor.fetchall()))


def _read(shape: Shape[Row], sql: str, params: list, *, head: bool = False) -> list[Row]:
    """The rows of `sql` (a SELECT of `shape`'s columns) as its NamedTuples."""
    postgresql = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgresql:
            psycopg_internals.load_timestamps_in_c(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return shape.converted(rows, postgresql=postgresql, head=head)


PAGE_BODY_COLUMNS = ("id", "body", "rss", "multipart")
PAGE_BODIES_SQL = ("SELECT id, body, rss, multipart FROM archives_archivepage "
                   "WHERE id = ANY(%s)")


def page_bodies(ids: list[int]) -> dict[int, tuple[bytes, bytes | None, bytes | None]]:
    """(body, rss, multipart) of the pages with these ids. On PostgreSQL in binary:
    Django's cursors are client-side binding ones, which get bytea as hex text (~150 KB of
    a page's three bodies as ~300 KB of hex, decoded in Python)."""
    if not ids:
        return {}
    rows: Iterable[tuple[Any, ...]]
    if connection.vendor != "postgresql":
        rows = ArchivePage.objects.filter(pk__in=ids).values_list(*PAGE_BODY_COLUMNS)
    else:
        with psycopg_internals.binary_cursor(connection) as cursor:
            rows = cursor.execute(PAGE_BODIES_SQL, [ids], binary=True).fetchall()
    return {pk: (bytes(body), _bytes(rss), _bytes(multipart))
            for pk, body, rss, multipart in rows}


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)


@cache
def _access_sql() -> tuple[str, str]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    quote = connection.ops.quote_name
    user_groups = get_user_model().groups.through._meta
    user_column, group_column = (
        next(str(field.column) for field in user_groups.fields if field.related_model is model)
        for model in (get_user_model(), Group))
    feed = quote(Feed._meta.db_table)
    role = quote(FeedRole._meta.db_table)
    scope = quote(ApiToken.feeds.through._meta.db_table)
    # (The user model's groups' table is the project's; ours are named by Django.)
    holds = (f"EXISTS (SELECT 1 FROM {role} r WHERE r.feed_id = {feed}.id "  # noqa: S608
             "AND (r.user_id = %s OR r.group_id IN "
             f"(SELECT g.{quote(group_column)} FROM {quote(user_groups.db_table)} g "
             f"WHERE g.{quote(user_column)} = %s)))")
    in_scope = (f"EXISTS (SELECT 1 FROM {scope} s "  # noqa: S608
                f"WHERE s.apitoken_id = %s AND s.feed_id = {feed}.id)")
    return holds, in_scope


def holds_role(user_id: Any) -> RawSQL:
    """On a read of feeds: whether the user holds a role on the feed, its own or a group's."""
    return RawSQL(_access_sql()[0], (user_id, user_id))  # noqa: S611 (no text of a user's)


def in_token_scope(token_id: int) -> RawSQL:
    """On a read of feeds: whether the token's scope names the feed."""
    return RawSQL(_access_sql()[1], (token_id,))  # noqa: S611
