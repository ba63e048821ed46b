"""A record at its own URL: an Atom Entry Document, or JSON (`record_json`, the shape the API
shows too), rendered from the record's row and its newest entry.
"""

from __future__ import annotations

import json
from datetime import datetime

from archives import formats
from archives.conf import settings
from archives.models import Record

from . import atom, base, urls
from .base import JSON_TYPE, Document, inputs_etag


def record_json(record: Record) -> dict:
    """The record as the API and its own URL show it in JSON."""
    return formats.record_json(
        feed_uuid=record.feed.uuid, key=record.key, title=record.title,
        summary=record.summary, metadata=record.metadata, links=record.links,
        created=record.created, updated=record.updated, deleted=record.is_deleted,
        url=settings.FEEDPUB_BASE_URL + record.get_absolute_url(),
        schema=None if record.schema_version is None
        else urls.schema_url(record.feed.slug, record.schema_version),
        language=record.language)


class RecordDocument(Document):
    """/feeds/<slug>/records/<key>: a live record as an Atom Entry Document."""

    content_type = atom.ATOM_ENTRY_TYPE

    def __init__(self, record: Record, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.record = record

    @classmethod
    def for_key(cls, slug: str, key: str) -> RecordDocument:
        """Raises Record.DoesNotExist."""
        read_at = base.now()
        record = Record.objects.select_related("feed").get(feed__slug=slug, key=key)
        return cls(record, read_at=read_at)

    def inputs(self) -> tuple:
        record, feed = self.record, self.record.feed
        # Every write to a record moves its `updated`, so it stands for the record's columns.
        return (feed.uuid, feed.slug, feed.author, feed.language, record.key, record.created,
                record.updated)

    def etag(self) -> str:
        return inputs_etag(type(self).__name__, *self.inputs())

    def modified(self) -> datetime:
        return max(self.record.updated, self.record.feed.description_modified,
                   base.RENDERER_MODIFIED)

    def links(self) -> list[atom.Link]:
        return atom.record_links(self.record)

    def body(self) -> bytes:
        return atom.render_record(self.record)

    def as_json(self) -> RecordJSONDocument:
        """The same record in JSON (the API's shape)."""
        return RecordJSONDocument(self.record, read_at=self.read_at)


class RecordJSONDocument(RecordDocument):
    content_type = JSON_TYPE

    def inputs(self) -> tuple:
        record, feed = self.record, self.record.feed
        return (feed.uuid, feed.slug, record.key, record.created, record.updated,
                record.schema_version)

    def body(self) -> bytes:
        return json.dumps(record_json(self.record), ensure_ascii=False, indent=2).encode()
