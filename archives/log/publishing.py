"""The write path: every change to a feed's records goes through this module.

In one transaction each write locks the Feed row, takes `seq = last_seq + 1` and
`updated = max(now, last_updated + 1µs)`, stores the record's new state, appends its
Entry and advances the Feed's counters. Holding the lock until commit makes commit
order equal seq order: once anyone has seen seq N, no entry below N can appear later,
which is what lets the sealer freeze pages and consumers trust them
(docs/how-it-works/invariants.md#the-write-path).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.signals import request_finished, request_started
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.dispatch import receiver
from django.utils import timezone

from archives.db import address, django_internals, fastsql, schemas
from archives.db.heads import announce
from archives.documents import base
from archives.models import Entry, Feed, Record, RecordSchema, Snapshot
from archives.validation import (
    RecordData,
    check_record_schema,
    clean_feed_text,
    clean_key,
    clean_record,
)

logger = logging.getLogger(__name__)

MAX_BATCH_OPERATIONS = 1000
ONE_MICROSECOND = timedelta(microseconds=1)
# (feed id, clock) while `backdated` is in force: the demo's made-up history.
_backdated: ContextVar[tuple[int, Callable[[], datetime]] | None] = ContextVar(
    "backdated", default=None)


class PreconditionFailed(Exception):
    """The record changed since the client read it (its If-Match no longer matches)."""


class BatchError(ValidationError):
    """A batch was refused; `errors` maps each bad operation's index to what is wrong."""

    def __init__(self, errors: dict[int, Any]):
        self.errors = errors
        super().__init__(f"{len(errors)} operation(s) are invalid")


@dataclass(frozen=True)
class Put:
    key: str
    record: RecordData


@dataclass(frozen=True)
class Delete:
    key: str


Operation = Put | Delete


def record_etag(record: Record | None) -> str | None:
    """The ETag of a record's current state; it changes with every entry for the record."""
    if record is None:
        return None
    return '"' + record.updated.strftime("%Y%m%dT%H%M%S%fZ") + '"'


def put_record(
    *, feed: Feed | str, key: str, data: Mapping[str, Any] | RecordData,
    if_match: str | None = None,
) -> Entry | None:
    """Create or replace a record. Returns its new entry, or None when nothing changed.

    `feed` is a Feed or its slug: a slug is read only once, under the lock (the API's
    single PUT), and raises Feed.DoesNotExist when no feed has it."""
    operation = Put(key=clean_key(key), record=clean_record(data))
    try:
        return _write(feed, {0: operation}, if_match=if_match)[0]
    except BatchError as error:  # the record does not match the feed's schema
        raise ValidationError(error.errors[0]) from None


def delete_record(*, feed: Feed | str, key: str, if_match: str | None = None) -> Entry | None:
    """Delete a record: appends a deletion entry, or None when it was deleted already.

    Raises Record.DoesNotExist for a key that never existed in the feed (`feed`: as for
    put_record).
    """
    try:
        return _write(feed, {0: Delete(key=clean_key(key))}, if_match=if_match)[0]
    except BatchError:  # the one operation deletes a key that does not exist
        raise Record.DoesNotExist(f"No record {key!r} in feed {feed}") from None


def error_details(error: ValidationError) -> dict[str, list[str]] | list[str]:
    """What a refused operation's error says: messages by field, or a list of them."""
    return error.message_dict if hasattr(error, "error_dict") else error.messages


