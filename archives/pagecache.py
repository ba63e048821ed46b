"""A bounded in-process cache of archive pages whose bytes are final.

A page that carries its next-archive link never changes again, and its feed can never
be renamed or deleted, so its bytes can be kept without ever being invalidated. Serving
them from memory is what lets a warm archive request skip the database entirely.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class FrozenPage:
    """What answering for an archive page needs. `body` is None for the newest page, which
    may still gain its next-archive link: it is read from the database when sent."""

    body: bytes | None
    etag: str
    last_modified: int  # seconds since the epoch, for Last-Modified
    link_header: str


class PageCache:
    """Least-recently-used pages, up to `max_bytes` of bodies; safe across threads."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._pages: OrderedDict[tuple[str, int], FrozenPage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> FrozenPage | None:
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
            return page

    def put(self, key: tuple[str, int], page: FrozenPage) -> None:
        if len(page.body) > self.max_bytes:
            return
        with self._lock:
            old = self._pages.pop(key, None)
            if old is not None:
                self._bytes -= len(old.body)
            self._pages[key] = page
            self._bytes += len(page.body)
            while self._bytes > self.max_bytes:
                _, evicted = self._pages.popitem(last=False)
                self._bytes -= len(evicted.body)

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()
            self._bytes = 0


frozen_pages = PageCache(settings.FEEDPUB_PAGE_CACHE_BYTES)
# The newest rendering of each feed's subscription document, keyed by (slug, 0) and
# trusted only while its ETag is the feed's current one (the ETag follows from every
# column the document depends on), so repeated polls between two writes render nothing.
subscription_documents = PageCache(max(settings.FEEDPUB_PAGE_CACHE_BYTES // 8, 1))
