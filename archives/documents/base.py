"""Every document feedpub serves: one small class per kind, owning all it depends on.

A document class knows its inputs (what its bytes are rendered from), its links, its
validators and its bytes, as Django's syndication `Feed` and sitemaps' `Sitemap` keep
all a document needs on one class. Views serve it (`views.serve`), sealing freezes it,
caches key on its ETag: nobody lists its inputs again.

Validators tell the truth to every cache (docs/how-it-works/invariants.md#http), ours or not:
- The ETag changes exactly when the bytes do: a hash of every input the bytes are
  rendered from (and of the renderer's own source), or of the frozen bytes themselves.
- Last-Modified moves forward whenever the bytes change. It follows `modified`, when the
  bytes last changed (a write, a seal, a retitle, a page gaining next-archive), not the
  newest entry's `updated`. HTTP dates have whole seconds, and caches send either our
  Last-Modified or the Date of their copy as If-Modified-Since (RFC 9110 13.1.3), so the
  date we send is the first whole second at which the change is certainly visible: the
  second after `modified`, plus FEEDPUB_LAST_MODIFIED_SETTLE seconds that bound how long
  a change takes from its stamp (just before its commit) to being visible, a response
  from its read to its Date, and the clock difference between hosts. Until then a
  document is sent without Last-Modified. A response that showed older bytes therefore
  always carries an earlier Last-Modified and Date than the change, and If-Modified-Since
  can be honoured (RFC 9110 8.8.2.2 calls dates without this care weak).
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from django.utils.http import http_date

from archives import formats, validation
from archives.conf import settings
from archives.models import Feed

from . import atom
from .pagecache import PageCache

IMMUTABLE = "public, max-age=31536000, immutable"
JSON_TYPE = "application/json"

# What rendering depends on besides data: the renderer itself (every module of this package,
# and the ids, dates and record rules it renders with). A release that renders differently
# changes every ETag (so no cache keeps old bytes as current) and moves the Last-Modified of
# documents rendered per request to no earlier than its files.
_RENDERERS = sorted(Path(__file__).parent.glob("*.py")) + [
    Path(inspect.getfile(module)) for module in (formats, validation)]
RENDERER = hashlib.sha256(b"".join(path.read_bytes() for path in _RENDERERS)).hexdigest()
RENDERER_MODIFIED = datetime.fromtimestamp(max(path.stat().st_mtime for path in _RENDERERS),
                                           tz=UTC)


def now() -> datetime:
    """The clock a document's Last-Modified is judged by (tests move it)."""
    return datetime.now(tz=UTC)


def change_stamp() -> datetime:
    """The time to record as a document's `modified`, taken just before the change
    commits. The wall clock itself, like `now`: tests that write entries at chosen
    instants replace django's timezone.now, which must not move these."""
    return datetime.now(tz=UTC)


class Document:
    """What every document answers with. Subclasses say what they are made of."""

    content_type = atom.ATOM_TYPE
    final = False  # its bytes never change again
    streams = False  # its body comes in pieces, from stream(): see views.serve
    # Answer If-Modified-Since (else only If-None-Match): see the module docstring.
    honours_if_modified_since = True
    # A HEAD is answered without rendering, so without a Content-Length (a document
    # rendered per request, whose length only its bytes tell): see views.serve.
    head_without_length = False

    def __init__(self, *, read_at: datetime):
        # When its inputs were read (at the latest): no change committed before it is missing.
        self.read_at = read_at

    @classmethod
    def for_topic(cls, feed: Feed, *, read_at: datetime) -> Document | None:
        """This kind's document of `feed` as the content of its WebSub topic (None: none
        yet), for kinds that are topics (archives/documents/kinds.py)."""
        raise NotImplementedError(f"{cls.__name__} is not a WebSub topic")

    def topic_headers(self) -> dict[str, str]:
        """Headers a delivery of this document to a topic's subscribers carries besides
        its Content-Type and Link."""
        return {}

    def etag(self) -> str:
        raise NotImplementedError

    def stream(self) -> Iterator[bytes]:
        """The body in pieces, for a document that `streams`."""
        raise NotImplementedError

    def modified(self) -> datetime:
        """When the bytes last changed."""
        raise NotImplementedError

    def links(self) -> list[atom.Link]:
        """Every link the document carries (its body's, where it has links), which its
        Link header repeats (HEAD alone can walk a feed: docs/how-it-works/invariants.md#http)."""
        raise NotImplementedError

    def body(self) -> bytes:
        raise NotImplementedError

    def cache_control(self) -> str:
        return IMMUTABLE if self.final else f"public, max-age={settings.FEEDPUB_MAX_AGE}"

    def last_modified(self) -> int | None:
        """Last-Modified as seconds since the epoch: the first whole second at which the
        last change is certainly visible, or None before it (see the module docstring)."""
        visible = visible_second(self.modified())
        return visible if self.read_at.timestamp() >= visible else None

    def gzip_etag(self) -> str:
        return gzip_etag(self.etag())

    def gzipped(self) -> bytes:
        """The body gzip-encoded (the representation gzip_etag names)."""
        return gzipped(self.etag(), self.body())

    def headers(self) -> dict[str, str]:
        """ETag, Cache-Control, Link and (once settled) Last-Modified. A final document's
        never change: they are built once, for the copy kept in a process's cache; so
        are a feed document's once settled, for as long as its head is kept."""
        if self.final and "_headers" in self.__dict__:
            return self.__dict__["_headers"]
        memo = self.memo()
        if memo is not None and "headers" in memo:
            return memo["headers"]
        headers = {"ETag": self.etag(), "Cache-Control": self.cache_control(),
                   "Link": atom.link_header(self.links())}
        last_modified = self.last_modified()
        if last_modified is not None:
            headers["Last-Modified"] = http_date(last_modified)
            if memo is not None:
                memo["headers"] = headers
        if self.final:
            self.__dict__["_headers"] = headers
        return headers

    def memo(self) -> dict | None:
        """Where values that follow from the document's inputs alone may be kept."""
        return None


