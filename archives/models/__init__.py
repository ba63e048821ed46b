"""Feeds, their records, the append-only log of entries, and sealed archive pages.

Rows here are written only by `archives.log.publishing` (feeds, records, entries) and
`archives.log.sealing` (archive pages); see docs/how-it-works/invariants.md#the-write-path.
Who may write a feed and with which token: `access`; the WebSub hub's rows: `push`.
"""

from __future__ import annotations

import json
import uuid

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Cast, Lower
from django.urls import reverse
from django.utils import timezone

from ..conf import settings
from ..formats import record_atom_id
from ..validation import LANGUAGE_MESSAGE, LANGUAGE_RE, MAX_LANGUAGE_LENGTH, MAX_NOTE_LENGTH

MAX_PAGE_SIZE = 10_000

validate_language = RegexValidator(LANGUAGE_RE.pattern, LANGUAGE_MESSAGE)


def default_page_size() -> int:
    return settings.FEEDPUB_PAGE_SIZE


def default_language() -> str:
    return settings.FEEDPUB_LANGUAGE


# A full page not sealed yet (page sealed_pages + 1 ends at or before last_seq): the condition
# of the partial index `feed_needs_sealing` and of the sealer's query, spelled once so that the
# planner sees one expression. In bigint: two integer columns' product overflows an integer.
NEEDS_SEALING = ("last_seq__gte",
                 (Cast("sealed_pages", models.BigIntegerField()) + 1) * models.F("page_size"))


# Fixed once a feed has an entry (Feed.frozen_fields), whose promises begin then: its slug is
# in every record, archive and snapshot URL and in its records' OAI-PMH set and `dc:identifier`,
# which harvesters keep (deletedRecord=persistent), and its page size sets every page's range.
# Nor is the feed ever deleted (Feed.deletable); archives.log.publishing enforces both.
FROZEN_FIELDS = ("slug", "page_size")


class Via(models.TextChoices):
    """The door a change came in by."""

    API = "api"
    BATCH = "batch"
    ADMIN = "admin"
    IMPORT = "import"
    COMMAND = "command"


