"""Feeds, their records, the append-only log of entries, and sealed archive pages.

Rows here are written only by `archives.publishing` (feeds, records, entries) and
`archives.sealing` (archive pages); see DESIGN.md "The write path".
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from weakref import WeakKeyDictionary

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connections, models
from django.urls import reverse

MAX_PAGE_SIZE = 10_000


def default_page_size() -> int:
    return settings.FEEDPUB_PAGE_SIZE


class FeedManager(models.Manager):
    def get_by_slug(self, slug: str) -> Feed:
        """One feed by its slug, for the read path every poll takes.

        The query is compiled once per database connection and then only executed:
        compiling it each time cost more than the indexed lookup itself (~0.25 ms of
        ~0.5 ms). The compiler also supplies the backend's value converters (SQLite
        stores UUIDs and datetimes as text).
        """
        connection = connections[self.db]
        compiled = _compiled_lookups.get(connection)
        if compiled is None:
            compiler = self.filter(slug="").query.get_compiler(connection=connection)
            sql, _ = compiler.as_sql()
            columns = [column for column, _, _ in compiler.select]
            compiled = _compiled_lookups[connection] = (
                sql, [column.target.attname for column in columns],
                compiler, compiler.get_converters(columns),
            )
        sql, names, compiler, converters = compiled
        with connection.cursor() as cursor:
            cursor.execute(sql, [slug])
            rows = cursor.fetchall()
        if not rows:
            raise self.model.DoesNotExist(f"No feed {slug!r}")
        values = next(iter(compiler.apply_converters(rows, converters))) if converters \
            else rows[0]
        return self.model.from_db(self.db, names, values)


# Keyed by the connection (one per thread and alias), so each compiler and its converters
# belong to the connection that runs them; entries go when the connection object does.
_compiled_lookups: WeakKeyDictionary = WeakKeyDictionary()


class Feed(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    title = models.CharField(max_length=300)
    subtitle = models.CharField(max_length=1000, blank=True)
    author = models.CharField(max_length=300, default="feedpub")
    page_size = models.PositiveIntegerField(
        default=default_page_size,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_PAGE_SIZE)],
        help_text="Entries per archive page; fixed once a page is sealed.",
    )
    created = models.DateTimeField(auto_now_add=True)
    # The write counter: seq and updated of the newest entry (0/None before the first).
    last_seq = models.BigIntegerField(default=0, editable=False)
    last_updated = models.DateTimeField(null=True, blank=True, editable=False)
    # How far the feed is sealed: pages 1..sealed_pages hold entries 1..sealed_pages*page_size.
    sealed_pages = models.PositiveIntegerField(default=0, editable=False)

    objects = FeedManager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def get_absolute_url(self) -> str:
        return reverse("archives:subscription", args=[self.slug])

    @property
    def atom_id(self) -> str:
        return self.uuid.urn

    @property
    def sealed_seq(self) -> int:
        """The seq of the newest sealed entry; entries after it are in the subscription."""
        return self.sealed_pages * self.page_size

    @property
    def full_pages(self) -> int:
        """How many pages the entries written so far fill (sealed or not yet)."""
        return self.last_seq // self.page_size

    @property
    def modified(self):
        """The instant the feed's content last changed: its newest entry, else its creation."""
        return self.last_updated or self.created


