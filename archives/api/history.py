"""Who changed a record, and why: `GET /api/feeds/<slug>/records/<key>/history`.

For those who may write the feed's records and for site administrators only
(archives.log.access.check_history); nothing of it is ever in a public document.

The whole history in one answer, newest first, not in pages of a cursor: it is one
record's own changes, read in one range of the (record, seq) index, and whoever reads it
(a person comparing versions, a script looking for who made a change) wants all of it. A
record with 10,000 versions answers in a few tens of milliseconds (bench/history.py,
docs/performance/history.md). Rows are read as tuples of the few columns the answer shows
and shaped by one function: a serializer per entry would cost more than the query.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from archives.formats import rfc3339
from archives.log import access
from archives.models import ApiToken, Entry, Record, Via
from archives.validation import clean_key

from . import examples
from .serializers import ErrorSerializer
from .views import ApiView, FeedMixin, errors


class HistoryRow(NamedTuple):
    """The columns of an entry the history shows: its query reads these and no others."""

    seq: int
    kind: str
    updated: datetime
    username: str
    token_name: str
    via: str
    note: str


def entry_json(row: HistoryRow) -> dict[str, Any]:
    """One entry as the history shows it. Entries written before actors were kept (`via`
    "") have an unknown actor: null, not a made-up one."""
    actor = None if not row.via else {
        "user": row.username or None, "token": row.token_name or None, "via": row.via}
    return {"seq": row.seq, "kind": row.kind, "updated": rfc3339(row.updated),
            "actor": actor, "note": row.note}


def history(record_id: int) -> list[dict[str, Any]]:
    """The record's entries, newest first (served by the index entry_record_seq)."""
    rows = (Entry.objects.filter(record_id=record_id).order_by("-seq")
            .values_list(*HistoryRow._fields))
    return [entry_json(HistoryRow(*row)) for row in rows]


class ActorSerializer(serializers.Serializer):
    user = serializers.CharField(
        allow_null=True, help_text="The user's name as it was then; null: the operator "
                                   "(a management command run without --user).")
    token = serializers.CharField(allow_null=True,
                                  help_text="The name of the API token used, if any.")
    via = serializers.ChoiceField(choices=[door.value for door in Via],
                                  help_text="The door the change came in by.")


class HistoryEntrySerializer(serializers.Serializer):
    seq = serializers.IntegerField(help_text="The entry's place in the feed's log.")
    kind = serializers.ChoiceField(choices=Entry.Kind.values)
    updated = serializers.DateTimeField(help_text="When the change was made (RFC 3339, UTC).")
    actor = ActorSerializer(allow_null=True,
                            help_text="Who made the change; null when unknown (entries "
                                      "written before feedpub kept it).")
    note = serializers.CharField(allow_blank=True,
                                 help_text="Why, as the writer said it; empty when not given.")


class HistorySerializer(serializers.Serializer):
    """The schema of the answer (the view shapes it with entry_json)."""

    feed = serializers.CharField(help_text="The feed's slug.")
    key = serializers.CharField(help_text="The record's key.")
    entries = HistoryEntrySerializer(many=True, help_text="Newest first.")


REFUSALS = {
    401: OpenApiResponse(ErrorSerializer, "No credentials: the history is not public.",
                         examples=[OpenApiExample("401", value=examples.ERRORS[401])]),
    403: OpenApiResponse(ErrorSerializer,
                         "The user is no producer or maintainer of the feed (nor a site "
                         "administrator), or the token is not scoped to the feed.",
                         examples=[OpenApiExample("403", value=examples.HISTORY_REFUSED)]),
}


@extend_schema(tags=["records"],
               parameters=[examples.RECORDS_SLUG_PARAMETER, examples.KEY_PARAMETER])
class RecordHistory(FeedMixin, ApiView):
    """Who changed a record, when, by which door, and why."""

    permission_classes = [IsAuthenticated]
    serializer_class = HistorySerializer

    @extend_schema(
        summary="Read who changed a record",
        description="The record's entries, newest first, each with its actor (the user, "
                    "the token's name, the door: api, batch, admin, import, command) and "
                    "note. For the feed's producers and maintainers and site "
                    "administrators; a token scoped to feeds reads only those (read-only "
                    "tokens may). Never published: no feed, page or harvest shows it.",
        responses={200: HistorySerializer, **errors(400, 404), **REFUSALS},
        examples=examples.HISTORY_ANSWER,
    )
    def get(self, request: Request, slug: str, key: str) -> Response:
        feed = self.get_feed()
        token = request.auth if isinstance(request.auth, ApiToken) else None
        access.check_history(request.user, feed, token)
        found = Record.objects.filter(feed=feed, key=clean_key(key)).order_by().values_list(
            "pk", flat=True)[:1]
        if not found:
            raise NotFound(f"No record {key!r} in feed '{feed.slug}'.")
        # Private to the reader: no shared cache may keep it.
        return Response({"feed": feed.slug, "key": key, "entries": history(found[0])},
                        headers={"Cache-Control": "private"})
