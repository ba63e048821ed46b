"""Feeds' record schemas as the write path and the readers need them: each version compiled
once per process. A version never changes once written (archives.models.RecordSchema), so
what is kept here is never stale; the write path checks every record against the version its
locked Feed row names, with no query of its own once that version is known here."""

from __future__ import annotations

import json
import threading
from typing import Any

from archives.models import Feed, RecordSchema
from archives.validation import RecordChecker

# Versions kept compiled per process (a compiled schema costs a few kilobytes).
MAX_KEPT = 512
_kept: dict[tuple[Any, int], RecordChecker] = {}
_lock = threading.Lock()


def checker(feed: Feed) -> RecordChecker | None:
    """The compiled version of the feed's schema in force, or None when it has none."""
    if feed.schema_version is None:
        return None
    return version_checker(feed, feed.schema_version)


def version_checker(feed: Feed, version: int) -> RecordChecker:
    """Version `version` of the feed's schema, compiled; RecordSchema.DoesNotExist if the
    feed has no such version."""
    # By the feed's uuid, never reused (its id is, by SQLite after a rollback and by tests).
    found = _kept.get((feed.uuid, version))
    if found is None or found.feed != feed.slug:  # (renamed: its refusals name the feed)
        text = RecordSchema.objects.values_list("text", flat=True).get(
            feed_id=feed.pk, version=version)
        found = keep(feed, version, json.loads(text))
    return found


def keep(feed: Feed, version: int, schema: dict[str, Any]) -> RecordChecker:
    """Compile and keep version `version` of the feed's schema: the write path calls it as it
    writes a new version, so that the writes after it find it here. A version stored over the
    bounds is kept as such: read, never run against a record (RecordChecker)."""
    compiled = RecordChecker(schema, version, feed.slug)
    with _lock:
        if len(_kept) >= MAX_KEPT:
            _kept.clear()  # rare (512 versions in use at once): simpler than an LRU
        _kept[(feed.uuid, version)] = compiled
    return compiled


def current_schema(feed: Feed) -> dict[str, Any] | None:
    """The feed's schema in force as JSON, or None."""
    found = checker(feed)
    return None if found is None else found.schema
