"""Shapes of the API's bodies. Every record rule lives in archives.validation: these
serializers hand the body to it and translate its errors, so the API, the admin and the
write path refuse exactly the same things. Declared fields describe the OpenAPI schema."""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from archives import validation
from archives.conf import settings
from archives.db import schemas
from archives.documents.records import record_json
from archives.documents.urls import schema_url
from archives.log.publishing import MAX_BATCH_OPERATIONS
from archives.models import Feed, Record

from . import schema
from .exceptions import as_drf

VIEW_DELETED_PERM = "archives.view_record"


# The JSON type each kind of declared field stands for in the schema (a CharField is
# `type: string`), and what a value of another type is told.
JSON_TYPES = (
    (serializers.BooleanField, bool, "Must be true or false."),
    (serializers.IntegerField, int, "Must be an integer."),
    (serializers.CharField, str, "Must be a string."),
)


def wrong_type(field: serializers.Field, value: Any) -> str | None:
    """Why `value` is not of the JSON type `field` is declared with in the schema, or
    None. DRF's own fields take more (a CharField 0 as "0", an IntegerField "10" or
    10.0), which the schema forbids: the declaration is the rule, for both."""
    if value is None and field.allow_null:
        return None
    for kind, python_type, message in JSON_TYPES:
        if isinstance(field, kind):
            exact = isinstance(value, python_type) and (
                python_type is bool or not isinstance(value, bool))
            return None if exact else message
    return None


class StrictFieldsMixin(serializers.Serializer):
    """Refuse fields the body may not set, instead of silently ignoring them, and values
    of another JSON type than the field's."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(set(data) - writable)
            if unknown:
                raise serializers.ValidationError({
                    str(name): [f"Unknown or read-only field; this body takes only "
                                f"{', '.join(sorted(writable))}."]
                    for name in unknown
                })
            mistyped = {name: [why] for name, value in data.items()
                        if (why := wrong_type(self.fields[name], value))}
            if mistyped:
                raise serializers.ValidationError(mistyped)
        return super().to_internal_value(data)


# The patterns of archives.validation's text rules, for the schema: the record serializers
# hand the body whole to validation, and FeedSerializer runs clean_feed_text first.
XML_TEXT = RegexValidator(validation.XML_TEXT_PATTERN)
NON_BLANK_XML_TEXT = RegexValidator(validation.NON_BLANK_XML_TEXT_PATTERN)

# Metadata as the schema says it (archives.api.schema.metadata_values): an object whose
# strings, at any depth, are XML text. (Its names are too, which OpenAPI 3.0 cannot say:
# it has no propertyNames.)
METADATA_SCHEMA = {"type": "object", "additionalProperties": {"$ref": schema.METADATA_VALUE}}


@extend_schema_field(METADATA_SCHEMA)
class MetadataField(serializers.DictField):
    pass


@extend_schema_field(METADATA_SCHEMA | {"properties": schema.RECORD_SCHEMA_KEYWORDS})
class RecordSchemaField(serializers.JSONField):
    """The feed's record schema in force, read from its versions; what a write sets is
    checked by the write path (archives.validation.check_record_schema), not here: the
    schema says what it can of that rule (a JSON object, its `$schema` and `type`)."""

    def get_attribute(self, feed: Feed) -> Any:
        return schemas.current_schema(feed)


class FeedSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    atom_id = serializers.CharField(read_only=True, help_text="The feed's atom:id.")
    url = serializers.SerializerMethodField(help_text="The subscription document (Atom).")
    records = serializers.SerializerMethodField(help_text="The feed's records in this API.")
    entries = serializers.IntegerField(
        source="last_seq", read_only=True,
        help_text="Entries appended so far (the seq of the newest).")
    updated = serializers.DateTimeField(
        source="last_updated", read_only=True, allow_null=True,
        help_text="The time of the newest entry.")
    record_schema = RecordSchemaField(
        required=False, allow_null=True,
        help_text=validation.SCHEMA_HELP + " Refused (409) while live records do not match it.")
    schema = serializers.SerializerMethodField(
        help_text="The URL of the version of record_schema in force (its describedby link; "
                  "each record names the version it was checked under); null without one.")
    record_schema_warnings = serializers.SerializerMethodField(
        help_text="What may surprise in record_schema, which is taken all the same: a "
                  "property named like a record's own field (title, summary, key, links...), "
                  "which a record then holds apart from its own. Empty when nothing.")

    class Meta:
        model = Feed
        fields = ["slug", "title", "subtitle", "author", "language", "page_size", "atom_id",
                  "url", "records", "entries", "sealed_pages", "updated", "created",
                  "record_schema", "schema", "record_schema_warnings"]
        read_only_fields = ["sealed_pages", "created"]
        extra_kwargs = {
            # No UniqueValidator of the exact slug: the write path refuses a slug another
            # feed has, in any case, naming that feed (publishing.SlugTaken: a 409).
            "slug": {"help_text": "The feed's URL name (letters, digits, - and _), unique "
                                  "whatever the case; fixed once the feed has an entry.",
                     "validators": []},
            "page_size": {"help_text": "Entries per archive page; fixed once the feed has "
                                       "an entry."},
            # The text archives.validation.clean_feed_text checks (before these, which
            # only give the schema its patterns).
            "title": {"validators": [NON_BLANK_XML_TEXT]},
            "subtitle": {"validators": [XML_TEXT]},
            "author": {"validators": [NON_BLANK_XML_TEXT]},
        }

    def get_url(self, feed: Feed) -> str:
        return settings.FEEDPUB_BASE_URL + feed.get_absolute_url()

    def get_schema(self, feed: Feed) -> str | None:
        if feed.schema_version is None:
            return None
        return schema_url(feed.slug, feed.schema_version)

    def get_record_schema_warnings(self, feed: Feed) -> list[str]:
        return validation.schema_warnings(schemas.current_schema(feed))

    def get_records(self, feed: Feed) -> str:
        return self._absolute(reverse("api:record-list", args=[feed.slug]))

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # The body as sent, before CharField trims it: "a\u000b" must be refused, not
        # stored as "a" (validation's rule, the same as for records and the admin).
        if isinstance(data, dict):
            try:
                validation.clean_feed_text(data)
            except DjangoValidationError as error:
                raise as_drf(error) from None
        return super().to_internal_value(data)

    def _absolute(self, path: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


class LinkSerializer(serializers.Serializer):
    """A link as archives.validation takes it (null or "" for rel, type or title is the
    same as leaving it out)."""

    href = serializers.CharField(max_length=validation.MAX_HREF_LENGTH,
                                 validators=[RegexValidator(validation.ABSOLUTE_URI_PATTERN)],
                                 help_text="An absolute http, https, urn or tag URI.")
    rel = serializers.CharField(required=False, default="alternate", allow_null=True,
                                allow_blank=True, max_length=validation.MAX_HREF_LENGTH,
                                validators=[RegexValidator(validation.REL_PATTERN)],
                                help_text="A relation name or an absolute URI.")
    type = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                 validators=[RegexValidator(validation.MEDIA_TYPE_PATTERN)],
                                 help_text="A media type, type/subtype.")
    title = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                  max_length=validation.MAX_TITLE_LENGTH,
                                  validators=[XML_TEXT])


class RecordFields(serializers.Serializer):
    """A record's fields, as the two serializers below take them."""

    title = serializers.CharField(max_length=validation.MAX_TITLE_LENGTH,
                                  validators=[NON_BLANK_XML_TEXT])
    summary = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                    max_length=validation.MAX_SUMMARY_LENGTH,
                                    validators=[XML_TEXT])
    metadata = MetadataField(
        required=False, help_text=f"Any JSON object, at most {validation.MAX_METADATA_BYTES} "
                                  "bytes; every string, names included, must be XML 1.0 text.")
    links = serializers.ListField(child=LinkSerializer(), required=False,
                                  max_length=validation.MAX_LINKS,
                                  help_text=f"At most {validation.MAX_LINKS} links.")
    language = serializers.RegexField(
        validation.LANGUAGE_PATTERN, required=False, allow_blank=True, allow_null=True,
        max_length=validation.MAX_LANGUAGE_LENGTH,
        help_text="The language of its title and summary, a BCP 47 tag such as de or pt-BR, "
                  "when not its feed's (empty or left out: the feed's).")


