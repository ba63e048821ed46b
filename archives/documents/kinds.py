"""The kinds of document feedpub serves, each at a route of its own, in one list (`KINDS`).

A kind names its route (in the `archives` namespace), its URL pattern, its document class
(which owns its media type, validators and bytes) and how a URL's arguments find its
document, and says whether it is a WebSub topic (the format a subscription to it records)
and whether it is long-polled. Everything that serves or announces documents reads this
list, as Django's sitemaps and DRF's router read theirs: the URLconf, the WebSub hub
(which URLs are topics) and worker (what a topic's subscribers are sent), long polling
(which URLs it may hold), `Subscription.format`'s choices, and the deploy's nginx, whose
long-poll map tests/test_kinds.py holds to it. A new kind is its class and one entry here
(docs/how-it-works/documents.md#adding-a-document-kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from archives.models import Feed

from . import urls
from .base import Document
from .feeds import (
    ArchiveDocument,
    CompleteDocument,
    PagedFeedDocument,
    PagedPageDocument,
    RssArchiveDocument,
    RssSubscriptionDocument,
    SubscriptionDocument,
)
from .linked import LinkedPageDocument, SnapshotIndexDocument, SnapshotPageDocument
from .records import RecordDocument
from .schemas import CurrentSchemaDocument, SchemaVersionDocument

NAMESPACE = "archives"


@dataclass(frozen=True)
class Kind:
    """One kind of document and its route."""

    name: str  # its route's name, in NAMESPACE
    pattern: str  # its route, as django.urls.path() takes it
    document: type[Document]
    label: str  # what people call it (error messages, the admin's choices)
    # The document a URL's arguments name (raises ObjectDoesNotExist: a 404). None: a view
    # of its own serves it (archives/serving/views.py: it negotiates, or redirects).
    find: Callable[..., Document] | None = None
    # The format a WebSub subscription to this kind records ("": not a topic). Kept short
    # and stable: subscriptions store it.
    topic: str = ""
    # Whether a GET or HEAD with `Prefer: wait` may be held until the feed changes
    # (archives/serving/longpoll.py; the deploy's nginx sends exactly these to it).
    long_polled: bool = False

    @property
    def route(self) -> str:
        return f"{NAMESPACE}:{self.name}"

    def url(self, *args: str | int) -> str:
        """The absolute URL of this kind's document (urls.url)."""
        return urls.url(self.route, *args)

    def topic_document(self, feed: Feed, *, read_at: datetime) -> Document | None:
        """What a subscriber to this kind's topic is sent: its document for `feed`, read at
        `read_at` or later (None: it has none yet)."""
        return self.document.for_topic(feed, read_at=read_at)


KINDS: tuple[Kind, ...] = (
    # RFC 5005's archived feed (Atom): the subscription document and its archive pages.
    Kind("subscription", "feeds/<slug:slug>/", SubscriptionDocument,
         "Atom subscription document", topic="atom", long_polled=True),
    Kind("archive", "feeds/<slug:slug>/archives/<int:number>/", ArchiveDocument,
         "archive page"),
    # Their RSS 2.0 twins (RFC 5005 Appendix B).
    Kind("rss", "feeds/<slug:slug>/rss/", RssSubscriptionDocument,
         "RSS subscription document", find=RssSubscriptionDocument.for_slug, topic="rss",
         long_polled=True),
    Kind("archive-rss", "feeds/<slug:slug>/archives/<int:number>/rss/", RssArchiveDocument,
         "RSS archive page"),
    # The linked-pages representation of the same log (its entry point redirects to the
    # newest page, the topic's content), and its snapshots.
    Kind("linked-latest", "feeds/<slug:slug>/pages/latest", LinkedPageDocument,
         "linked-pages entry point", topic="linked"),
    Kind("linked-page", "feeds/<slug:slug>/pages/<int:number>", LinkedPageDocument,
         "linked page", find=LinkedPageDocument.for_page),
    Kind("snapshot-latest", "feeds/<slug:slug>/snapshots/latest", SnapshotIndexDocument,
         "newest snapshot"),
    Kind("snapshot", "feeds/<slug:slug>/snapshots/<uuid:snapshot_id>/", SnapshotIndexDocument,
         "snapshot", find=SnapshotIndexDocument.for_id),
    Kind("snapshot-page", "feeds/<slug:slug>/snapshots/<uuid:snapshot_id>/pages/<int:number>",
         SnapshotPageDocument, "snapshot page", find=SnapshotPageDocument.for_page),
    # RFC 5005's complete feed (the live records) and paged feed (the log, newest first).
    Kind("complete", "feeds/<slug:slug>/complete/", CompleteDocument, "complete feed",
         find=CompleteDocument.for_slug),
    Kind("paged", "feeds/<slug:slug>/paged/", PagedFeedDocument, "paged feed",
         find=PagedFeedDocument.for_slug),
    Kind("paged-page", "feeds/<slug:slug>/paged/<int:number>/", PagedPageDocument,
         "paged feed page"),
    # A record, and the feed's record schema (the version in force, and each version).
    Kind("record", "feeds/<slug:slug>/records/<str:key>", RecordDocument, "record"),
    Kind("schema", "feeds/<slug:slug>/schema", CurrentSchemaDocument, "record schema"),
    Kind("schema-version", "feeds/<slug:slug>/schema/<int:version>", SchemaVersionDocument,
         "record schema version"),
)


# Lookups scan KINDS, a few dozen entries (a microsecond), rather than keep indexes of it
# that could fall out of step with the list.

def get(name: str) -> Kind | None:
    """The kind whose route is `name` (without the namespace), if any."""
    return next((kind for kind in KINDS if kind.name == name), None)


def named(name: str) -> Kind:
    """The kind whose route is `name` (KeyError: none)."""
    kind = get(name)
    if kind is None:
        raise KeyError(name)
    return kind


def topics() -> Iterator[Kind]:
    return (kind for kind in KINDS if kind.topic)


def by_topic(format: str) -> Kind:
    """The kind a subscription's format names (KeyError: none)."""
    kind = next((kind for kind in topics() if kind.topic == format), None)
    if kind is None:
        raise KeyError(format)
    return kind


def long_polled() -> Iterator[Kind]:
    return (kind for kind in KINDS if kind.long_polled)


def subscription_formats() -> list[tuple[str, str]]:
    """`Subscription.format`'s choices: each topic's format and label."""
    return [(kind.topic, kind.label) for kind in topics()]

