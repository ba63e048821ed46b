"""Writes of a feed itself: creating it, changing its description, slug or record schema,
deleting it (archives/log/publishing.py writes its records). Each in one transaction that
locks the feed row, as record writes do, and keeps what the feed has promised once it has
an entry (FeedPromised).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.utils import timezone

from archives.db import schemas
from archives.db.bulkwrite import encode_json
from archives.db.heads import announce
from archives.documents import base
from archives.models import Entry, Feed, Record, RecordSchema, Snapshot
from archives.validation import check_record_schema, clean_feed_text


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
    failing = 0
    first: tuple[str, list[str]] | None = None
    live = records.filter(deleted_at__isnull=True).order_by("key")
    for key, metadata in live.values_list("key", "metadata").iterator(chunk_size=2000):
        errors = checker.errors(metadata)
        if errors:
            failing += 1
            first = first or (key, errors)
    if first is not None:
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
    RecordSchema.objects.create(feed=feed, version=version, text=encode_json(checker.schema),
                                created=timezone.now())
    feed.schema_version = version
    # Kept compiled once committed: a version rolled back with its transaction must not stay
    # here, where another process's version of the same number would find it.
    transaction.on_commit(partial(schemas.keep, feed, version, checker.schema))


def _same_json(a: Any, b: Any) -> bool:
    # As JSON, not as Python: 1 == 1.0 == True there, and a schema's "const": 1 is not
    # "const": true.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
