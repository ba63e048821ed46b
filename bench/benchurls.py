"""feedpub's URLs plus the two baselines the benchmark measures against.

- `/bench/constant`: a Django view returning constant bytes (those of a sealed archive
  page, so every size matches): the most Django can do per request on this machine.
- `/bench/syndication/<slug>/`: what a Django user would write instead of feedpub, a
  django.contrib.syndication Atom feed of a feed's 50 newest entries.
- `/bench/minimal-put/<slug>/<key>`: a single PUT written plainly in DRF
  (bench/minimal_put.py), the floor bench/single_put.py measures the API's PUT against.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.syndication.views import Feed as SyndicationFeed
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils.feedgenerator import Atom1Feed

from archives.models import Entry, Feed
from bench.minimal_put import MinimalPut
from feedpub.urls import urlpatterns as feedpub_urlpatterns

DEFAULT_FILE = Path(__file__).parent / ".work" / "static" / "page.xml"
CONSTANT_FILE = Path(os.environ.get("BENCH_CONSTANT_FILE", DEFAULT_FILE))
CONSTANT_BODY = CONSTANT_FILE.read_bytes() if CONSTANT_FILE.exists() else b"x" * 20_000


def constant(request: HttpRequest) -> HttpResponse:
    return HttpResponse(CONSTANT_BODY, content_type="application/atom+xml; charset=utf-8")


class NewestEntries(SyndicationFeed):
    """The usual syndication feed: the newest 50 entries, each linking to its record."""

    feed_type = Atom1Feed

    def get_object(self, request: HttpRequest, slug: str) -> Feed:
        return get_object_or_404(Feed, slug=slug)

    def title(self, feed: Feed) -> str:
        return feed.title

    def subtitle(self, feed: Feed) -> str:
        return feed.subtitle

    def link(self, feed: Feed) -> str:
        return feed.get_absolute_url()

    def author_name(self, feed: Feed) -> str:
        return feed.author

    def items(self, feed: Feed):
        return feed.entries.select_related("record__feed").order_by("-seq")[:50]

    def item_title(self, entry: Entry) -> str:
        return entry.title

    def item_description(self, entry: Entry) -> str:
        return entry.summary

    def item_link(self, entry: Entry) -> str:
        return entry.record.get_absolute_url()

    def item_guid(self, entry: Entry) -> str:
        return entry.record.atom_id

    item_guid_is_permalink = False

    def item_updateddate(self, entry: Entry):
        return entry.updated

    def item_pubdate(self, entry: Entry):
        return entry.updated


urlpatterns = [
    path("bench/constant", constant),
    path("bench/syndication/<slug:slug>/", NewestEntries()),
    path("bench/minimal-put/<slug:slug>/<str:key>", MinimalPut.as_view()),
    *feedpub_urlpatterns,
]