class Feed(models.Model):
    # Unique ignoring case too (`feed_slug_unique_ignoring_case`), kept as given: `race` and
    # `Race` would be one folder on storage that ignores case, and one feed to a reader.
    slug = models.SlugField(
        max_length=100, unique=True,
        help_text="The feed's URL name (letters, digits, - and _; unique whatever the case); "
                  "fixed once the feed has an entry.")
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    title = models.CharField(max_length=300)
    subtitle = models.CharField(max_length=1000, blank=True)
    author = models.CharField(max_length=300, default="feedpub")
    # BCP 47 tag of the feed's text: every document's xml:lang (lang in HTML).
    language = models.CharField(
        max_length=35, default=default_language, validators=[validate_language],
        help_text="Language of titles and summaries, as a BCP 47 tag such as en, de or pt-BR.",
    )
    page_size = models.PositiveIntegerField(
        default=default_page_size,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_PAGE_SIZE)],
        help_text="Entries per archive page; fixed once the feed has entries.",
    )
    created = models.DateTimeField(auto_now_add=True)
    # The write counter: seq and updated of the newest entry (0/None before the first).
    last_seq = models.BigIntegerField(default=0, editable=False)
    last_updated = models.DateTimeField(null=True, blank=True, editable=False)
    # How far the feed is sealed: pages 1..sealed_pages hold entries 1..sealed_pages*page_size.
    sealed_pages = models.PositiveIntegerField(default=0, editable=False)
    # When documents' bytes last changed (their Last-Modified, archives/documents/base.py;
    # a seal or a retitle changes bytes too). The feed's own description, in every document:
    description_modified = models.DateTimeField(default=timezone.now, editable=False)
    # The subscription document: every write, seal and description change.
    subscription_modified = models.DateTimeField(default=timezone.now, editable=False)
    # The FEEDPUB_BASE_URL its documents are sealed under ("" before its first write or seal):
    # only `rerender_documents` moves it (archives/db/address.py).
    base_url = models.CharField(max_length=2000, blank=True, default="", editable=False)
    # Its record schema in force (RecordSchema.version; None: none), set under the feed's lock.
    schema_version = models.PositiveIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["slug"]
        indexes = [
            # Serves the sealer's pass (archives.log.sealing.seal_all): only feeds with a full
            # page not sealed yet are in it, so 100,000 feeds with none read an empty index.
            models.Index(fields=["id"], condition=models.Q(NEEDS_SEALING),
                         name="feed_needs_sealing"),
        ]
        constraints = [
            # publishing.check_slug names the feed in the way; this stops what bypasses or races it.
            models.UniqueConstraint(Lower("slug"), name="feed_slug_unique_ignoring_case",
                                    violation_error_message="Another feed has this slug in "
                                                            "another case."),
        ]

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
    def frozen_fields(self) -> list[str]:
        """Fields that may no longer change: all of FROZEN_FIELDS once the feed has an entry."""
        return list(FROZEN_FIELDS) if self.last_seq > 0 else []

    @property
    def deletable(self) -> bool:
        """Whether the feed may be deleted: only before its first entry."""
        return self.last_seq == 0

    @property
    def content_updated(self):
        """The instant the feed's content last changed: its newest entry, else its creation.
        (The feed-level atom:updated of an empty subscription document.)"""
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
    # Of its title and summary (BCP 47), when not the feed's. db_default: a writer naming
    # none (a process of the release before, mid-upgrade) stores none, as on its entries.
    language = models.CharField(max_length=MAX_LANGUAGE_LENGTH, blank=True, default="",
                                db_default="", validators=[validate_language])
    created = models.DateTimeField()
    # The record's last modified time: the `updated` of its newest entry.
    updated = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Its OAI-PMH datestamp: `updated`, or later once its feed moved to another base URL
    # after it (rerender_documents), since its URLs in OAI-PMH changed then.
    datestamp = models.DateTimeField()
    # The version of the feed's record schema its current state was checked under
    # (RecordSchema.version; None: the feed had none). Its entry says the same.
    schema_version = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["feed", "key"]
        constraints = [
            # Serves the record URL and every put/delete: WHERE feed_id = ? AND key = ?
            models.UniqueConstraint(fields=["feed", "key"], name="record_unique_key_per_feed"),
        ]
        indexes = [
            # Serves the API's "changed since" listing: WHERE feed_id = ? ORDER BY updated, id
            models.Index(fields=["feed", "updated", "id"], name="record_feed_updated"),
            # Serve OAI-PMH lists over every feed, and of one (archives/oai/repository.py):
            # WHERE datestamp >= ? AND (datestamp > ? OR id > ?) ORDER BY datestamp, id LIMIT ?
            models.Index(fields=["datestamp", "id"], name="record_datestamp"),
            models.Index(fields=["feed", "datestamp", "id"], name="record_feed_datestamp"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug} / {self.key}"

    def get_absolute_url(self) -> str:
        return reverse("archives:record", args=[self.feed.slug, self.key])

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def atom_id(self) -> str:
        return record_atom_id(self.feed.uuid, self.key)


# The Entry columns that say who made a change (archives.log.access.Actor.entry_values).
ACTOR_COLUMNS = ("user_id", "username", "token_name", "via", "note")


class Entry(models.Model):
    """One change to one record, as it was at that moment. Never updated, never deleted."""

    class Kind(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        DELETE = "delete"

    Via = Via

    # No index of its own: the (feed, seq) constraint's index serves every lookup by feed.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="entries",
                             db_index=False)
    seq = models.BigIntegerField()
    # No index of its own: the (record, seq) index serves every lookup by record.
    record = models.ForeignKey(Record, on_delete=models.PROTECT, related_name="entries",
                               db_index=False)
    kind = models.CharField(max_length=6, choices=Kind.choices)
    updated = models.DateTimeField()
    title = models.CharField(max_length=1000)
    summary = models.TextField(blank=True)
    links = models.JSONField(default=list, blank=True)
    language = models.CharField(max_length=MAX_LANGUAGE_LENGTH, blank=True, default="",
                                db_default="")
    # The record's metadata as it was at this entry, for the linked-pages entities. Null on
    # entries written before it was kept (migration 0005) whose record has changed since.
    metadata = models.JSONField(null=True, blank=True)
    # The feed's schema version (RecordSchema.version) it was checked under; None: none, or deleted.
    schema_version = models.PositiveIntegerField(null=True, blank=True)
    # Who made the change, and why (archives.log.access.Actor), never published. `username`
    # keeps the name the user had, should the user be renamed or deleted. Entries written
    # before these were kept have an unknown actor: no user, and `via` "".
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                             blank=True, related_name="+")
    username = models.CharField(max_length=150, blank=True, default="", db_default="")
    token_name = models.CharField(max_length=100, blank=True, default="", db_default="")
    via = models.CharField(max_length=7, choices=Via.choices, blank=True, default="",
                           db_default="")
    note = models.CharField(max_length=MAX_NOTE_LENGTH, blank=True, default="", db_default="")

    class Meta:
        ordering = ["feed", "seq"]
        verbose_name_plural = "entries"
        constraints = [
            # Serves pages and the subscription document: WHERE feed_id = ? AND seq BETWEEN ..
            # and makes a duplicate seq impossible even if the write path were bypassed.
            models.UniqueConstraint(fields=["feed", "seq"], name="entry_unique_seq_per_feed"),
        ]
        indexes = [
            # Serves a snapshot's cut (a record's newer entry: WHERE record_id = ? AND
            # seq > ? AND seq <= ?), a record's history, and the PROTECT check.
            models.Index(fields=["record", "seq"], name="entry_record_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug} #{self.seq} {self.kind}"

    @property
    def is_deletion(self) -> bool:
        return self.kind == self.Kind.DELETE


class RecordSchema(models.Model):
    """One version of a feed's record schema: a JSON Schema (draft 2020-12) for its records'
    `metadata`. Never changed once written: a change of the feed's schema is a new version
    (archives.log.publishing), and entries name the version they were checked under."""

    # No index of its own: the (feed, version) constraint's index serves every lookup.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="schema_versions",
                             db_index=False)
    version = models.PositiveIntegerField()  # 1, 2, 3 ... per feed
    # The schema as JSON text, not jsonb: PostgreSQL's jsonb reorders an object's names, and
    # a schema's order is what forms, pages and oai_dc follow.
    text = models.TextField()
    created = models.DateTimeField()

    class Meta:
        ordering = ["feed", "version"]
        constraints = [
            # Serves /feeds/<slug>/schema/<version> and the write path: WHERE feed_id, version
            models.UniqueConstraint(fields=["feed", "version"],
                                    name="record_schema_unique_version_per_feed"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug} schema {self.version}"

    def get_absolute_url(self) -> str:
        return reverse("archives:schema-version", args=[self.feed.slug, self.version])

    @property
    def schema(self) -> dict:
        return json.loads(self.text)


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
    # When `body` last changed: sealed, or given its next-archive link (its Last-Modified).
    modified = models.DateTimeField(default=timezone.now)
    # The same entries as linked-pages page `number`: a multipart/mixed body, frozen at
    # seal time (archives/documents/linkedpages.py). Its links are headers, so it never changes.
    multipart = models.BinaryField(null=True)
    # The RSS 2.0 twin of `body` (archives/documents/rss.py), frozen and given its next-archive
    # link with it; null on pages sealed before migration 0007 until sealing.freeze_rss_pages.
    rss = models.BinaryField(null=True)
    # The `modified` of the version in the `feedpub_pages` storage (archives/storage/export.py);
    # null, or behind `modified`, while the current version waits for its export.
    exported = models.DateTimeField(null=True)

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
            # Serves sealing.freeze_linked_pages: WHERE multipart IS NULL (empty once done)
            models.Index(fields=["feed", "number"], condition=models.Q(multipart__isnull=True),
                         name="page_without_multipart"),
            # Serves sealing.freeze_rss_pages: WHERE rss IS NULL (empty once done)
            models.Index(fields=["feed", "number"], condition=models.Q(rss__isnull=True),
                         name="page_without_rss"),
            # Serves export.pending: WHERE (exported IS NULL OR exported < modified) AND
            # modified < ? ORDER BY modified (empty once every page is exported)
            models.Index(fields=["modified"],
                         condition=models.Q(exported__isnull=True)
                         | models.Q(exported__lt=models.F("modified")),
                         name="page_not_exported"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug} page {self.number}"

    def get_absolute_url(self) -> str:
        return reverse("archives:archive", args=[self.feed.slug, self.number])


class Snapshot(models.Model):
    """The live records of a feed as of one entry (`last_seq`), frozen into pages of
    PUT entities (archives/storage/snapshots.py): a linked-pages consumer's entry point."""

    # No index of its own: the (feed, complete, created) index serves every lookup by feed.
    feed = models.ForeignKey(Feed, on_delete=models.PROTECT, related_name="snapshots",
                             db_index=False)
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # The cut: every entry up to this seq, and none after it, is in the snapshot.
    last_seq = models.BigIntegerField()
    # The cut entry's `updated` (none for an empty feed): the index's createdAt, so that a
    # consumer that goes by dates alone skips nothing written after the cut.
    last_updated = models.DateTimeField(null=True)
    records = models.PositiveIntegerField(default=0)  # live as of the cut: one entity each
    pages = models.PositiveIntegerField(default=0)
    created = models.DateTimeField()
    # Set once every page is stored: only complete snapshots are served.
    complete = models.BooleanField(default=False)
    # When it was completed: the snapshot before it is superseded from then on, and kept
    # FEEDPUB_SNAPSHOT_GRACE_SECONDS more for readers half-way through it.
    completed_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["feed", "-created"]
        indexes = [
            # Serves /snapshots/latest: WHERE feed_id = ? AND complete ORDER BY created DESC
            models.Index(fields=["feed", "complete", "created"], name="snapshot_feed_latest"),
        ]
        constraints = [
            # One unfinished snapshot a feed, which the next start resumes: sealers that
            # crash again and again cannot pile them up.
            models.UniqueConstraint(fields=["feed"], condition=models.Q(complete=False),
                                    name="snapshot_one_unfinished_per_feed"),
        ]

    def __str__(self) -> str:
        return f"{self.feed.slug} snapshot {self.uuid} (entry {self.last_seq})"


class SnapshotPage(models.Model):
    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="page_set",
                                 db_index=False)
    number = models.PositiveIntegerField()
    body = models.BinaryField()
    etag = models.CharField(max_length=80)
    last_modified = models.DateTimeField()  # its last entity's

    class Meta:
        ordering = ["snapshot", "number"]
        constraints = [
            # Serves the snapshot page URL: WHERE snapshot_id = ? AND number = ?
            models.UniqueConstraint(fields=["snapshot", "number"],
                                    name="snapshot_page_unique_number"),
        ]

    def __str__(self) -> str:
        return f"{self.snapshot} page {self.number}"


from .access import ApiToken, FeedRole  # noqa: E402  (they name Feed)
from .push import Heartbeat, Subscription, subscription_formats  # noqa: E402

__all__ = [
    "ACTOR_COLUMNS", "FROZEN_FIELDS", "MAX_PAGE_SIZE", "NEEDS_SEALING", "ApiToken", "ArchivePage",
    "Entry", "Feed", "FeedRole", "Heartbeat", "Record", "RecordSchema", "Snapshot",
    "SnapshotPage", "Subscription", "Via", "default_language", "default_page_size",
    "subscription_formats", "validate_language",
]