def apply_batch(*, feed: Feed, operations: Sequence[Mapping[str, Any]],
                missing_ok: bool = False) -> list[Entry | None]:
    """Apply puts and deletes in order, all or nothing, under one lock of the feed.

    `operations` are `{"op": "put", "key": ..., "record": {...}}` or
    `{"op": "delete", "key": ...}`. Raises BatchError naming every bad operation. A
    delete of a key the feed does not have is one, unless `missing_ok`: then it is
    skipped (its result is None, as for a record deleted already).
    """
    if not isinstance(operations, Sequence) or isinstance(operations, str | bytes):
        raise ValidationError({"operations": ["Must be a list of operations."]})
    if not operations:  # refused before the lock: an empty batch would only hold it
        raise ValidationError({"operations": ["A batch needs at least one operation."]})
    if len(operations) > MAX_BATCH_OPERATIONS:
        raise ValidationError(
            {"operations": [f"At most {MAX_BATCH_OPERATIONS} operations in one batch."]}
        )
    parsed, invalid = {}, {}
    for index, raw in enumerate(operations):
        try:
            parsed[index] = parse_operation(raw)
        except ValidationError as error:
            invalid[index] = error_details(error)
    # The valid operations run even when some are invalid, so that one answer names every
    # bad operation (a delete of a key that does not exist at that point, too); the
    # transaction is then rolled back whole.
    return _write(feed, parsed, invalid=invalid, missing_ok=missing_ok)


OPERATION_FIELDS = {"put": frozenset({"op", "key", "record"}), "delete": frozenset({"op", "key"})}


def parse_operation(raw: Any) -> Operation:
    if not isinstance(raw, Mapping):
        raise ValidationError({"op": ["An operation is an object with op and key."]})
    op = raw.get("op")
    allowed = OPERATION_FIELDS.get(op) if isinstance(op, str) else None
    if allowed is None:
        raise ValidationError({"op": ["Must be 'put' or 'delete'."]})
    if not allowed.issuperset(raw):
        unknown = sorted(set(raw) - allowed)
        raise ValidationError({name: [f"Unknown field for a {op}."] for name in unknown})
    key = clean_key(raw.get("key"))
    if op == "delete":
        return Delete(key=key)
    if "record" not in raw:
        raise ValidationError({"record": ["A put needs a record."]})
    return Put(key=key, record=clean_record(raw["record"]))


def _write(
    feed: Feed | str,
    operations: dict[int, Operation],
    *,
    invalid: dict[int, Any] | None = None,
    if_match: str | None = None,
    missing_ok: bool = False,
) -> list[Entry | None]:
    """Apply operations (by their index in the request) under the feed lock, or raise
    BatchError naming the `invalid` ones and every delete of an unknown key (unless
    `missing_ok`)."""
    with transaction.atomic():
        if isinstance(feed, str):
            locked = Feed.objects.select_for_update().get(slug=feed)
        else:
            locked = Feed.objects.select_for_update().get(pk=feed.pk)
        address.check(locked)  # (on the row just locked: no query of its own)
        full_before = locked.full_pages
        changes = _Changes(locked, missing_ok=missing_ok)
        results = changes.apply(operations, if_match=if_match)
        if invalid or changes.refused:
            raise BatchError(dict(sorted({**(invalid or {}), **changes.refused}.items())))
        if changes.entries:  # else nothing changed (a retried put): nothing to write
            changes.save()
            # Stamped last, just before the commit, as base.Document.last_modified
            # assumes; the row is locked, so the stored value is current.
            locked.subscription_modified = max(
                locked.subscription_modified, base.change_stamp())
            Feed.objects.filter(pk=locked.pk).update(
                last_seq=locked.last_seq, last_updated=locked.last_updated,
                subscription_modified=locked.subscription_modified, base_url=locked.base_url,
            )
            announce(locked.pk)
            if locked.full_pages > locked.sealed_pages and settings.FEEDPUB_SEAL_ON_WRITE:
                # The pages this write filled, and one more of any backlog: a write's own
                # sealing cost follows its size, and a sealer outage drains step by step.
                filled = locked.full_pages - full_before
                transaction.on_commit(partial(_seal_soon, locked.pk, filled + 1))
    if isinstance(feed, Feed):  # let the caller's instance see the counters it advanced
        feed.last_seq, feed.last_updated = locked.last_seq, locked.last_updated
    return results


