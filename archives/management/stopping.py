"""Stopping a long-running command cleanly on SIGTERM (what `docker stop`, Kubernetes and
systemd send) or SIGINT (Ctrl-C).

A process that is PID 1 in a container has no default action for SIGTERM: unless it
handles the signal it is killed after the grace period (exit 137), whatever it was doing.
`GracefulStop` handles both signals: the command finishes the unit of work it is in (a
sealing run, a WebSub round: each commits whole or not at all) and then exits 0; a signal
that comes while the command only waits (between passes) ends the wait at once, by raising
`Stopped` out of it, up to the `with GracefulStop()` block, which it ends quietly.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """Raised out of an idle wait when a stop is asked for: a BaseException (as
    KeyboardInterrupt is) so that no retry loop's `except Exception` swallows it."""


class GracefulStop:
    """`with GracefulStop() as stop:` handles SIGTERM and SIGINT until the block ends.
    `stop()` says whether a stop was asked for (work loops check it between units; other
    threads may too), and a wait inside `with stop.idle():` ends by raising `Stopped`."""

    def __init__(self):
        self.requested = threading.Event()
        self.signal_name = ""
        self._idle = False
        # The handlers ours replace (as signal.signal returns them), put back on leaving.
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __call__(self) -> bool:
        return self.requested.is_set()

    def __enter__(self) -> GracefulStop:
        # Signal handlers belong to the main thread (a command run by a test's thread
        # installs none, and is stopped by its own means).
        if threading.current_thread() is threading.main_thread():
            for number in SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()
        if self.signal_name:
            logger.info("stopped cleanly on %s", self.signal_name)
        return kind is Stopped  # the block ends there, as asked

    def _handle(self, number: int, frame) -> None:
        self.signal_name = signal.Signals(number).name
        self.requested.set()
        if self._idle:
            raise Stopped

    @contextmanager
    def idle(self) -> Iterator[None]:
        """A wait that a stop may cut short: nothing in it may be left half-done."""
        self._idle = True
        try:
            if self():  # asked for before the wait began
                raise Stopped
            yield
        finally:
            self._idle = False
