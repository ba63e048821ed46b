"""How the WebSub worker wakes between its polls: LISTEN for the feeds writes change and the
intents the hub records (PostgreSQL only). Never trusted for correctness: when the
connection is down, the worker polls (archives/push/worker.py).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import connection

from archives.db import heads

from .hub import INTENTS_CHANNEL

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

# PostgreSQL channels the worker listens on: writes announce the feed they changed (the
# write path, archives/db/heads.py), the hub announces a new intent (INTENTS_CHANNEL).
CHANGES_CHANNEL = heads.CHANNEL


@dataclass
class Wake:
    feeds: set[int] = field(default_factory=set)
    intents: bool = False


FEED_PAYLOAD = re.compile(r"[0-9]{1,18}")  # a feed's primary key (bigint), nothing else


class Listener:
    """LISTEN on the changes and intents channels on a connection of its own (PostgreSQL
    only). Never trusted for correctness: when it is down, the worker polls."""

    def __init__(self) -> None:
        self.connection: psycopg.Connection | None = None

    def connect(self) -> bool:
        try:
            params = connection.get_connection_params()
            self.connection = connection.get_new_connection(params)
            self.connection.autocommit = True
            for channel in (CHANGES_CHANNEL, INTENTS_CHANNEL):
                self.connection.execute(f"LISTEN {channel}")
        except Exception as error:  # noqa: BLE001 - any failure: poll, try again later
            logger.warning("cannot LISTEN (polling instead): %s", error)
            self.close()
        return self.connection is not None

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            finally:
                self.connection = None

    def wait(self, timeout: float) -> Wake | None:
        """What notifications arrived within `timeout` seconds; None: none, or the
        connection is down (then it sleeps out the timeout: the caller polls when its
        interval is up, and tries to listen again after)."""
        started = time.monotonic()
        if self.connection is None:
            self.connect()
        listening, wake = self.connection, Wake()
        if listening is None:
            time.sleep(max(timeout, 0))
            return None
        try:
            # The first notification (or the timeout), then whatever else has arrived.
            for notifies in (listening.notifies(timeout=max(timeout, 0), stop_after=1),
                             listening.notifies(timeout=0)):
                for notify in notifies:
                    if notify.channel == INTENTS_CHANNEL:
                        wake.intents = True
                    elif FEED_PAYLOAD.fullmatch(notify.payload):
                        wake.feeds.add(int(notify.payload))
                    else:
                        logger.warning("ignoring a %s notification with payload %r",
                                       notify.channel, notify.payload)
            return wake if wake.feeds or wake.intents else None
        except Exception as error:  # noqa: BLE001 - the connection died: poll until back
            logger.warning("LISTEN connection lost (polling instead): %s", error)
            self.close()
            time.sleep(max(timeout - (time.monotonic() - started), 0))
            return None