class _Changes:
    """The records and entries one locked write produces, saved in a few bulk queries."""

    def __init__(self, feed: Feed, *, missing_ok: bool = False):
        self.feed = feed
        self.missing_ok = missing_ok  # a delete of an unknown key is skipped, not refused
        self.records: dict[str, Record] = {}
        self.entries: list[Entry] = []
        # Operations refused under the lock: deletes of unknown keys, puts of records that
        # do not match the feed's schema.
        self.refused: dict[int, dict[str, list[str]]] = {}
        self.schema = schemas.checker(feed)
        self.as_json = _JsonOnce()

    def apply(
        self, operations: dict[int, Operation], *, if_match: str | None
    ) -> list[Entry | None]:
        keys = sorted({operation.key for operation in operations.values()})
        self.records = {record.key: record for record in fastsql.existing_records(self.feed, keys)}
        for record in self.records.values():  # their answers show the feed: no query for it
            _RECORD_FEED.set_cached_value(record, self.feed)
        if if_match is not None:
            first = next(iter(operations.values()))
            _check_if_match(if_match, record_etag(self.records.get(first.key)))
        return [self._apply(index, operation) for index, operation in operations.items()]

    def _apply(self, index: int, operation: Operation) -> Entry | None:
        record = self.records.get(operation.key)
        if isinstance(operation, Delete):
            if record is None:
                if not self.missing_ok:
                    self.refused[index] = {
                        "key": [f"No record {operation.key!r} in this feed to delete."]}
                return None
            if record.is_deleted:
                return None
            return self._append(record, Entry.Kind.DELETE, record.title, "", [], None)
        data = operation.record
        if self.schema is not None:
            errors = self.schema.errors(data.metadata)
            if errors:
                self.refused[index] = {"metadata": errors}
                return None
        if record is None:
            record = _new_record(self.feed, operation.key)
            self.records[operation.key] = record
            kind = Entry.Kind.CREATE
        elif record.is_deleted:
            kind = Entry.Kind.CREATE
        elif _same_content(record, data):
            return None  # a retried or identical put appends nothing
        else:
            kind = Entry.Kind.UPDATE
        record.title, record.summary = data.title, data.summary
        record.metadata, record.links = data.metadata, data.link_dicts()
        if data.metadata_json:  # validation encoded it already
            self.as_json.seed(data.metadata, data.metadata_json)
        return self._append(record, kind, data.title, data.summary, record.links,
                            data.metadata)

    def _append(self, record: Record, kind: str, title: str, summary: str, links: list,
                metadata: dict | None) -> Entry:
        """Append the entry of a change to `record`: the record as it is after it."""
        seq, updated = self._next_stamp()
        if record.pk is None and record.created is None:
            record.created = updated
        record.updated = record.datestamp = updated
        if kind == Entry.Kind.DELETE:  # (the record keeps the version its state had)
            record.deleted_at, version = updated, None
        else:
            record.deleted_at = None
            record.schema_version = version = self.feed.schema_version
        entry = _new_entry(self.feed, seq, record, kind, updated, title, summary, links,
                           metadata, version)
        self.entries.append(entry)
        return entry

    def _next_stamp(self) -> tuple[int, datetime]:
        feed = self.feed
        now = _clock(feed)
        if feed.last_updated is not None and now <= feed.last_updated:
            now = feed.last_updated + ONE_MICROSECOND
        feed.last_seq += 1
        feed.last_updated = now
        return feed.last_seq, now

    def save(self) -> None:
        touched = {entry.record.key: entry.record for entry in self.entries}.values()
        new = [record for record in touched if record.pk is None]
        old = [record for record in touched if record.pk is not None]
        # A batch's records and its entries carry the same metadata and links objects:
        # encoded once for both tables.
        _insert_records(new, self.as_json)
        _update_records(old, self.as_json)
        _insert_entries(self.entries, self.as_json)


# json.dumps(value, ensure_ascii=False), its encoder made once (json.dumps makes one a call).
_encode_json = json.JSONEncoder(ensure_ascii=False).encode


class _JsonOnce:
    """JSON text of values, each object encoded once however often it is asked for (what
    COPY's text format takes for a jsonb column). Keeps the objects it has seen, so that an
    id is never reused while it is in the memo."""

    def __init__(self):
        self._seen: dict[int, tuple[Any, str]] = {}

    def seed(self, value: Any, text: str) -> None:
        """Take `text` as the JSON of `value` (validation's encoding of it)."""
        self._seen.setdefault(id(value), (value, text))

    def __call__(self, value: Any) -> str | None:
        if value is None:
            return None
        known = self._seen.get(id(value))
        if known is None:
            known = self._seen[id(value)] = (value, _encode_json(value))
        return known[1]


