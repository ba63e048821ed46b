"""Who changed a record, and why: `GET /api/feeds/<slug>/records/<key>/history`.

For those who may write the feed's records and for site administrators only
(archives.log.access.check_history); nothing of it is ever in a public document.

The whole history in one answer, newest first, not in pages of a cursor: it is one
record's own changes, read in one range of the (record, seq) index, and whoever reads it
(a person comparing versions, a script looking for who made a change) wants all of it. A
record with 10,000 versions answers in a few tens of milliseconds (bench/history.py,
docs/performance/history.md). Rows are read as tuples of the few columns the answer shows
(archives.db.fastsql.history_rows) and written as JSON by one function (`history_json`):
a serializer per entry would cost more than the query.
"""

from __future__ import annotations

import json
import json.encoder

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from archives.db import fastsql
from archives.db.rows import HistoryRow
from archives.log import access
from archives.models import Entry, Record, Via
from archives.validation import clean_key

from . import examples
from .actors import token_of
from .serializers import ErrorSerializer
from .views import ApiView, FeedMixin, errors

# A str as JSON text, as json.dumps(ensure_ascii=False) and DRF's JSON renderer write it (C).
_string = json.encoder.encode_basestring


def history_json(*, feed: str, key: str, rows: list[HistoryRow]) -> str:
    """The answer, in JSON text as DRF's renderer would write it (compact, UTF-8). Written
    here, not rendered from a dict an entry: thousands of dicts that hold dicts (their
    actors) are kept by the garbage collector, whose full passes over the process then
    came every few requests (bench/history.py: p95 150 ms against 65 without them)."""
    actors: dict[tuple[str, str, str], str] = {}
    shown = []
    for row in rows:
        who = (row.username, row.token_name, row.via)
        actor = actors.get(who)
        if actor is None:
            actor = actors[who] = actor_json(*who)
        shown.append(f'{{"seq":{row.seq},"kind":{_string(row.kind)},'
                     f'"updated":{_string(row.updated)},"actor":{actor},'
                     f'"note":{_string(row.note)}}}')
    return f'{{"feed":{_string(feed)},"key":{_string(key)},"entries":[{",".join(shown)}]}}'


def actor_json(username: str, token_name: str, via: str) -> str:
    """Who made a change, as JSON text. Entries written before actors were kept (`via` "")
    have an unknown actor: null, not a made-up one."""
    if not via:
        return "null"
    return json.dumps({"user": username or None, "token": token_name or None, "via": via},
                      ensure_ascii=False, separators=(",", ":"))


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
    def get(self, request: Request, slug: str, key: str) -> HttpResponse:
        feed = self.get_feed()
        access.check_history(request.user, feed, token_of(request))
        found = Record.objects.filter(feed=feed, key=clean_key(key)).order_by().values_list(
            "pk", flat=True)[:1]
        if not found:
            raise NotFound(f"No record {key!r} in feed '{feed.slug}'.")
        body = history_json(feed=feed.slug, key=key, rows=fastsql.history_rows(found[0]))
        # Private to the reader: no shared cache may keep it.
        return HttpResponse(body.encode(), content_type="application/json",
                            headers={"Cache-Control": "private"})
