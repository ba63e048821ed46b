"""A bounded in-process cache of archive pages whose bytes are final.

A page that carries its next-archive link never changes again, and its feed can never
be renamed or deleted, so its bytes can be kept without ever being invalidated. Serving
them from memory is what lets a warm archive request skip the database entirely.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class FrozenPage:
    """What answering for an archive page needs, read together so that it agrees."""

    body: bytes
    etag: str
    last_modified: int  # seconds since the epoch, for Last-Modified
    link_header: str
    final: bool = False  # it has its next-archive link: these bytes never change again


class PageCache:
    """Least-recently-used pages, up to `max_bytes` of bodies; safe across threads."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._pages: OrderedDict[Hashable, FrozenPage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> FrozenPage | None:
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
            return page

    def put(self, key: Hashable, page: FrozenPage) -> None:
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
# The newest rendering of each feed's subscription document, keyed by slug and
# trusted only while its ETag is the feed's current one (the ETag follows from every
# column the document depends on), so repeated polls between two writes render nothing.
subscription_documents = PageCache(max(settings.FEEDPUB_PAGE_CACHE_BYTES // 8, 1))
