"""What OAI-PMH reads of the log: records by their position, sets, identifiers, and the
safe point that makes lists and incremental harvests miss nothing.

A record's datestamp (`Record.datestamp`) is its last change (`Record.updated`, the
`updated` of its newest entry), or the moment its feed moved to another base URL after it
(rerender_documents: its URLs in OAI-PMH changed then), so a list ordered by
(datestamp, id) is the log seen one record at a time: a record that changes, or whose
feed moves, moves to the end. A list resumes after a position, by an index, never by
OFFSET: a deep page costs what the first does.

Why nothing is missed. A datestamp is stamped inside a writer's transaction (a write, or
a move), after it takes its feed's lock and before its commit; writers of different feeds
run at once, so a change may become visible after a change of another feed stamped later.
Before each read (one statement, one snapshot) a `SafePoint` is taken:
- its `horizon`: on PostgreSQL the start of the oldest transaction that holds a feed row
  lock, else now. Every change not in the read is stamped after it (a writer stamps after
  its transaction began; on SQLite one writer at a time, stamping after the last commit).
  A list's page stops before the horizon when it can, so a token never resumes past a
  change that might still commit behind it: a record changed during a harvest is listed
  again later in the same harvest;
- its `response_second`, the answer's responseDate: the horizon's second less
  FEEDPUB_LAST_MODIFIED_SETTLE (which bounds the clock difference between hosts, as for
  Last-Modified). A harvester that sends it back as `from` gets every change it has not
  seen. When a page must go past the horizon (more than a page of changes after it), the
  rest of its list answers no later responseDate than that page's, so the promise holds;
- the last page of a list takes everything after its position, so every record that
  exists at the start and the end of a harvest is listed at least once, in its state at
  some moment of the harvest or later: in one snapshot, a record not yet listed is always
  after the list's position.
A harvest ends once it has caught up with the writers (fewer than a page of changes left
after its position), as a harvest of a changing collection must.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from archives.conf import settings
from archives.db import fastsql, schemas
from archives.db.rows import OAI_ITEM, OaiItem
from archives.models import Feed, Record

from .protocol import ListState, Position


def now() -> datetime:
    """The clock of the safe point (tests move it)."""
    return timezone.now()


@dataclass(frozen=True)
class SafePoint:
    horizon: datetime  # every change not yet visible is stamped at or after it
    response_second: int  # a UNIX second: the answer's responseDate

    @classmethod
    def now(cls) -> SafePoint:
        """Taken before a read: see the module's docstring."""
        horizon = now()
        if connection.vendor == "postgresql":
            oldest = _oldest_writer_start()
            if oldest is not None:
                horizon = min(horizon, oldest)
        second = math.floor(horizon.timestamp()) - settings.FEEDPUB_LAST_MODIFIED_SETTLE
        return cls(horizon, second)


def _oldest_writer_start() -> datetime | None:
    """When the oldest transaction that holds a feed row lock (FOR UPDATE) began: a writer,
    whose stamps are later. (The statistics functions under pg_stat_activity, which show
    the sessions of our own role: the view itself costs three times as much to ask.)"""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(pg_stat_get_backend_xact_start(b))"
            " FROM pg_stat_get_backend_idset() b WHERE pg_stat_get_backend_pid(b) IN ("
            "SELECT pid FROM pg_locks WHERE relation = %s::regclass AND mode = 'RowShareLock'"
            " AND granted AND pid <> pg_backend_pid())", [Feed._meta.db_table])
        return cursor.fetchone()[0]


# Identifiers: oai:<repository id>:<feed uuid>/<key>. The feed's uuid, not its slug (which
# may still change while no page is sealed), so that an identifier is never reused.

IDENTIFIER_RE = re.compile(r"oai:([^:]+):([0-9a-f-]{36})/([A-Za-z0-9._~-]+)")


def identifier(feed_uuid: uuid.UUID, key: str) -> str:
    return _identifier_prefix(settings.FEEDPUB_OAI_REPOSITORY_ID, feed_uuid) + key


@lru_cache(maxsize=1024)
def _identifier_prefix(repository_id: str, feed_uuid: uuid.UUID) -> str:
    return f"oai:{repository_id}:{feed_uuid}/"  # (str(uuid) costs as much as the rest)


def sample_identifier() -> str:
    return identifier(uuid.UUID(int=0), "isbn-9780141439518")


# A record as OAI-PMH shows it: one row shape (archives/db/rows.py), read by identifier
# through the ORM and in lists past it (fastsql.oai_records).
Item = OaiItem


