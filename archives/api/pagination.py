"""Cursor pagination: stable while the lists grow and change under a walking client."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination

from .exceptions import Invalid


class CheckedCursor(CursorPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        # The field a cursor's position is compared with, to check it before any query.
        self.position_field = queryset.model._meta.get_field(self.ordering[0].lstrip("-"))
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request):
        """A cursor this API did not give out is a 400 naming `cursor`, whether it does
        not decode (DRF's NotFound) or holds a position the database would choke on (a
        500 before: `id > 'x'` fails only when the query runs)."""
        try:
            cursor = super().decode_cursor(request)
            if cursor is not None and cursor.position is not None:
                value = self.position_field.to_python(cursor.position)
                self.position_field.run_validators(value)  # e.g. an integer out of range
        except (NotFound, ValidationError, ValueError, TypeError):
            raise Invalid({"cursor": ["Not a cursor of this list: follow the next and "
                                      "previous links as given."]}, "Invalid cursor.") from None
        return cursor


class RecordCursor(CheckedCursor):
    # A record's `updated` is the time of its newest entry, strictly increasing across a
    # feed, so it is unique per feed: the cursor never skips or repeats a record, and a
    # record changed during the walk moves to the end, where the walker still finds it.
    # Served by the index record_feed_updated (feed, updated, id).
    ordering = ("updated", "id")


class FeedCursor(CheckedCursor):
    ordering = ("id",)