class RecordBodySerializer(RecordFields):
    """A record as a producer sends it (PUT, and `record` in a batch put)."""

    def to_internal_value(self, data: Any) -> validation.RecordData:
        try:
            return validation.clean_record(data)
        except DjangoValidationError as error:
            raise as_drf(error) from None


class RecordPatchSerializer(RecordFields):
    """Some of a record's fields; each one given replaces the stored one whole."""

    title = serializers.CharField(required=False, max_length=validation.MAX_TITLE_LENGTH,
                                  validators=[NON_BLANK_XML_TEXT])

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"body": ["A record patch is a JSON object."]})
        return data  # checked whole, merged with the stored record, by the view


class TombstoneSerializer(serializers.Serializer):
    """A deleted record as shown to those without archives.view_record: that it existed
    and when it went, as the Atom deletion entry and the public URL's 410 tell anyone."""

    key = serializers.CharField()
    atom_id = serializers.CharField(help_text="urn:uuid, stable across hosts.")
    # The format of every timestamp of the API and the documents (RFC 3339, UTC, µs).
    updated = serializers.DateTimeField(format="%Y-%m-%dT%H:%M:%S.%fZ", default_timezone=UTC,
                                        help_text="When it was deleted.")
    deleted = serializers.BooleanField(source="is_deleted")


