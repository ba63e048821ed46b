"""Long polling of the subscription documents (RFC 7240 `Prefer: wait=N`), on an ASGI
server: the one route where feedpub holds a request open.

A GET or HEAD of a long-polled kind of document (archives/documents/kinds.py: today
/feeds/<slug>/ and /feeds/<slug>/rss/) with `Prefer: wait=N` and an
If-None-Match is first answered by Django, as any request is. When that answer is 304
(the client holds the current document), it is held for up to N seconds (at most
FEEDPUB_LONG_POLL_MAX_WAIT) until the feed's next change: the client then gets the new
document (200), or else the 304 when the time is up, either with `Preference-Applied:
wait=<seconds held at most>`. Any other request, and any other answer, passes through
untouched: a `Prefer` this route does not apply (no If-None-Match, a wait that is not a
number, a document that changed already) is answered at once, as RFC 7240 asks of
preferences a server does not honour. Under WSGI (gunicorn's sync workers) nothing waits.

Waking is cheap. One watcher per feed being waited on learns of changes from
archives/db/heads.py's listener (PostgreSQL NOTIFY, delivered on commit) or, without one
(SQLite, or while heads are not trusted), by reading the feed's head every RECHECK
seconds.
On a change it asks Django once for the new response per variant of the waiting requests
(path, query, Accept, Accept-Encoding, Host, method: what Django's answer depends on), and
sends the same bytes to every waiter of that variant whose ETag they no longer match. So
5,000 waiters of one feed cost one rendering and 5,000 writes, not 5,000 requests through
Django (bench/longpoll.py measures both). Those renderings carry none of the waiters'
credentials (Cookie, Authorization): only the headers that choose the variant.

Database connections are bounded, whatever the number of polls. A waiting poll holds
none: it waits on the event loop, and only Django's answers (each in a thread of its own,
whose connection closes with the request: CONN_MAX_AGE=0) and the reads of feeds' heads
(one thread) touch the database. Django is asked for at most
FEEDPUB_LONG_POLL_DB_CONNECTIONS answers of long-polled URLs at once, each captured whole
before it is sent, so that no slow client keeps one; the others queue on the event loop.
(Unbounded, a burst of 3,000 polls once used up PostgreSQL's 100 connections and 2,210 got
a 500; tests/test_longpoll_postgres.py holds a burst of 1,000 to the bound.)

When the server shuts down (SIGTERM or SIGINT, or the lifespan's shutdown), every held
request gets its 304 at once, so that a restart is not held up by waits of up to
FEEDPUB_LONG_POLL_MAX_WAIT seconds. (uvicorn sends the lifespan's shutdown only after
every request is answered, hence the signals.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db import DatabaseError, connection, connections
from django.urls import Resolver404, resolve
from prometheus_client import Gauge

from archives.conf import settings
from archives.db.heads import heads, version
from archives.documents import kinds
from archives.models import Feed

logger = logging.getLogger(__name__)

# Seconds between two reads of a watched feed's head when no notification can come.
RECHECK = 0.5
# What Django's answer to a long-polled URL depends on, besides method, path and query.
VARIANT_HEADERS = (b"host", b"accept", b"accept-encoding", b"x-forwarded-proto")
# The longest `wait` read (RFC 7240: a preference not understood is ignored), which also
# keeps int() away from a number of thousands of digits.
WAIT_DIGITS = 9
# The signals that stop the server.
STOPPING = (signal.SIGTERM, signal.SIGINT)

# Requests held right now, waiting for a change (/metrics, docs/operating/metrics.md): of
# this process; with several processes sharing PROMETHEUS_MULTIPROC_DIR, of the live ones.
HELD = Gauge("feedpub_long_polls_held", "Long polls held now, waiting for a change or their "
             "time.", multiprocess_mode="livesum")

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def long_polled_feed(scope: Scope) -> str | None:
    """The slug of the feed whose document a GET or HEAD of `scope` asks for, if that is
    a long-polled kind of document (archives/documents/kinds.py: Kind.long_polled); None
    for any other request, which passes through."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
        return None
    try:  # the path as Django resolves it: without the mount point
        match = resolve(scope["path"].removeprefix(scope.get("root_path", "")))
    except Resolver404:
        return None
    kind = kinds.get(match.url_name or "") if match.namespace == kinds.NAMESPACE else None
    return match.kwargs["slug"] if kind is not None and kind.long_polled else None