def visible_second(modified: datetime) -> int:
    """The first whole second at which a change stamped `modified` is certainly visible:
    a document's Last-Modified once it is reached, and an exported page's file time."""
    return int(modified.timestamp()) + 1 + settings.FEEDPUB_LAST_MODIFIED_SETTLE


def file_etag(second: int, length: int) -> str:
    """The ETag nginx gives a file of `length` bytes modified at `second` (its
    ngx_http_set_etag: hex mtime, hex size). Sealed pages carry it, from Django as from
    their exported files (archives/storage/export.py), so that either answers the other's
    validators: see ArchiveDocument for why it is a strong validator there."""
    return f'"{second:x}-{length:x}"'


def inputs_etag(*inputs) -> str:
    """An ETag for bytes rendered from `inputs` by this release's renderer."""
    state = repr((RENDERER, settings.FEEDPUB_BASE_URL, *inputs)).encode()
    return '"' + hashlib.sha256(state).hexdigest()[:32] + '"'


def bytes_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


# Documents compressed for clients that accept gzip, by the ETag of their plain bytes: each
# is compressed once per process (a sealed page costs no more gzipped than plain), rather
# than stored compressed beside the page, which would slow sealing down for the few
# processes that have not compressed it yet.
gzipped_bodies = PageCache(lambda: settings.FEEDPUB_PAGE_CACHE_BYTES // 8)


def gzip_etag(etag: str) -> str:
    """The ETag of a document's gzip-encoded bytes: a different representation, so a
    different strong validator (RFC 9110 8.8.3.3)."""
    return etag[:-1] + '-gzip"'


def gzipped(etag: str, body: bytes) -> bytes:
    """`body` (whose ETag is `etag`) gzip-encoded; the same bytes in every process."""
    compressed = gzipped_bodies.get(etag)
    if compressed is None:
        compressed = gzip.compress(body, compresslevel=6, mtime=0)
        gzipped_bodies.put(etag, compressed, size=len(compressed))
    return compressed


class Rendered(NamedTuple):
    """A rendering kept in `subscription_bodies`, trusted while `etag` is current."""

    etag: str
    body: bytes
    last_updated: datetime | None = None  # a linked page's last entity's


# The newest rendering of each feed's subscription document (keyed by slug) and of its
# unsealed linked pages, trusted only while their ETag is current, so repeated polls
# between two writes render nothing.
subscription_bodies = PageCache(lambda: settings.FEEDPUB_PAGE_CACHE_BYTES // 8)


# Archive pages whose bytes are final, kept in each process (see archives/documents/pagecache.py).
final_pages = PageCache(lambda: settings.FEEDPUB_PAGE_CACHE_BYTES)


class FrozenDocument(Document):
    """A sealed page's frozen bytes (`_body`, `_content_etag`, `_modified`), served by
    Django and, once exported (archives/storage/export.py), by nginx from a file: while
    `exported_as_file`, its ETags are the file's (`file_etag`, see ArchiveDocument for why
    they are strong validators), else the hash of its bytes."""

    exported_as_file = True
    # Set by each subclass's constructor.
    _body: bytes
    _content_etag: str
    _modified: datetime

    @cached_property
    def _etag(self) -> str:
        if not self.exported_as_file:
            return self._content_etag
        return file_etag(visible_second(self._modified), len(self._body))

    def etag(self) -> str:
        return self._etag

    @cached_property
    def _gzip_etag(self) -> str:
        if not self.exported_as_file:
            return gzip_etag(self._content_etag)
        return file_etag(visible_second(self._modified), len(self.gzipped()))

    def gzip_etag(self) -> str:
        return self._gzip_etag

    def gzipped(self) -> bytes:
        return gzipped(self._content_etag, self._body)

    def modified(self) -> datetime:
        return self._modified

    def body(self) -> bytes:
        return self._body