class RecordSerializer(serializers.Serializer):
    """A record as the API answers it: the same JSON as the record's own URL. A deleted
    record is a tombstone (key, atom_id, updated, deleted) unless the request's user may
    view records (archives.view_record): deleting takes a record out of public view."""

    key = serializers.CharField()
    atom_id = serializers.CharField(help_text="urn:uuid, stable across hosts.")
    # Not in a tombstone (required=False says so in the schema).
    title = serializers.CharField(required=False)
    summary = serializers.CharField(required=False)
    metadata = serializers.DictField(required=False)
    links = LinkSerializer(many=True, required=False)
    language = serializers.CharField(
        required=False, help_text="Its own language (BCP 47); absent: its feed's.")
    created = serializers.DateTimeField(required=False)
    updated = serializers.DateTimeField(
        help_text="The time of the record's newest entry (its atom:updated).")
    deleted = serializers.BooleanField()
    url = serializers.URLField(required=False,
                               help_text="The record's public URL (Atom entry or JSON).")
    schema = serializers.URLField(
        required=False, help_text="The version of its feed's record schema the record was "
                                  "checked under (absent when the feed had none).")

    def to_representation(self, record: Record) -> dict[str, Any]:
        if record.is_deleted and not self._may_view_deleted():
            return TombstoneSerializer(record).data
        return record_json(record)

    def _may_view_deleted(self) -> bool:
        # No request in the context: nobody to show more than the tombstone to. (The
        # auth backend caches a user's permissions: one query per request, not per item.)
        user = getattr(self.context.get("request"), "user", None)
        return bool(user and user.has_perm(VIEW_DELETED_PERM))


# RFC 3339's date-time (section 5.6), what OpenAPI's `format: date-time` means: DRF's
# DateTimeField would also take a date alone, a space for the T, or no offset at all.
RFC3339_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


class QueryValue(serializers.Field):
    """A query parameter read as given: DRF reads a query string as a form, where an
    empty value (`?updated_since=`) counts as not given; here it is refused."""

    def get_value(self, dictionary):
        return dictionary.get(self.field_name, serializers.empty)


class Rfc3339Field(QueryValue, serializers.DateTimeField):
    def to_internal_value(self, value: Any):
        if not isinstance(value, str) or not RFC3339_RE.fullmatch(value):
            self.fail("invalid", format="an RFC 3339 date-time such as 2026-11-22T16:56:03Z")
        return super().to_internal_value(value)


class QueryBooleanField(QueryValue, serializers.BooleanField):
    """`true` or `false`, as OpenAPI writes a boolean in a query (DRF would also take
    yes, on, 1 and the like)."""

    def to_internal_value(self, value: Any) -> bool:
        if value not in ("true", "false"):
            self.fail("invalid")
        return value == "true"


class RecordFilterSerializer(serializers.Serializer):
    """The record list's query parameters."""

    deleted = QueryBooleanField(required=False, default=None)
    updated_since = Rfc3339Field(required=False)


class OperationSerializer(serializers.Serializer):
    op = serializers.ChoiceField(choices=["put", "delete"])
    key = serializers.CharField(max_length=validation.MAX_KEY_LENGTH,
                                validators=[RegexValidator(validation.KEY_PATTERN)])
    record = RecordBodySerializer(required=False, help_text="Only with op=put.")


class BatchSerializer(serializers.Serializer):
    operations = serializers.ListField(
        child=OperationSerializer(), min_length=1, max_length=MAX_BATCH_OPERATIONS,
        help_text=f"1 to {MAX_BATCH_OPERATIONS}, applied in order.")

    def to_internal_value(self, data: Any) -> list[Any]:
        # Each operation is parsed by publishing.apply_batch, which names bad ones by index.
        if not isinstance(data, dict):
            raise serializers.ValidationError({"body": ["A batch is a JSON object."]})
        unknown = sorted(set(data) - {"operations"})
        if unknown:
            raise serializers.ValidationError(
                {name: ["Unknown field; a batch has only operations."] for name in unknown})
        if not isinstance(data.get("operations"), list):
            raise serializers.ValidationError({"operations": ["A list of operations is required."]})
        return data["operations"]


class BatchResultSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    op = serializers.CharField()
    key = serializers.CharField()
    changed = serializers.BooleanField(help_text="False when the operation changed nothing.")
    seq = serializers.IntegerField(allow_null=True, help_text="The seq of its entry, if any.")


class BatchAnswerSerializer(serializers.Serializer):
    applied = serializers.IntegerField(help_text="Entries appended.")
    results = BatchResultSerializer(many=True)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, for a person.")
    # (The serializer's metaclass takes its fields out of the class: Serializer.errors is
    # left as it is, which mypy cannot see.)
    errors = serializers.DictField(  # type: ignore[assignment]
        required=False,
        help_text="Each refused field (for a batch: operations -> index -> field) with "
                  "the reasons, e.g. {\"title\": [\"Must not be blank.\"]}.")


class RootSerializer(serializers.Serializer):
    """/api/: the API's roots."""

    feeds = serializers.URLField(help_text="The feeds (GET to list, POST to create one).")
    schema = serializers.URLField(help_text="This API's OpenAPI 3 schema.")
    docs = serializers.URLField(help_text="The API's documentation: Swagger UI, where each "
                                          "operation can be tried out.")
