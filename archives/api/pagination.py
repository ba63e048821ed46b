"""Cursor pagination: stable while the lists grow and change under a walking client.

A page holds at most `page_size` items and, past the first item, at most
`max_page_bytes` of JSON: a thousand records of 100 kB metadata each would otherwise be
one 100 MB answer. A page cut short by bytes links the rest with its `next` (or, walking
backwards, `previous`) cursor like any other page, so no item is skipped or repeated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.utils.encoders import JSONEncoder

from archives.conf import settings

from .exceptions import Invalid


class BoundedCursor(CursorPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
    max_page_bytes = 4 * 1024 * 1024
    # For the schema's `next` and `previous` examples: the list's route and arguments, and
    # the positions a walk would be at (an `ordering[0]` value as DRF writes it).
    example_route: tuple[str, tuple[str, ...]]
    example_positions: tuple[str, str]

    def get_paginated_response_schema(self, schema):
        """DRF's, with links this API would give out (DRF's example is
        http://api.example.org/accounts/?cursor=...): Swagger UI shows them."""
        answer = super().get_paginated_response_schema(schema)
        name, args = self.example_route
        self.base_url = settings.FEEDPUB_BASE_URL + reverse(name, args=args)
        after, before = self.example_positions
        links = answer["properties"]
        # A position is the text of an ordering value (DRF's stubs say an int).
        links["next"]["example"] = self.encode_cursor(
            Cursor(0, False, after))  # type: ignore[arg-type]
        links["previous"]["example"] = self.encode_cursor(
            Cursor(0, True, before))  # type: ignore[arg-type]
        return answer

    def get_page_size(self, request) -> int:
        """`page_size` as the schema says it: an integer from 1 to max_page_size. DRF's
        would take anything else (a word, 0, a million) as "the default" in silence."""
        given = request.query_params.get(self.page_size_query_param)
        if given is None:
            return self.page_size
        if not re.fullmatch(r"[0-9]{1,7}", given) or not (
                1 <= int(given) <= self.max_page_size):
            raise Invalid({self.page_size_query_param: [
                f"An integer from 1 to {self.max_page_size}."]}, "Invalid page_size.")
        return int(given)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (f"Items a page holds at most: 1 to "
                                            f"{self.max_page_size}; {self.page_size} if not given.")
                parameter["schema"] |= {"minimum": 1, "maximum": self.max_page_size}
        return parameters

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

    def get_paginated_response(self, data):
        return super().get_paginated_response(self._within_budget(data))

    def _within_budget(self, data: list[Any]) -> list[Any]:
        """Keep the items that fit in max_page_bytes (at least one), and move the cursor
        that leads on to start at the first item left out."""
        fits, used = 0, 0
        ordered = list(reversed(data)) if self._walking_back() else list(data)
        for item in ordered:
            used += len(json.dumps(item, cls=JSONEncoder, ensure_ascii=False).encode())
            if fits and used > self.max_page_bytes:
                break
            fits += 1
        if fits == len(data):
            return data
        page = self.page
        if page is None:  # (paginate_queryset sets it, before any response is made)
            raise RuntimeError("a paginated response of no page")
        # Positions are unique (see the orderings), so the first item left out is where
        # the next page starts: DRF's links then use the last item kept as their marker.
        if self._walking_back():
            left_out = page[len(data) - fits - 1]
            self.page = page[len(data) - fits:]
            self.has_previous = True
            self.previous_position = self._get_position_from_instance(left_out, self.ordering)
            return data[len(data) - fits:]
        left_out = page[fits]
        self.page = page[:fits]
        self.has_next = True
        self.next_position = self._get_position_from_instance(left_out, self.ordering)
        return data[:fits]

    def _walking_back(self) -> bool:
        # A `previous` cursor reads backwards from its position: the items nearest to it
        # are the last of the page, so those are the ones kept.
        return bool(self.cursor and self.cursor.reverse)


class RecordCursor(BoundedCursor):
    # A record's `updated` is the time of its newest entry, strictly increasing across a
    # feed, so it is unique per feed: the cursor never skips or repeats a record, and a
    # record changed during the walk moves to the end, where the walker still finds it.
    # Served by the index record_feed_updated (feed, updated, id).
    ordering = ("updated", "id")
    example_route = ("api:record-list", ("books",))
    example_positions = ("2026-11-22 16:56:03.823429+00:00", "2026-11-22 16:57:41.100211+00:00")


class FeedCursor(BoundedCursor):
    ordering = ("id",)
    example_route = ("api:feed-list", ())
    example_positions = ("100", "101")
