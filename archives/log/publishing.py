"""The write path: every change to a feed's records goes through this module.

In one transaction each write locks the Feed row, takes `seq = last_seq + 1` and
`updated = max(now, last_updated + 1µs)`, stores the record's new state, appends its
Entry and advances the Feed's counters. Holding the lock until commit makes commit
order equal seq order: once anyone has seen seq N, no entry below N can appear later,
which is what lets the sealer freeze pages and consumers trust them
(docs/how-it-works/invariants.md#the-write-path).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.core.signals import request_finished, request_started
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from archives.conf import settings
from archives.db import address, bulkwrite, fastsql, schemas
from archives.db.heads import announce
from archives.documents import base
from archives.models import Entry, Feed, Record
from archives.validation import (
    RecordData,
    clean_key,
    clean_record,
)

# Writes of the feed itself live in feedwrites.py; its names are this module's too, as every
# write of the log has been (callers and tests reach them here).
from . import access
from .access import Actor
from .feedwrites import (
    FROZEN,
    UNDELETABLE,
    FeedPromised,
    SchemaConflict,
    SlugTaken,
    check_slug,
    create_feed,
    delete_feed,
    update_feed,
)

__all__ = [
    "FROZEN", "UNDELETABLE", "BatchError", "Delete", "FeedPromised", "PreconditionFailed", "Put",
    "SchemaConflict", "SlugTaken", "apply_batch", "backdated", "check_slug", "create_feed",
    "delete_feed", "delete_record", "put_record", "record_etag", "update_feed",
]

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
    if_match: str | None = None, actor: Actor | None = None,
) -> Entry | None:
    """Create or replace a record. Returns its new entry, or None when nothing changed.

    `feed` is a Feed or its slug: a slug is read only once, under the lock (the API's
    single PUT), and raises Feed.DoesNotExist when no feed has it. `actor`: who writes
    (checked, and kept with the entry; None: unchecked, and kept as unknown); raises
    access.NotAllowed when they may not."""
    operation = Put(key=clean_key(key), record=clean_record(data))
    try:
        return _write(feed, {0: operation}, if_match=if_match, actor=actor)[0]
    except BatchError as error:  # the record does not match the feed's schema
        raise ValidationError(error.errors[0]) from None


def delete_record(*, feed: Feed | str, key: str, if_match: str | None = None,
                  actor: Actor | None = None) -> Entry | None:
    """Delete a record: appends a deletion entry, or None when it was deleted already.

    Raises Record.DoesNotExist for a key that never existed in the feed (`feed`, `actor`: as
    for put_record).
    """
    try:
        return _write(feed, {0: Delete(key=clean_key(key))}, if_match=if_match,
                      actor=actor)[0]
    except BatchError:  # the one operation deletes a key that does not exist
        raise Record.DoesNotExist(f"No record {key!r} in feed {feed}") from None


def error_details(error: ValidationError) -> dict[str, list[str]] | list[str]:
    """What a refused operation's error says: messages by field, or a list of them."""
    return error.message_dict if hasattr(error, "error_dict") else error.messages


def apply_batch(*, feed: Feed, operations: Sequence[Mapping[str, Any]],
                missing_ok: bool = False, actor: Actor | None = None) -> list[Entry | None]:
    """Apply puts and deletes in order, all or nothing, under one lock of the feed.

    `operations` are `{"op": "put", "key": ..., "record": {...}}` or
    `{"op": "delete", "key": ...}`. Raises BatchError naming every bad operation. A
    delete of a key the feed does not have is one, unless `missing_ok`: then it is
    skipped (its result is None, as for a record deleted already). `actor`: as for
    put_record.
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
    return _write(feed, parsed, invalid=invalid, missing_ok=missing_ok, actor=actor)


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
    actor: Actor | None = None,
) -> list[Entry | None]:
    """Apply operations (by their index in the request) under the feed lock, or raise
    BatchError naming the `invalid` ones and every delete of an unknown key (unless
    `missing_ok`), or access.NotAllowed when `actor` may not take them all."""
    with transaction.atomic():
        # What the actor's rights depend on is read with the row (no query of its own).
        locked = fastsql.lock_feed(*(("slug", feed) if isinstance(feed, str) else ("pk", feed.pk)),
                                   **access.rights_to_read(actor))
        address.check(locked)  # (on the row just locked: no query of its own)
        full_before = locked.full_pages
        changes = _Changes(locked, missing_ok=missing_ok, actor=actor)
        results = changes.apply(operations, if_match=if_match)
        access.check_records(actor, locked, changes.actions)
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

    def __init__(self, feed: Feed, *, missing_ok: bool = False, actor: Actor | None = None):
        self.feed = feed
        self.missing_ok = missing_ok  # a delete of an unknown key is skipped, not refused
        # What the operations would do ("add", "change", "delete"), changed or not: checked
        # against the actor's rights (a put that changes nothing is still a write).
        self.actions: set[str] = set()
        self.actor = actor.entry_values() if actor is not None else access.UNKNOWN
        self.records: dict[str, Record] = {}
        self.entries: list[Entry] = []
        # Operations refused under the lock: deletes of unknown keys, puts of records that
        # do not match the feed's schema.
        self.refused: dict[int, dict[str, list[str]]] = {}
        self.schema = schemas.checker(feed)
        self.as_json = bulkwrite.JsonOnce()

    def apply(
        self, operations: dict[int, Operation], *, if_match: str | None
    ) -> list[Entry | None]:
        keys = sorted({operation.key for operation in operations.values()})
        self.records = {record.key: record for record in fastsql.existing_records(self.feed, keys)}
        for record in self.records.values():  # their answers show the feed: no query for it
            bulkwrite.show_feed(record, self.feed)
        if if_match is not None:
            first = next(iter(operations.values()))
            _check_if_match(if_match, record_etag(self.records.get(first.key)))
        return [self._apply(index, operation) for index, operation in operations.items()]

    def _apply(self, index: int, operation: Operation) -> Entry | None:
        record = self.records.get(operation.key)
        if isinstance(operation, Delete):
            self.actions.add("delete")
            if record is None:
                if not self.missing_ok:
                    self.refused[index] = {
                        "key": [f"No record {operation.key!r} in this feed to delete."]}
                return None
            if record.is_deleted:
                return None
            return self._append(record, Entry.Kind.DELETE)
        data = operation.record
        self.actions.update(("add", "change") if record is None else ("change",))
        if self.schema is not None:
            errors = self.schema.errors(data.metadata)
            if errors:
                self.refused[index] = {"metadata": errors}
                return None
        stored = data.stored()
        if record is None:
            record = bulkwrite.new_record(self.feed, operation.key)
            self.records[operation.key] = record
            kind = Entry.Kind.CREATE
        elif record.is_deleted:
            kind = Entry.Kind.CREATE
        elif bulkwrite.record_fields(record) == stored:
            return None  # a retried or identical put appends nothing
        else:
            kind = Entry.Kind.UPDATE
        bulkwrite.set_record_fields(record, stored)
        if data.metadata_json:  # validation encoded it already
            self.as_json.seed(data.metadata, data.metadata_json)
        return self._append(record, kind)

    def _append(self, record: Record, kind: str) -> Entry:
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
        entry = bulkwrite.new_entry(self.feed, seq, record, kind, updated, self.actor, version)
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
        bulkwrite.insert_records(new, self.as_json)
        bulkwrite.update_records(old, self.as_json)
        bulkwrite.insert_entries(self.entries, self.as_json)


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