RECORD_COLUMNS = ("id", "feed_id", "key", "title", "summary", "metadata", "links", "created",
                  "updated", "deleted_at", "datestamp", "schema_version")


# Up to this many entries, a write inserts them with one INSERT rather than by COPY (and a
# single new record by INSERT ... RETURNING its id): a single PUT's record and entry each
# cost one round trip instead of two or three.
FEW_ROWS = 8


def _insert_records(records: list[Record], as_json: _JsonOnce) -> None:
    """Insert new records: their entries need their ids, so on PostgreSQL one record is
    inserted returning its id, and more have their ids reserved in one query and go by
    COPY (see archives/db/fastsql.py)."""
    if not records:
        return
    if not fastsql.can_copy():
        Record.objects.bulk_create(records)
        return
    if len(records) == 1:
        record = records[0]
        [record.pk] = fastsql.insert_rows(Record, RECORD_COLUMNS[1:], [
            _record_row(record, as_json)[1:]], returning_id=True)
    else:
        for record, pk in zip(records, fastsql.reserve_ids(Record, len(records)), strict=True):
            record.pk = pk
        fastsql.copy_rows(Record, RECORD_COLUMNS, (_record_row(record, as_json)
                                                   for record in records))
    django_internals.mark_saved(records)  # as bulk_create leaves them


def _record_row(record: Record, as_json: _JsonOnce) -> tuple:
    return (record.pk, record.feed_id, record.key, record.title, record.summary,
            as_json(record.metadata), as_json(record.links), record.created, record.updated,
            record.deleted_at, record.datestamp, record.schema_version)


CHANGED_RECORD_COLUMNS = ("title", "summary", "metadata", "links", "updated", "deleted_at",
                          "datestamp", "schema_version")


def _update_records(records: list[Record], as_json: _JsonOnce) -> None:
    """Store the new state of changed records: on PostgreSQL in one UPDATE from a VALUES
    list (see archives/db/fastsql.py)."""
    if not fastsql.can_copy():
        Record.objects.bulk_update(records, CHANGED_RECORD_COLUMNS)
        return
    fastsql.update_rows(Record, CHANGED_RECORD_COLUMNS, [
        (record.pk, record.title, record.summary, as_json(record.metadata),
         as_json(record.links), record.updated, record.deleted_at, record.datestamp,
         record.schema_version)
        for record in records
    ])


ENTRY_COLUMNS = ("feed_id", "seq", "record_id", "kind", "updated", "title", "summary", "links",
                 "metadata", "schema_version")


def _insert_entries(entries: list[Entry], as_json: _JsonOnce) -> None:
    """Append the entries: the bulk of every write, and nothing points to them (no ids
    needed back), so PostgreSQL takes them by COPY (see archives/db/fastsql.py)."""
    if not fastsql.can_copy():
        Entry.objects.bulk_create(entries)
        return
    rows = ((entry.feed_id, entry.seq, entry.record.pk, entry.kind, entry.updated, entry.title,
             entry.summary, as_json(entry.links), as_json(entry.metadata), entry.schema_version)
            for entry in entries)
    if len(entries) <= FEW_ROWS:
        fastsql.insert_rows(Entry, ENTRY_COLUMNS, list(rows))
    else:
        fastsql.copy_rows(Entry, ENTRY_COLUMNS, rows)


# Records and entries are built by position, Django's fast path: its keyword path cost
# ~15 us an instance, as much as validating a record, and a batch builds one or two for
# each operation. The values follow the models' field order (tests/test_publishing.py
# holds the two to each other); the related objects are set as their descriptors would.
_RECORD_FEED = Record._meta.get_field("feed")
_ENTRY_FEED, _ENTRY_RECORD = Entry._meta.get_field("feed"), Entry._meta.get_field("record")
RECORD_FIELD_ORDER = RECORD_COLUMNS
ENTRY_FIELD_ORDER = ("id", *ENTRY_COLUMNS)


