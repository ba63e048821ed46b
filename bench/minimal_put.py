"""The floor of a single PUT in Django REST framework: what a DRF user writes plainly.

The same token authentication and model permission as the producer API, the same JSON
body, the same transaction (lock the feed, take the next seq and a strictly later
`updated`, store the record, append its entry, advance the feed's counters), written with
the ORM and nothing else: no validation beyond what the database refuses, no If-Match,
no sealing, a short answer. bench/single_put.py measures the API's PUT against it; it is
routed only in the benchmark's URLconf (bench/benchurls.py), never in production.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.parsers import JSONParser
from rest_framework.permissions import DjangoModelPermissions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from archives.models import Entry, Feed, Record


class MinimalPut(APIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [DjangoModelPermissions]
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]
    throttle_classes = []
    queryset = Record.objects.all()  # what DjangoModelPermissions checks against

    def put(self, request, slug: str, key: str) -> Response:
        data = request.data
        with transaction.atomic():
            feed = Feed.objects.select_for_update().get(slug=slug)
            now = timezone.now()
            if feed.last_updated is not None and now <= feed.last_updated:
                now = feed.last_updated + timedelta(microseconds=1)
            record = Record.objects.filter(feed=feed, key=key).first()
            created = record is None
            if created:
                record = Record(feed=feed, key=key, created=now)
            record.title, record.summary = data["title"], data.get("summary", "")
            record.metadata, record.links = data.get("metadata", {}), data.get("links", [])
            record.updated = record.datestamp = now  # (OAI-PMH's datestamp, as the write path)
            record.deleted_at = None
            record.save()
            feed.last_seq += 1
            Entry.objects.create(
                feed=feed, seq=feed.last_seq, record=record,
                kind=Entry.Kind.CREATE if created else Entry.Kind.UPDATE, updated=now,
                title=record.title, summary=record.summary, links=record.links,
                metadata=record.metadata)
            Feed.objects.filter(pk=feed.pk).update(last_seq=feed.last_seq, last_updated=now)
        return Response({"key": key, "updated": now.isoformat(), "seq": feed.last_seq},
                        status=201 if created else 200)
