"""The URLs of feedpub's documents, as every document, page and header writes them.

Absolute, built from FEEDPUB_BASE_URL (or the base a re-rendering names) and the URLconf's
paths without the request's script prefix: a document is the same bytes whoever renders it,
from any request or command. Every renderer (Atom, RSS, linked pages, OAI-PMH, the pages for
people) takes its URLs from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.urls import get_script_prefix, reverse

from archives.conf import settings
from archives.models import Feed


def absolute(path: str) -> str:
    return (_rendering_base.get() or settings.FEEDPUB_BASE_URL) + path


# FEEDPUB_BASE_URL, unless a rendering names another: re-rendering frozen documents after a
# move (archives/log/rerendering.py) renders each with the base URL it was sealed with, to
# check that the stored bytes are what this renderer makes of its entries.
_rendering_base: ContextVar[str | None] = ContextVar("rendering_base", default=None)


@contextmanager
def rendered_with_base(base_url: str) -> Iterator[None]:
    """Documents rendered inside this block take their absolute URLs from `base_url`."""
    token = _rendering_base.set(base_url)
    try:
        yield
    finally:
        _rendering_base.reset(token)


@lru_cache(maxsize=16384)
def url_path(name: str, *args: str | int) -> str:
    """A path as the URLconf makes it, without the request's script prefix: the base URL
    alone says where feedpub is mounted, so a document is the same bytes whoever renders
    it (a request under a SCRIPT_NAME, or the sealer's command line). Cached: reverse()
    costs ~20 us and every request builds three or four links."""
    return "/" + reverse(name, args=args).removeprefix(get_script_prefix())


@receiver(setting_changed)
def _forget_paths(*, setting: str, **kwargs) -> None:
    if setting == "ROOT_URLCONF":
        url_path.cache_clear()


def url(name: str, *args: str | int) -> str:
    """The absolute URL of a route, the same from any request or command."""
    return absolute(url_path(name, *args))


def subscription_url(slug: str) -> str:
    return absolute(url_path("archives:subscription", slug))


def archive_url(slug: str, number: int) -> str:
    return absolute(url_path("archives:archive", slug, number))


def record_url(slug: str, key: str) -> str:
    return absolute(url_path("archives:record", slug, key))


def schema_url(slug: str, version: int) -> str:
    """Version `version` of a feed's record schema (what records checked under it link)."""
    return absolute(url_path("archives:schema-version", slug, version))


def record_url_prefix(slug: str) -> str:
    """What every record URL of a feed starts with: its key follows (keys are URL-safe,
    validation.KEY_RE). For documents of many records: record_url's cache would hold a
    URL per key."""
    return record_url(slug, "KEY").removesuffix("KEY")


def html_url(document_url: str) -> str:
    """The page for people of a document (a feed, an archive page, a record): the same URL
    asked for in HTML whatever the request's Accept says."""
    return document_url + "?format=html"


def hub_url() -> str:
    """feedpub's own WebSub hub, which subscription documents name (rel="hub") beside
    their topic URL (rel="self"): archives/push/."""
    return url("archives:websub")


def paged_url(slug: str, number: int | None = None) -> str:
    """/paged/ (number None: the first page, newest entries), else /paged/<number>/."""
    if number is None:
        return url("archives:paged", slug)
    return url("archives:paged-page", slug, number)


def rss_subscription_url(slug: str) -> str:
    return url("archives:rss", slug)


def rss_archive_url(slug: str, number: int) -> str:
    return url("archives:archive-rss", slug, number)


def linked_entry_point_url(slug: str) -> str:
    """A feed's linked pages as a consumer starts reading them: the newest page."""
    return url("archives:linked-latest", slug)


def linked_page_url(slug: str, number: int) -> str:
    return url("archives:linked-page", slug, number)


def document_holding(feed: Feed, seq: int) -> tuple[str, str]:
    """Which document holds entry `seq` of `feed`, as (what people call it, its URL)."""
    if seq <= feed.sealed_seq:
        number = (seq - 1) // feed.page_size + 1
        return f"archive page {number}", archive_url(feed.slug, number)
    return "subscription document", subscription_url(feed.slug)