def _new_record(feed: Feed, key: str) -> Record:
    record = Record(None, feed.pk, key, "", "", {}, [], None, None, None, None, None)
    _RECORD_FEED.set_cached_value(record, feed)
    return record


def _new_entry(feed: Feed, seq: int, record: Record, kind: str, updated: datetime, title: str,
               summary: str, links: list, metadata: dict | None,
               schema_version: int | None) -> Entry:
    entry = Entry(None, feed.pk, seq, record.pk, kind, updated, title, summary, links, metadata,
                  schema_version)
    _ENTRY_FEED.set_cached_value(entry, feed)
    _ENTRY_RECORD.set_cached_value(entry, record)
    return entry


def _clock(feed: Feed) -> datetime:
    """The time a write to `feed` is stamped from (before the strictly-increasing rule):
    the wall clock, or the earlier time of a `backdated` block for this feed."""
    now = timezone.now()
    backdated = _backdated.get()
    if backdated is not None and backdated[0] == feed.pk:
        return min(backdated[1](), now)
    return now


@contextmanager
def backdated(feed: Feed, clock: Callable[[], datetime]) -> Iterator[None]:
    """Stamp the writes to `feed` made in this block (in this thread) from `clock`, so that
    a demo's history spreads over past days. Only for a feed just created and not yet read
    (demo_feed): the stamps are still strictly increasing (max with last_updated + 1µs,
    under the lock) and never later than the wall clock, but a harvester that went by date
    (OAI-PMH) could have passed them already. Other feeds' writes keep the wall clock."""
    if Feed.objects.get(pk=feed.pk).last_seq:
        raise ValueError(f"Only a new feed's writes may be backdated; {feed} has entries.")
    token = _backdated.set((feed.pk, clock))
    try:
        yield
    finally:
        _backdated.reset(token)


def _check_if_match(if_match: str, current: str | None) -> None:
    wanted = {tag.strip() for tag in if_match.split(",")}
    if current is None or not ({"*", current} & wanted):
        raise PreconditionFailed(
            f"If-Match {if_match} does not match the record's current ETag {current}"
        )


def _same_content(record: Record, data: RecordData) -> bool:
    return (
        record.title == data.title
        and record.summary == data.summary
        and record.metadata == data.metadata
        and record.links == data.link_dicts()
    )


# Seal on write, once the answer is sent: a write that fills a page would otherwise wait
# for its sealing (~10 ms a page of 100 entries), one request in page_size, which made
# the p99 latency of single PUTs that of sealing. Within a request the seal waits for
# request_finished, which Django sends once the server has written the response (WSGI
# close()); elsewhere (commands, the shell) it runs at once, after the commit as before.
_requests = threading.local()


@receiver(request_started)
def _request_started(**kwargs: Any) -> None:
    _requests.seals = {}  # feed id -> most pages to seal


@receiver(request_finished)
def _request_finished(**kwargs: Any) -> None:
    seals, _requests.seals = getattr(_requests, "seals", None), None
    for feed_id, max_pages in (seals or {}).items():
        _seal_after_commit(feed_id, max_pages)


def _seal_soon(feed_id: int, max_pages: int) -> None:
    seals = getattr(_requests, "seals", None)
    if seals is None:
        _seal_after_commit(feed_id, max_pages)
    else:
        seals[feed_id] = max(seals.get(feed_id, 0), max_pages)


def _seal_after_commit(feed_id: int, max_pages: int) -> None:
    # The write has committed; a failure here must not turn it into an error for the
    # producer. The next write or the `seal_archives` job seals what is left.
    from .sealing import seal_after_write

    try:
        seal_after_write(feed_id, max_pages=max_pages)
    except Exception:
        logger.exception("sealing feed %s after a write failed; seal_archives will retry",
                         feed_id)


