"""A feed's record schema, as consumers read it: `/feeds/<slug>/schema/<version>`, each version
immutable, and `/feeds/<slug>/schema`, the version in force (docs/describing-records.md)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from typing import Self

from archives.models import Feed, RecordSchema

from . import atom, base, urls
from .base import Document, bytes_etag

SCHEMA_TYPE = atom.SCHEMA_TYPE


class SchemaVersionDocument(Document):
    """/feeds/<slug>/schema/<version>: one version of a feed's record schema, never changed."""

    content_type = SCHEMA_TYPE
    final = True

    def __init__(self, feed: Feed, row: RecordSchema, *, read_at: datetime):
        super().__init__(read_at=read_at)
        self.feed, self.row = feed, row

    @classmethod
    def for_version(cls, feed: Feed, version: int) -> Self:
        """Raises RecordSchema.DoesNotExist."""
        read_at = base.now()
        return cls(feed, RecordSchema.objects.get(feed=feed, version=version), read_at=read_at)

    def url(self) -> str:
        return urls.schema_url(self.feed.slug, self.row.version)

    def etag(self) -> str:
        return bytes_etag(self.body())

    def modified(self) -> datetime:
        return self.row.created

    def links(self) -> list[atom.Link]:
        older = self.row.version - 1
        return [atom.Link("self", self.url(), SCHEMA_TYPE),
                atom.feed_link("up", urls.subscription_url(self.feed.slug)),
                *([atom.Link("predecessor-version", urls.schema_url(self.feed.slug, older),
                             SCHEMA_TYPE)] if older else [])]

    def body(self) -> bytes:
        return self._bytes

    @cached_property
    def _bytes(self) -> bytes:  # (the ETag is their hash: rendered once)
        return json.dumps(self.row.schema, ensure_ascii=False, indent=2).encode()


class CurrentSchemaDocument(SchemaVersionDocument):
    """/feeds/<slug>/schema: the version in force, which the feed's next writes are checked
    under; it changes with the feed's schema (Content-Location names the version)."""

    final = False

    @classmethod
    def for_feed(cls, feed: Feed) -> CurrentSchemaDocument:
        """Raises RecordSchema.DoesNotExist when the feed has no schema."""
        if feed.schema_version is None:
            raise RecordSchema.DoesNotExist(f"Feed {feed.slug!r} has no record schema.")
        return cls.for_version(feed, feed.schema_version)

    def links(self) -> list[atom.Link]:
        return [atom.Link("self", urls.absolute(urls.url_path("archives:schema", self.feed.slug)),
                          SCHEMA_TYPE),
                atom.feed_link("up", urls.subscription_url(self.feed.slug)),
                atom.Link("latest-version", self.url(), SCHEMA_TYPE)]
