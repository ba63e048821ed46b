"""feedpub's ASGI application (feedpub/asgi.py: Django behind the long-polling route) under
a real uvicorn, in a thread of the test process on a free port, so that it shares the test
database (SQLite's in-memory one too) and the test can look at its waiters."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import uvicorn

from archives.serving.longpoll import LongPolling

from .nginx_server import free_port


@dataclass
class AsgiServer:
    port: int = field(default_factory=free_port)
    application: LongPolling | None = None
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None

    def start(self) -> AsgiServer:
        from feedpub.asgi import django_application

        # A LongPolling of its own: its watchers belong to this server's event loop.
        self.application = LongPolling(django_application)
        config = uvicorn.Config(self.application, host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.application.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def waiting(self, slug: str) -> int:
        """How many requests are held on feed `slug` now (Django answered them 304)."""
        watcher = self.application.watchers.get(slug)
        if watcher is None:
            return 0
        return sum(waiter.etag is not None for waiter in list(watcher.waiters))

    def wait_for_waiters(self, slug: str, count: int, timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while self.waiting(slug) < count:
            assert time.monotonic() < deadline, f"{count} waiters never came"
            time.sleep(0.01)
