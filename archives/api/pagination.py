"""Cursor pagination: stable while the lists grow and change under a walking client."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class RecordCursor(CursorPagination):
    # A record's `updated` is the time of its newest entry, strictly increasing across a
    # feed, so it is unique per feed: the cursor never skips or repeats a record, and a
    # record changed during the walk moves to the end, where the walker still finds it.
    # Served by the index record_feed_updated (feed, updated, id).
    ordering = ("updated", "id")
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class FeedCursor(CursorPagination):
    ordering = ("id",)
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