class FeedPromised(ValidationError):
    """A change the feed's entries forbid: its slug, its page size, deleting it (a 409 at
    the API). What a feed has promised from its first entry: Feed.frozen_fields and
    Feed.deletable say when, FROZEN and UNDELETABLE why and what to do instead."""


FROZEN = {
    "slug": "Fixed once the feed has an entry: its record, archive and snapshot URLs and its "
            "records' OAI-PMH set and dc:identifier name it, and harvesters keep them. To "
            "publish under another slug, create a new feed.",
    "page_size": "Fixed once the feed has an entry: every page's range follows from it.",
}
UNDELETABLE = (
    "A feed with entries cannot be deleted: its record, archive and snapshot URLs are "
    "promised for ever, and OAI-PMH keeps every record it has listed visible, a deleted one "
    "as deleted (deletedRecord=persistent). Delete its records instead: each keeps a "
    "deletion entry and its URL answers 410 Gone."
)


class SlugTaken(ValidationError):
    """A slug another feed has (a 409 at the API: the request is valid, the data refuses it)."""


def check_slug(slug: Any, *, feed: Feed | None = None) -> None:
    """Refuse a slug another feed than `feed` has, in any case: `race` and `Race` would be
    one folder of exported pages on storage that ignores case (and one feed to a reader).
    Raises SlugTaken on "slug", naming the feed that has it."""
    if not isinstance(slug, str):
        return  # not a slug at all: the field's own validation says so
    others = Feed.objects.alias(folded=Lower("slug")).filter(folded=slug.lower())
    if feed is not None and feed.pk is not None:
        others = others.exclude(pk=feed.pk)
    taken = others.values_list("slug", flat=True).first()
    if taken is not None:
        how = ("already" if taken == slug else
               "in another case (slugs are unique whatever their case)")
        raise SlugTaken({"slug": [f"The feed {taken!r} has this slug {how}; choose "
                                  "another."]}, code="unique")


def _save_slug(feed: Feed, save: Callable[[], None], *, new: bool) -> None:
    """`save()` in a savepoint; a slug that another writer took meanwhile (the database's
    constraint) is refused as check_slug refuses it, naming that feed."""
    try:
        with transaction.atomic():
            save()
    except IntegrityError:
        check_slug(feed.slug, feed=None if new else feed)
        raise


def create_feed(*, slug: str, title: str, record_schema: Any = None, **fields: Any) -> Feed:
    """Create a feed; `record_schema`, a JSON Schema for its records' metadata, is its
    schema's version 1."""
    clean_feed_text({"title": title, **fields})
    checker = None if record_schema is None else check_record_schema(record_schema)
    check_slug(slug)  # after what the request alone decides: a 409 is for a valid one
    feed = Feed(slug=slug, title=title, **fields)
    feed.full_clean()
    with transaction.atomic():
        _save_slug(feed, feed.save, new=True)
        if checker is not None:
            _add_schema_version(feed, checker)
            feed.save(update_fields=["schema_version"])
    return feed


def update_feed(*, feed: Feed, **changes: Any) -> Feed:
    """Change a feed's description. Its slug and page size are fixed once it has an entry
    (FeedPromised): see Feed.frozen_fields."""
    clean_feed_text(changes)
    new_schema = (_SchemaChange(feed, changes.pop("record_schema"))
                  if "record_schema" in changes else None)
    with transaction.atomic():
        locked = Feed.objects.select_for_update().get(pk=feed.pk)
        refused = {name: [FROZEN[name]] for name in locked.frozen_fields
                   if name in changes and changes[name] != getattr(locked, name)}
        if refused:
            raise FeedPromised(refused)
        if "slug" in changes and changes["slug"] != locked.slug:
            check_slug(changes["slug"], feed=locked)
        changed = [name for name, value in changes.items() if getattr(locked, name) != value]
        for name in changed:
            setattr(locked, name, changes[name])
        if new_schema is not None and new_schema.apply(locked):
            changed.append("schema_version")
        if changed:
            # Every document shows the feed's description (the subscription also the slug
            # and page size only through links and ranges, which a change may move).
            now = max(locked.subscription_modified, locked.description_modified,
                      base.change_stamp())
            locked.description_modified = locked.subscription_modified = now
            changed += ["description_modified", "subscription_modified"]
        locked.full_clean()
        if changed:
            _save_slug(locked, partial(locked.save, update_fields=changed), new=False)
            announce(locked.pk)
    return locked