class Record(models.Model):
    # No index of its own: the (feed, key) constraint's index serves every lookup by feed.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="records",
                             db_index=False)
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=1000)
    summary = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # [{"href": ..., "rel": ..., "type": ..., "title": ...}], as the producer gave them.
    links = models.JSONField(default=list, blank=True)
    created = models.DateTimeField()
    # The record's last modified time: the `updated` of its newest entry.
    updated = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["feed", "key"]
        constraints = [
            # Serves the record URL and every put/delete: WHERE feed_id = ? AND key = ?
            models.UniqueConstraint(fields=["feed", "key"], name="record_unique_key_per_feed"),
        ]
        indexes = [
            # Serves the API's "changed since" listing: WHERE feed_id = ? ORDER BY updated, id
            models.Index(fields=["feed", "updated", "id"], name="record_feed_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug}/{self.key}"

    def get_absolute_url(self) -> str:
        return reverse("archives:record", args=[self.feed.slug, self.key])

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def atom_id(self) -> str:
        return record_atom_id(self.feed.uuid, self.key)

    def as_json(self) -> dict:
        """The record as the API and its own URL show it in JSON."""
        return {
            "key": self.key,
            "atom_id": self.atom_id,
            "title": self.title,
            "summary": self.summary,
            "metadata": self.metadata,
            "links": self.links,
            "created": rfc3339(self.created),
            "updated": rfc3339(self.updated),
            "deleted": self.is_deleted,
            "url": settings.FEEDPUB_BASE_URL + self.get_absolute_url(),
        }


def rfc3339(moment: datetime) -> str:
    """The one timestamp format of documents and API: RFC 3339, UTC, with microseconds."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def record_atom_id(feed_uuid: uuid.UUID, key: str) -> str:
    """A record's atom:id: stable, host-independent, and unique across feeds.

    It is `uuid.uuid5(feed_uuid, key).urn`, computed without building a UUID object,
    which took two thirds of the time: sealing computes one for every entry.
    """
    digest = bytearray(hashlib.sha1(feed_uuid.bytes + key.encode()).digest()[:16])  # noqa: S324
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Entry(models.Model):
    """One change to one record, as it was at that moment. Never updated, never deleted."""

    class Kind(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        DELETE = "delete"

    # No index of its own: the (feed, seq) constraint's index serves every lookup by feed.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="entries",
                             db_index=False)
    seq = models.BigIntegerField()
    # Indexed (the FK default): serves the PROTECT check when records are deleted.
    record = models.ForeignKey(Record, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=6, choices=Kind.choices)
    updated = models.DateTimeField()
    title = models.CharField(max_length=1000)
    summary = models.TextField(blank=True)
    links = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["feed", "seq"]
        verbose_name_plural = "entries"
        constraints = [
            # Serves pages and the subscription document: WHERE feed_id = ? AND seq BETWEEN ..
            # and makes a duplicate seq impossible even if the write path were bypassed.
            models.UniqueConstraint(fields=["feed", "seq"], name="entry_unique_seq_per_feed"),
        ]

    def __str__(self) -> str:
        return f"{self.feed_id}#{self.seq} {self.kind}"

    @property
    def is_deletion(self) -> bool:
        return self.kind == self.Kind.DELETE


class ArchivePage(models.Model):
    """A sealed page: entries first_seq..last_seq, frozen as the bytes served for it."""

    # No index of its own: the (feed, number) constraint's index serves every lookup by feed.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="pages",
                             db_index=False)
    number = models.PositiveIntegerField()
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    first_updated = models.DateTimeField()
    last_updated = models.DateTimeField()
    body = models.BinaryField()
    etag = models.CharField(max_length=80)
    # True once the next page is sealed and this one carries its next-archive link:
    # from then on its bytes are final (immutable, cacheable forever).
    has_next = models.BooleanField(default=False)
    sealed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["feed", "number"]
        constraints = [
            # Serves the archive document: WHERE feed_id = ? AND number = ?; and makes two
            # sealers unable to store the same page twice.
            models.UniqueConstraint(fields=["feed", "number"], name="page_unique_number_per_feed"),
        ]
        indexes = [
            # Serves the date routes: WHERE feed_id = ? AND last_updated >= ? ORDER BY number
            models.Index(fields=["feed", "last_updated"], name="page_feed_last_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.feed_id} page {self.number}"

    def get_absolute_url(self) -> str:
        return reverse("archives:archive", args=[self.feed.slug, self.number])