def item_by_identifier(text: str) -> Item | None:
    """The record an identifier names, deleted or not; None for one never issued here."""
    match = IDENTIFIER_RE.fullmatch(text)
    if match is None or match[1] != settings.FEEDPUB_OAI_REPOSITORY_ID:
        return None
    try:
        feed_uuid = uuid.UUID(match[2])
    except ValueError:
        return None
    row = Record.objects.filter(feed__uuid=feed_uuid, key=match[3]).values_list(
        *OAI_ITEM.orm_names).first()
    return None if row is None else Item._make(row)


@lru_cache(maxsize=schemas.MAX_KEPT)
def dublin_core(feed_uuid: uuid.UUID, version: int) -> tuple[tuple[str, str], ...]:
    """(property, Dublin Core element) for each property of version `version` of the feed's
    record schema that carries `x-dc`, in the schema's order. A version never changes and a
    uuid is never reused, so what is kept is never stale: one query per version and process,
    not one per record of a list."""
    feed = Feed.objects.only("id", "uuid", "slug").get(uuid=feed_uuid)
    return tuple(schemas.version_checker(feed, version).dublin_core().items())


def earliest_datestamp() -> datetime:
    """The earliest datestamp of any record (by the (datestamp, id) index), else the oldest
    feed's creation, else now: a lower bound of every datestamp."""
    first = Record.objects.order_by("datestamp", "id").values_list(
        "datestamp", flat=True).first()
    if first is None:
        first = Feed.objects.order_by("created").values_list("created", flat=True).first()
    return first or now()


# Lists ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Page:
    items: list  # Items, or feeds for ListSets
    resume: ListState | None  # what the resumption token carries; None: the list is done
    response_second: int  # responseDate, a UNIX second
    cursor: int  # how many items earlier answers of the list returned
    size: int  # completeListSize


def record_page(state: ListState, *, safe: SafePoint, with_metadata: bool) -> Page | None:
    """The next page of a ListRecords/ListIdentifiers list, or None when nothing matches
    (noRecordsMatch). `safe` was taken before the read; see the module's docstring for the
    rules it keeps."""
    page_size = settings.FEEDPUB_OAI_PAGE_SIZE
    feed_id = None
    if state.set_spec is not None:
        feed_id = Feed.objects.filter(slug=state.set_spec).values_list("id", flat=True).first()
        if feed_id is None:
            return None
    # completeListSize: counted once, when the list begins (by the (feed, datestamp, id)
    # or the (datestamp, id) index); the token carries it on.
    size = state.size or _matching(feed_id, state).count()
    # (A record list's position; ListSets' is a feed id.)
    after = ((state.after.datestamp, state.after.id) if isinstance(state.after, Position)
             else None)
    rows = fastsql.oai_records(feed_id=feed_id, start=state.start, end=state.end, after=after,
                               content=with_metadata, limit=page_size + 1)
    if not rows:
        return None
    floor = state.floor
    size = max(size, state.delivered + min(len(rows), page_size))
    if len(rows) <= page_size:
        return Page(rows, None, _capped(safe.response_second, floor), state.delivered, size)
    rows = rows[:page_size]
    settled = [record for record in rows if record.datestamp < safe.horizon]
    if settled:
        rows = settled
    else:  # more than a page after the horizon: go on, and answer no later date after
        floor = _capped(safe.response_second, floor)
    resume = state.resumed(after=Position(rows[-1].datestamp, rows[-1].id),
                           delivered=state.delivered + len(rows), size=size, floor=floor)
    return Page(rows, resume, _capped(safe.response_second, floor), state.delivered, size)


def _capped(second: int, floor: int | None) -> int:
    return second if floor is None else min(second, floor)


def _matching(feed_id: int | None, state: ListState) -> QuerySet[Record]:
    records = Record.objects.all() if feed_id is None else Record.objects.filter(feed_id=feed_id)
    if state.start is not None:
        records = records.filter(datestamp__gte=state.start)
    if state.end is not None:
        records = records.filter(datestamp__lt=state.end)
    return records


def set_page(state: ListState, *, safe: SafePoint) -> Page | None:
    """The next page of ListSets: one set per feed, by id."""
    page_size = settings.FEEDPUB_OAI_PAGE_SIZE
    feeds = Feed.objects.order_by("id")
    size = state.size or feeds.count()
    if state.after is not None:
        feeds = feeds.filter(id__gt=state.after)
    rows = list(feeds[:page_size + 1])
    if not rows:
        return None
    size = max(size, state.delivered + min(len(rows), page_size))
    if len(rows) <= page_size:
        return Page(rows, None, safe.response_second, state.delivered, size)
    rows = rows[:page_size]
    resume = state.resumed(after=rows[-1].id, delivered=state.delivered + len(rows),
                           size=size, floor=None)
    return Page(rows, resume, safe.response_second, state.delivered, size)