def delete_feed(*, feed: Feed) -> None:
    """Delete a feed that has no entry yet (FeedPromised otherwise: Feed.deletable), with
    its snapshots, which hold nothing."""
    with transaction.atomic():
        locked = Feed.objects.select_for_update().get(pk=feed.pk)
        if not locked.deletable:
            raise FeedPromised(UNDELETABLE)
        announce(locked.pk)  # (before delete() clears its pk)
        Snapshot.objects.filter(feed=locked).delete()  # their pages go with them (CASCADE)
        RecordSchema.objects.filter(feed=locked).delete()  # no entry names them
        locked.delete()


class SchemaConflict(ValidationError):
    """A record schema that live records of the feed do not match (a 409 at the API)."""


class _SchemaChange:
    """A change of a feed's record schema: a new version (never an edit of one), or none.

    Live records must match the new schema: they are checked before the feed is locked
    (a large feed takes a while, and writers must not wait for it) and those changed
    meanwhile again under the lock, so that no record that does not match can slip in.
    The schema in force sent again (a client that PATCHes whole feeds) is no change, and
    costs no pass over the records."""

    def __init__(self, feed: Feed, schema: Any):
        self.checker = None if schema is None else check_record_schema(schema)
        self.checked_seq = 0  # every live record is checked under the lock, unless read before
        current = schemas.current_schema(feed)
        if self.checker is not None and not (
                current is not None and _same_json(current, self.checker.schema)):
            self.checked_seq = Feed.objects.values_list("last_seq", flat=True).get(pk=feed.pk)
            _refuse_breaking(self.checker, Record.objects.filter(feed_id=feed.pk))

    def apply(self, locked: Feed) -> bool:
        """Make it the locked feed's schema; whether that changed anything."""
        current = schemas.current_schema(locked)
        if self.checker is None:
            locked.schema_version = None
            return current is not None
        if current is not None and _same_json(current, self.checker.schema):
            return False
        changed_since = Entry.objects.filter(feed=locked, seq__gt=self.checked_seq)
        _refuse_breaking(self.checker, Record.objects.filter(
            pk__in=changed_since.values("record_id")))
        _add_schema_version(locked, self.checker)
        return True


def _refuse_breaking(checker, records) -> None:
    """SchemaConflict if any live record of `records` does not match the schema, naming how
    many do not and the first of them by key."""
    failing, first = 0, None
    live = records.filter(deleted_at__isnull=True).order_by("key")
    for key, metadata in live.values_list("key", "metadata").iterator(chunk_size=2000):
        errors = checker.errors(metadata)
        if errors:
            failing += 1
            first = first or (key, errors)
    if failing:
        key, errors = first
        raise SchemaConflict({"record_schema": [
            f"{failing} live record(s) do not match this schema; the first, {key!r}: "
            f"{'; '.join(errors)}. Correct them first (one batch of puts, under the current "
            "schema), then change the schema."]})


def _add_schema_version(feed: Feed, checker) -> None:
    """Store the checker's schema as the feed's next version, and make it the feed's (the
    caller saves the feed's schema_version)."""
    latest = RecordSchema.objects.filter(feed=feed).order_by("-version").values_list(
        "version", flat=True).first()
    version = (latest or 0) + 1
    RecordSchema.objects.create(feed=feed, version=version, text=_encode_json(checker.schema),
                                created=timezone.now())
    feed.schema_version = version
    # Kept compiled once committed: a version rolled back with its transaction must not stay
    # here, where another process's version of the same number would find it.
    transaction.on_commit(partial(schemas.keep, feed, version, checker.schema))


def _same_json(a: Any, b: Any) -> bool:
    # As JSON, not as Python: 1 == 1.0 == True there, and a schema's "const": 1 is not
    # "const": true.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