def requested_wait(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The seconds of the first `wait` preference in the Prefer headers (RFC 7240: a
    token, `=`, delta-seconds, maybe quoted, then `;` parameters); None without one,
    or if its value is not a number of seconds (an unknown or bad preference is ignored)."""
    values = [value.decode("latin-1") for name, value in headers if name == b"prefer"]
    for preference in ",".join(values).split(","):
        name, _, value = preference.split(";", 1)[0].partition("=")
        if name.strip().lower() != "wait":
            continue
        value = value.strip()
        if len(value) > 1 and value[0] == value[-1] == '"':
            value = value[1:-1]
        understood = value.isascii() and value.isdigit() and len(value) <= WAIT_DIGITS
        return int(value) if understood else None
    return None


@dataclass
class Answer:
    """A response as Django sent it: status, headers, the whole body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """A header's value by its lower-case name (Django sends names as written)."""
        return next((value for key, value in self.headers if key.lower() == name), None)

    async def send(self, send: Send, *, applied: int | None = None) -> None:
        headers = self.headers
        if applied is not None:
            headers = [*headers, (b"preference-applied", b"wait=%d" % applied)]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


async def ask(app, scope: Scope) -> Answer:
    """Django's answer to `scope` (a GET or HEAD: no body), captured whole."""
    asked = False

    async def receive() -> dict:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Future()  # never: Django stops listening once it has answered
        raise AssertionError  # pragma: no cover

    start, body = {}, []

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        else:
            body.append(message.get("body", b""))

    await app(scope, receive, send)
    return Answer(start["status"], list(start.get("headers", [])), b"".join(body))


def variant_of(scope: Scope) -> tuple:
    headers = dict(scope["headers"])
    return (scope["method"], scope["path"], scope.get("query_string", b""),
            *(headers.get(name) for name in VARIANT_HEADERS))


@dataclass(eq=False)
class Waiter:
    variant: tuple
    scope: Scope
    etag: bytes | None = None  # the ETag of the client's copy, once Django said 304
    missed: bool = False  # the feed changed while Django was being asked
    listener: asyncio.Task | None = None  # for the client's disconnect
    woken: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop()
                                  .create_future())


class Watcher:
    """The waiters of one feed, and the task that wakes them when it changes."""

    def __init__(self, polling: LongPolling, slug: str):
        self.polling, self.slug = polling, slug
        self.waiters: set[Waiter] = set()
        self.version: tuple | None = None  # of the head last read (None: no such feed)
        self.pk: int | None = None
        self.changed = asyncio.Event()
        self.ready = asyncio.Event()  # the first head is read
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        try:
            await self.read_head()
            self.ready.set()
            while self.waiters:
                # Woken by the listener; and, in case it stalls or is away, every RECHECK
                # (from memory while heads are trusted: no query).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), RECHECK)
                self.changed.clear()
                if not self.waiters:
                    break
                before = self.version
                if await self.read_head() and self.version != before:
                    await self.wake()
        except Exception:
            logger.exception("watching feed %s failed; its waiters are answered now",
                             self.slug)
            for waiter in self.waiters:
                if not waiter.woken.done():
                    waiter.woken.set_exception(RuntimeError("watch failed"))
        finally:
            self.ready.set()
            self.polling.forget(self)

    async def read_head(self) -> bool:
        """Read the feed's head (from memory while heads are trusted); False if the
        database could not be read, and the last version stands."""
        head = heads.cached(self.slug)
        if head is None:
            try:
                head = await self.polling.in_database_thread(_read_head, self.slug)
            except DatabaseError as error:
                logger.warning("reading feed %s failed (%s); trying again", self.slug, error)
                return False
        self.polling.watching(self, None if head is None else head.pk)
        self.version = None if head is None else version(head)
        return True

    async def wake(self) -> None:
        """Tell each waiter of the change: the new answer, one per variant."""
        answered = [waiter for waiter in self.waiters if waiter.etag is not None]
        for waiter in self.waiters:
            if waiter.etag is None:
                waiter.missed = True  # asking Django now: it must ask again
        variants = {waiter.variant: waiter.scope for waiter in answered}
        answers = dict(zip(variants, await asyncio.gather(
            *(self.polling.ask(_unconditional(scope)) for scope in variants.values())),
            strict=True))
        for waiter in answered:
            answer = answers[waiter.variant]
            if answer.header(b"etag") != waiter.etag and not waiter.woken.done():
                waiter.woken.set_result(answer)


