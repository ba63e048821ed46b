"""A bounded in-process cache of documents, for those whose bytes can be trusted as is.

archives/documents/base.py keeps three: documents whose bytes and headers are final (an archive
page with its next-archive link, a linked page with its next link: they never change again,
and their feed can never be renamed or deleted, so they are never invalidated: a warm
request skips the database entirely), and the newest rendering of each subscription
document and unfinished linked page (trusted only while its ETag is current), and the
gzip encoding of documents, by the ETag of their plain bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class PageCache:
    """Least-recently-used values, up to `max_bytes` of their sizes; safe across threads.
    `max_bytes` may be a function, asked on first use: a size read from the settings is then
    the one the process runs with, not the one it was importing with."""

    def __init__(self, max_bytes: int | Callable[[], int]):
        self._max_bytes = max_bytes
        self._values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        if callable(self._max_bytes):
            self._max_bytes = max(self._max_bytes(), 1)
        return self._max_bytes

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            found = self._values.get(key)
            if found is None:
                return None
            self._values.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any, *, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._values.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._values[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._values.popitem(last=False)
                self._bytes -= evicted

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._bytes = 0
