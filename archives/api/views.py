"""The producer API. Thin: parse the request, call archives.log.publishing, shape the answer.

Errors are raised as exceptions and shaped by `exceptions.handle`, so every refusal is
the same JSON whatever raised it (a serializer, the validation rules, the write path).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.cache import get_conditional_response
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticatedOrReadOnly
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from archives import validation
from archives.documents import atom
from archives.log import publishing
from archives.models import Entry, Feed, Record
from archives.parameters import RepeatedParameter, refuse_repeated
from archives.validation import RECORD_FIELDS, clean_key

from . import examples
from .actors import NOTE_HEADER, actor_of
from .exceptions import Conflict, Invalid
from .pagination import BoundedCursor, FeedCursor, RecordCursor
from .parsers import require_length
from .permissions import FeedPermissions
from .policy import ApiPolicy
from .serializers import (
    BatchAnswerSerializer,
    BatchSerializer,
    ErrorSerializer,
    FeedSerializer,
    RecordBodySerializer,
    RecordFilterSerializer,
    RecordPatchSerializer,
    RecordSerializer,
    RootSerializer,
)

ERRORS = {
    400: "Invalid input; `errors` names each field and why. Nothing was written.",
    401: "No credentials, or a token that is unknown, expired or revoked (send "
         "`Authorization: Bearer <token>`).",
    403: "The user, or the token, may not make this change: the answer names the feed and "
         "the role it needs (producer of the feed for its records, maintainer for its "
         "settings, record schema and members; site administration to create or delete "
         "feeds), or says that the token is read-only or scoped to other feeds.",
    404: "No such feed or record.",
    406: "The Accept header asks for no type this API answers in (JSON, or the "
         "browsable API's HTML).",
    409: "The server's data forbids the change: another feed has the slug (in any case), "
         "the feed has entries (its slug and page size are fixed, it cannot be deleted), "
         "live records do not match the record schema, the record is deleted, or (a put) "
         "the feed's record schema was stored before feedpub bounded what checking a record "
         "may cost and is over those bounds, until its maintainer sets a new one.",
    411: "The body came chunked (Transfer-Encoding) without a Content-Length.",
    412: "If-Match does not match the record's current ETag: it changed meanwhile.",
    413: "The body is larger than FEEDPUB_API_MAX_BODY_BYTES (10 MiB by default).",
    415: "The body is not application/json (its Content-Type says so).",
    429: "Too many requests from this client (FEEDPUB_API_ANON_RATE, FEEDPUB_API_USER_RATE); "
         "retry after the seconds given in Retry-After.",
    503: "The database is unavailable; retry after the seconds given in Retry-After.",
}
# Any request may ask for a type we do not answer in, be throttled or meet a lost
# database; any body may be refused unread.
ANY = (406, 429, 503)
BODY = (411, 413, 415)
IF_MATCH = OpenApiParameter(
    "If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER,
    description="The record's ETag as last read: the write happens only if it is still "
                "current (else 412).",
)
CHANGE_NOTE = OpenApiParameter(
    NOTE_HEADER, {"type": "string", "maxLength": validation.MAX_NOTE_LENGTH},
    OpenApiParameter.HEADER,
    description="Why the change is made, in a few words (UTF-8, at most "
                f"{validation.MAX_NOTE_LENGTH} characters, no character XML cannot hold; "
                "else 400 naming `note`). Kept with the entry in the change history, for "
                "the feed's producers and maintainers; never published.",
)


def errors(*codes: int, invalid: dict[str, Any] | None = None,
           conflict: dict[str, Any] | None = None) -> dict[int, OpenApiResponse]:
    """The refusals an operation may answer, each with an example (`invalid`: the 400's,
    `conflict`: the 409's)."""
    shown = (examples.ERRORS | ({400: invalid} if invalid else {})
             | ({409: conflict} if conflict else {}))
    return {code: OpenApiResponse(ErrorSerializer, ERRORS[code],
                                  examples=[OpenApiExample(f"{code}", value=shown[code])])
            for code in (*codes, *ANY)}


@extend_schema(tags=["api"])
class Root(ApiPolicy, APIView):
    """/api/: where everything of the API starts, for people (the browsable API) and
    programs (JSON, and RFC 8631's service-desc and service-doc links)."""

    # Public addresses, no model behind them to check permissions against.
    permission_classes = [AllowAny]

    @extend_schema(summary="The API's roots: feeds, schema, docs",
                   responses={200: RootSerializer, **errors()}, examples=examples.ROOT)
    def get(self, request: Request) -> Response:
        links = {name: request.build_absolute_uri(reverse(route))
                 for name, route in (("feeds", "api:feed-list"), ("schema", "api:schema"),
                                     ("docs", "api:swagger-ui"))}
        return Response(links, headers={"Link": f'<{links["schema"]}>; rel="service-desc", '
                                                f'<{links["docs"]}>; rel="service-doc"'})


class ApiView(ApiPolicy, generics.GenericAPIView):
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Before anything else: a body we cannot read must not pass for an empty one.
        require_length(request)
        # Every query parameter of the schema is one value: `page_size=5&page_size=x`
        # would otherwise be read as its last value and the rest ignored. (Others are
        # not read at all.)
        try:
            refuse_repeated(request.query_params, self.query_parameters())
        except RepeatedParameter as error:
            raise Invalid({name: ["Given more than once; give it once."]
                           for name in error.names}, str(error)) from None
        super().initial(request, *args, **kwargs)

    def query_parameters(self) -> set[str]:
        """The query parameters this view reads: its list's, and its filters'."""
        paginator = self.paginator
        names = {paginator.cursor_query_param, paginator.page_size_query_param} if (
            isinstance(paginator, BoundedCursor)) else set()
        return names | set(self.filters().fields if self.filters else ())

    filters: type[serializers.Serializer] | None = None


@extend_schema(tags=["feeds"])
class FeedList(ApiView):
    permission_classes = [FeedPermissions]
    queryset = Feed.objects.all()
    serializer_class = FeedSerializer
    pagination_class = FeedCursor

    @extend_schema(summary="List feeds",
                   responses={200: FeedSerializer(many=True), **errors(400)},
                   examples=examples.FEED_ANSWER)
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(summary="Create a feed",
                   description="For site administrators. A slug another feed has, in "
                               "any case, is refused (409, naming that feed).",
                   responses={201: FeedSerializer,
                              **errors(400, 401, 403, 409, *BODY,
                                       conflict=examples.CREATE_CONFLICT)},
                   examples=examples.FEED_CREATE + examples.FEED_ANSWER)
    def post(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        feed = publishing.create_feed(**serializer.validated_data)
        return Response(self.get_serializer(feed).data, status=status.HTTP_201_CREATED,
                        headers={"Location": reverse("api:feed-detail", args=[feed.slug]),
                                 **_schema_link(feed)})


@extend_schema(tags=["feeds"], parameters=[examples.SLUG_PARAMETER])
class FeedDetail(ApiView):
    permission_classes = [FeedPermissions]  # changing: maintainers too
    queryset = Feed.objects.all()
    serializer_class = FeedSerializer
    lookup_field = "slug"
    http_method_names = ["get", "patch", "delete", "head", "options"]

    @extend_schema(summary="Read a feed", responses={200: FeedSerializer, **errors(404)},
                   examples=examples.FEED_ANSWER)
    def get(self, request: Request, slug: str) -> Response:
        feed = self.get_object()
        return Response(self.get_serializer(feed).data, headers=_schema_link(feed))

    @extend_schema(
        summary="Change a feed",
        description="For the feed's maintainers and site administrators. "
                    "`slug` and `page_size` cannot change once the feed has an entry (409): "
                    "its record, archive and snapshot URLs, its OAI-PMH set and its pages' "
                    "ranges are promised from then on. A slug another feed has, in any "
                    "case, is refused (409, naming that feed).",
        responses={200: FeedSerializer, **errors(400, 401, 403, 404, 409, *BODY)},
        examples=examples.FEED_CHANGE + examples.FEED_ANSWER,
    )
    def patch(self, request: Request, slug: str) -> Response:
        feed = self.get_object()
        serializer = self.get_serializer(feed, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        # A change the feed's entries forbid is a FeedPromised: 409 (exceptions.handle).
        feed = publishing.update_feed(feed=feed, **serializer.validated_data)
        return Response(self.get_serializer(feed).data, headers=_schema_link(feed))

    @extend_schema(
        summary="Delete a feed",
        description="For site administrators. "
                    "Deletes a feed that has no entry yet. A feed with entries cannot be "
                    "deleted (409): delete its records instead, each keeps a deletion "
                    "entry (OAI-PMH's deletedRecord=persistent).",
        responses={204: None, **errors(401, 403, 404, 409)},
    )
    def delete(self, request: Request, slug: str) -> Response:
        publishing.delete_feed(feed=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class FeedMixin:
    kwargs: dict[str, Any]  # the URL's, set by the view it is mixed into

    def get_feed(self) -> Feed:
        return get_object_or_404(Feed, slug=self.kwargs["slug"])


@extend_schema(tags=["records"], parameters=[
    examples.RECORDS_SLUG_PARAMETER,
    OpenApiParameter("deleted", OpenApiTypes.BOOL,
                     description="true: only deleted records (tombstones unless the user "
                                 "has archives.view_record); false: only live ones."),
    OpenApiParameter("updated_since", OpenApiTypes.DATETIME,
                     description="Only records whose `updated` is at or after this instant "
                                 "(RFC 3339)."),
])
class RecordList(FeedMixin, ApiView):
    """A feed's records, oldest change first (cursor-paginated; follow `next`)."""

    queryset = Record.objects.all()
    serializer_class = RecordSerializer
    pagination_class = RecordCursor
    filters = RecordFilterSerializer

    def get_queryset(self):
        return Record.objects.filter(feed=self.get_feed()).select_related("feed")

    @extend_schema(summary="List a feed's records",
                   responses={200: RecordSerializer(many=True), **errors(400, 404)},
                   examples=examples.RECORD_LIST_ANSWER)
    def get(self, request: Request, slug: str) -> Response:
        filters = self.filters(data=request.query_params)
        filters.is_valid(raise_exception=True)
        records = self.get_queryset()
        if filters.validated_data["deleted"] is not None:
            records = records.filter(deleted_at__isnull=not filters.validated_data["deleted"])
        if "updated_since" in filters.validated_data:
            records = records.filter(updated__gte=filters.validated_data["updated_since"])
        page = self.paginate_queryset(records)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


@extend_schema(tags=["records"],
               parameters=[examples.RECORDS_SLUG_PARAMETER, examples.KEY_PARAMETER])
class RecordDetail(FeedMixin, ApiView):
    """One record by its key. Every answer carries the record's ETag."""

    # Who may write which feed is the write path's to check, under the feed's lock.
    permission_classes = [IsAuthenticatedOrReadOnly]
    queryset = Record.objects.all()
    serializer_class = RecordSerializer

    def get_serializer_class(self):
        # What the browsable API offers as the form for each method.
        if self.request is not None and self.request.method == "PATCH":
            return RecordPatchSerializer
        if self.request is not None and self.request.method == "PUT":
            return RecordBodySerializer
        return RecordSerializer

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # After the permission checks, before any query: a key that could never be
        # stored is a 400 for every method (and a NUL would be a 500 on PostgreSQL).
        clean_key(self.kwargs["key"])

    def get_object(self) -> Record:
        return get_object_or_404(Record.objects.select_related("feed"),
                                 feed__slug=self.kwargs["slug"], key=self.kwargs["key"])

    @extend_schema(
        summary="Read a record",
        description="Deleted records are answered too: in full, with `deleted: true`, to "
                    "users with archives.view_record, else as a tombstone (`key`, "
                    "`atom_id`, `updated`, `deleted`). `If-None-Match` with the current "
                    "ETag answers 304.",
        responses={200: RecordSerializer, 304: None, **errors(400, 404)},
        examples=examples.RECORD_ANSWER,
    )
    def get(self, request: Request, slug: str, key: str) -> Response:
        record = self.get_object()
        etag = publishing.record_etag(record)
        if get_conditional_response(request, etag=etag) is not None:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=_etag_header(etag))
        return _record_answer(request, record)

    @extend_schema(
        summary="Create or replace a record",
        description="201 when the key is new, else 200. A PUT identical to the stored "
                    "record appends no entry; a PUT of a deleted record restores it. "
                    "For the feed's producers and maintainers.",
        request=RecordBodySerializer, parameters=[IF_MATCH, CHANGE_NOTE],
        responses={200: RecordSerializer, 201: RecordSerializer,
                   **errors(400, 401, 403, 404, 409, 412, *BODY,
                            conflict=examples.PUT_CONFLICT)},
        examples=examples.RECORD_PUT + examples.RECORD_ANSWER,
    )
    def put(self, request: Request, slug: str, key: str) -> Response:
        body = RecordBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # By slug: the feed is read once, under the write's lock (no feed: 404), with what
        # the actor's rights on it depend on.
        entry = publishing.put_record(feed=slug, key=key, data=body.validated_data,
                                      if_match=request.headers.get("If-Match"),
                                      actor=actor_of(request, "api"))
        record = entry.record if entry else self.get_object()
        created = entry is not None and entry.kind == Entry.Kind.CREATE and (
            record.created == entry.updated)
        return _record_answer(request, record, created=created)

    @extend_schema(
        summary="Change some fields of a record",
        description="Each field given replaces the stored one whole (metadata too); the "
                    "result must be a valid record. A deleted record is not patched (409): "
                    "PUT it to restore it.",
        request=RecordPatchSerializer, parameters=[IF_MATCH, CHANGE_NOTE],
        responses={200: RecordSerializer, **errors(400, 401, 403, 404, 409, 412, *BODY)},
        examples=examples.RECORD_PATCH + examples.RECORD_ANSWER,
    )
    def patch(self, request: Request, slug: str, key: str) -> Response:
        patch = RecordPatchSerializer(data=request.data)
        patch.is_valid(raise_exception=True)
        actor = actor_of(request, "api")
        if_match = request.headers.get("If-Match")
        # Merge with the stored record and write only if it is still what was merged
        # with; a concurrent writer makes us merge again (the client's own If-Match, if
        # it sent one, is checked against the stored record instead: 412, no retry).
        for _attempt in range(5):
            record = self.get_object()
            if record.is_deleted:
                raise Conflict(DjangoValidationError(
                    {"key": ["This record is deleted; PUT it to restore it."]}))
            merged = {name: getattr(record, name) for name in RECORD_FIELDS} | patch.validated_data
            body = RecordBodySerializer(data=merged)
            body.is_valid(raise_exception=True)
            guard = if_match if if_match and if_match.strip() != "*" else (
                publishing.record_etag(record))
            try:
                entry = publishing.put_record(feed=record.feed, key=key, actor=actor,
                                              data=body.validated_data, if_match=guard)
            except publishing.PreconditionFailed:
                if guard == if_match:
                    raise
                continue
            return _record_answer(request, entry.record if entry else self.get_object())
        raise publishing.PreconditionFailed("The record kept changing; try again.")

    @extend_schema(
        summary="Delete a record",
        description="Appends a deletion entry (the record stays readable: as a tombstone, "
                    "or whole to users with archives.view_record). Deleting a deleted record "
                    "appends nothing (204).",
        parameters=[IF_MATCH, CHANGE_NOTE],
        responses={204: None, **errors(400, 401, 403, 404, 412)},
    )
    def delete(self, request: Request, slug: str, key: str) -> Response:
        publishing.delete_record(feed=slug, key=key, if_match=request.headers.get("If-Match"),
                                 actor=actor_of(request, "api"))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["records"], parameters=[examples.RECORDS_SLUG_PARAMETER])
class Batch(FeedMixin, ApiView):
    # Anonymous clients are refused before anything is read; who may write the feed is the
    # write path's to check, under the feed's lock, once the operations are parsed.
    permission_classes = [IsAuthenticatedOrReadOnly]
    serializer_class = BatchSerializer

    @extend_schema(
        summary="Apply many puts and deletes at once",
        description=(
            f"Up to {publishing.MAX_BATCH_OPERATIONS} operations, applied in order, all or "
            "nothing, in one transaction. A refused batch changes nothing and its `errors` "
            "name each bad operation by index: {\"operations\": {\"3\": {\"key\": [...]}}}. "
            "For the feed's producers and maintainers. An empty batch is refused (400)."
        ),
        request=BatchSerializer, parameters=[CHANGE_NOTE],
        responses={200: BatchAnswerSerializer,
                   **errors(400, 401, 403, 404, 409, *BODY, invalid=examples.BATCH_INVALID,
                            conflict=examples.PUT_CONFLICT)},
        examples=examples.BATCH,
    )
    def post(self, request: Request, slug: str) -> Response:
        feed = self.get_feed()  # first: an unknown feed is a 404 whatever the body
        batch = BatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        operations = batch.validated_data
        entries = publishing.apply_batch(feed=feed, operations=operations,
                                         actor=actor_of(request, "batch"))
        results = [
            {"index": index, "op": operation["op"], "key": operation["key"],
             "changed": entry is not None, "seq": entry.seq if entry else None}
            for index, (operation, entry) in enumerate(zip(operations, entries, strict=True))
        ]
        applied = sum(entry is not None for entry in entries)
        return Response({"applied": applied, "results": results})


def _schema_link(feed: Feed) -> dict[str, str]:
    """The feed's record schema in force as a Link header (rel="describedby"), as the
    subscription document links it; nothing while the feed has none."""
    links = atom.schema_links(feed.slug, feed.schema_version)
    return {"Link": atom.link_header(links)} if links else {}


def _etag_header(etag: str | None) -> dict[str, str]:
    return {} if etag is None else {"ETag": etag}  # (a record's is never None)


def _record_answer(request: Request, record: Record, *, created: bool = False) -> Response:
    headers = _etag_header(publishing.record_etag(record))
    if created:
        headers["Location"] = reverse("api:record-detail", args=[record.feed.slug, record.key])
    data = RecordSerializer(record, context={"request": request}).data
    return Response(data, headers=headers,
                    status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