TIME_UP, GONE = object(), object()  # how a wait ended, besides a new answer


def _resolve(future: asyncio.Future, outcome) -> None:
    if not future.done():
        future.set_result(outcome)


async def _until_disconnected(receive: Receive, woken: asyncio.Future) -> None:
    """Tell the waiter if its client leaves. (Once the answer is sent, uvicorn's receive()
    says disconnect too, and this ends on its own.)"""
    while (await receive())["type"] != "http.disconnect":
        pass
    _resolve(woken, GONE)


def _unconditional(scope: Scope) -> Scope:
    """The request for every waiter of its variant: no validators, no Prefer, no
    credentials (one waiter's Cookie must not answer for the others)."""
    return {**scope, "headers": [(name, value) for name, value in scope["headers"]
                                 if name in VARIANT_HEADERS]}


def _read_head(slug: str) -> Feed | None:
    try:
        return heads.feed_by_slug(slug)
    except Feed.DoesNotExist:
        return None
    except DatabaseError:
        connection.close()  # maybe broken: the next read opens another
        raise


class LongPolling:
    """ASGI middleware in front of Django's application: holds long polls (see the
    module docstring), passes everything else through."""

    def __init__(self, app):
        self.app = app
        self.watchers: dict[str, Watcher] = {}
        self.by_pk: dict[int, Watcher] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing = False  # the server is shutting down: nothing is held any more
        # Heads read from the database (SQLite, or not kept) outside the event loop, in
        # one thread with one connection.
        self.database = ThreadPoolExecutor(max_workers=1, thread_name_prefix="longpoll")
        # Answers being asked of Django at once (see the module docstring).
        self.answering = asyncio.Semaphore(settings.FEEDPUB_LONG_POLL_DB_CONNECTIONS)

    async def ask(self, scope: Scope) -> Answer:
        """Django's answer to `scope`, when one of the bounded places is free."""
        async with self.answering:
            return await ask(self.app, scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self.lifespan(receive, send)
        slug = long_polled_feed(scope)
        if slug is None:
            return await self.app(scope, receive, send)
        wait = requested_wait(scope["headers"])
        if not wait or not any(name == b"if-none-match" for name, _ in scope["headers"]) \
                or self.closing:
            return await (await self.ask(scope)).send(send)  # not held: answered at once
        await self.hold(slug, scope, receive, send,
                        min(wait, settings.FEEDPUB_LONG_POLL_MAX_WAIT))

    async def hold(self, slug: str, scope: Scope, receive: Receive, send: Send,
                   wait: int) -> None:
        self.start()
        request = await receive()  # a GET's (empty) body: later, receive() says disconnect
        if request["type"] == "http.disconnect":
            return
        watcher = self.watchers.get(slug)
        if watcher is None or watcher.task.done():
            watcher = self.watchers[slug] = Watcher(self, slug)
        waiter = Waiter(variant_of(scope), scope)
        watcher.waiters.add(waiter)
        try:
            await watcher.ready.wait()  # changes after this point wake the waiter
            while True:
                answer = await self.ask(scope)
                if answer.status != 304:
                    return await answer.send(send)  # not held: no Preference-Applied
                if not waiter.missed:
                    break
                waiter.missed = False
            if self.closing:
                return await answer.send(send)  # stopping: not held
            waiter.etag = answer.header(b"etag")
            # One future says how the wait ended: a new answer, the time up, the client
            # gone. (Cheaper to wake by the thousand than asyncio.wait on several.)
            woken = waiter.woken
            timer = asyncio.get_running_loop().call_later(wait, _resolve, woken, TIME_UP)
            # (Kept on the waiter: the loop holds tasks only weakly.)
            waiter.listener = asyncio.ensure_future(_until_disconnected(receive, woken))
            applied: int | None = wait
            HELD.inc()
            try:
                outcome = await woken
            except Exception:  # the watcher failed: the 304 Django gave stands, unwaited
                outcome, applied = TIME_UP, None
            finally:
                timer.cancel()
                HELD.dec()
            if outcome is GONE:
                return
            await (answer if outcome is TIME_UP else outcome).send(send, applied=applied)
        finally:
            watcher.waiters.discard(waiter)
            if not watcher.waiters:
                watcher.changed.set()  # nobody waits: let it go

    # Shutting down --------------------------------------------------------------------

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """Django's ASGI handler serves HTTP only: answer the server's lifespan messages,
        and release every held request when it shuts down."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.release_on_signals()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.release()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def release_on_signals(self) -> None:
        """Release the held requests on the signals that stop the server, before its
        own handlers (which wait for every request to be answered) run."""
        if threading.current_thread() is not threading.main_thread():
            return  # a server in a thread (tests) installs no signal handlers either
        loop = asyncio.get_running_loop()
        for number in STOPPING:
            previous = signal.getsignal(number)
            if not callable(previous):
                continue  # default or ignored: not the server's; leave it alone

            def handler(signum, frame, previous=previous):
                loop.call_soon_threadsafe(self.release)
                previous(signum, frame)

            signal.signal(number, handler)

    def release(self) -> None:
        """On the event loop: answer every held request with its 304 now, and hold no
        more (the server is stopping)."""
        self.closing = True
        for watcher in list(self.watchers.values()):
            for waiter in list(watcher.waiters):
                if waiter.etag is not None:  # (those being asked are not held: see hold)
                    _resolve(waiter.woken, TIME_UP)

    # Watchers and notifications ---------------------------------------------------------

    def start(self) -> None:
        """Once per process, on the event loop: hear of changes from the heads' listener."""
        if self.loop is not None:
            return
        self.loop = asyncio.get_running_loop()
        heads.subscribe(self._heard)
        if heads.enabled():
            heads.start()

    def close(self) -> None:
        """Hear of changes no more, and close the database thread's connection (an
        application that outlives its server: tests)."""
        if self.loop is not None:
            heads.unsubscribe(self._heard)
            self.loop = None
        self.database.submit(connections.close_all).result()

    def _heard(self, changed: frozenset[int] | None) -> None:
        """In the listener's thread: hand the news to the event loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._changed, changed)

    def _changed(self, changed: frozenset[int] | None) -> None:
        if changed is None:  # anything may have changed: every watcher looks
            watchers = list(self.watchers.values())
        else:
            watchers = [self.by_pk[pk] for pk in changed if pk in self.by_pk]
        for watcher in watchers:
            watcher.changed.set()

    def watching(self, watcher: Watcher, pk: int | None) -> None:
        if watcher.pk is not None and self.by_pk.get(watcher.pk) is watcher:
            del self.by_pk[watcher.pk]
        watcher.pk = pk
        if pk is not None:
            self.by_pk[pk] = watcher

    def forget(self, watcher: Watcher) -> None:
        if self.watchers.get(watcher.slug) is watcher:
            del self.watchers[watcher.slug]
        self.watching(watcher, None)

    async def in_database_thread(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self.database, function,
                                                                *args)

