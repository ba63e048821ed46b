"""The registry of document kinds (archives/documents/kinds.py) is the one list that routes,
WebSub topics and deliveries, long polling, HEAD, Subscription.format and the deploy's nginx
read: every registered kind is served, and a kind registered in a test (a plain-text twin of
the subscription document) is routed, answers HEAD, is a topic and is long-polled with no
other change, while the nginx template, which cannot read Python, is held to the list."""

from __future__ import annotations

import importlib
import re
import types
import uuid
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.urls import clear_url_caches, include, path, resolve, reverse

from archives import urls as archive_urls
from archives.documents import atom, kinds, urls
from archives.documents.feeds import SubscriptionDocument
from archives.log import publishing
from archives.models import Subscription
from archives.push import hub, subscriptions
from archives.serving import longpoll, views
from archives.storage import snapshots

TEMPLATE = Path(__file__).resolve().parent.parent / "deploy" / "nginx" / "feedpub.conf.template"
SNAPSHOT_ID = uuid.UUID("00000000-0000-4000-8000-000000000000")


def sample_arguments(pattern: str, *, snapshot_id: uuid.UUID = SNAPSHOT_ID) -> list:
    """Arguments for a route's converters, in order: what exists in `documents` below."""
    samples = {"slug": "books", "number": 1, "snapshot_id": snapshot_id, "key": "k1",
               "version": 1}
    return [samples[name] for name in re.findall(r"<(?:\w+:)?(\w+)>", pattern)]


def body(response) -> bytes:
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


def sample_path(kind: kinds.Kind, **overrides) -> str:
    return reverse(kind.route, args=sample_arguments(kind.pattern, **overrides))


# Every kind as registered ----------------------------------------------------------------

def test_kind_names_and_topic_formats_are_each_used_once():
    names = [kind.name for kind in kinds.KINDS]
    formats = [kind.topic for kind in kinds.topics()]
    assert len(set(names)) == len(names)
    assert len(set(formats)) == len(formats)
    assert set(views.OWN_VIEWS) <= set(names)  # a view of its own is a registered kind's
    # Subscriptions store the format: it must fit the column.
    assert max(map(len, formats)) <= Subscription._meta.get_field("format").max_length


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_each_kind_is_routed_to_its_pattern(kind):
    path = sample_path(kind)
    match = resolve(path)
    assert (match.namespace, match.url_name) == (kinds.NAMESPACE, kind.name)
    assert kind.url(*sample_arguments(kind.pattern)) == urls.absolute(path)


@pytest.fixture
def documents(sealed_feed, settled):
    """A feed with a document of every kind: sealed pages, a record, a schema, a snapshot."""
    publishing.update_feed(feed=sealed_feed, record_schema={"type": "object"})
    snapshot = snapshots.take_snapshot(sealed_feed)
    return {"snapshot_id": snapshot.uuid}


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_each_kind_answers_head_as_get_without_a_body(client, documents, kind):
    path = sample_path(kind, **documents)
    got, head = client.get(path), client.head(path)
    assert got.status_code in (200, 302), path
    assert head.status_code == got.status_code
    assert body(head) == b""
    for name in ("Content-Type", "ETag", "Link", "Location", "Cache-Control"):
        assert head.get(name) == got.get(name), name
    # HEAD claims the length GET has, or none.
    assert head.get("Content-Length") in (None, got.get("Content-Length"))


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_topics_are_exactly_the_kinds_marked_as_topics(documents, kind):
    url = urls.absolute(sample_path(kind, **documents))
    if kind.topic:
        feed, format = hub.find_topic(url)
        assert (feed.slug, format) == ("books", kind.topic)
        assert hub.topic_url(feed.slug, format) == url
    elif kind is not hub.LINKED_PAGE:  # a linked page names the entry point's topic
        with pytest.raises(hub.HubRequestError, match="is not a topic of this hub"):
            hub.find_topic(url)


def test_a_linked_page_names_its_entry_points_topic(documents):
    feed, format = hub.find_topic(urls.linked_page_url("books", 1))
    assert hub.topic_url(feed.slug, format) == urls.linked_entry_point_url("books")


def test_subscription_formats_are_the_topics_formats(db):
    field = Subscription._meta.get_field("format")
    assert [value for value, _ in field.choices] == [kind.topic for kind in kinds.topics()]
    with pytest.raises(ValidationError):
        field.clean("archive", None)


def long_poll_scope(path: str, method: str = "GET") -> dict:
    return {"type": "http", "method": method, "path": path, "headers": [], "root_path": ""}


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_long_polling_holds_exactly_the_long_polled_kinds(kind):
    path = sample_path(kind)
    expected = "books" if kind.long_polled else None
    assert longpoll.long_polled_feed(long_poll_scope(path)) == expected
    assert longpoll.long_polled_feed(long_poll_scope(path, "HEAD")) == expected
    assert longpoll.long_polled_feed(long_poll_scope(path, "POST")) is None


# The deploy's nginx ------------------------------------------------------------------------

def nginx_long_poll_patterns(template: str) -> list[re.Pattern]:
    """The regular expressions of the template's long-poll map, which send a request to
    the ASGI service: keys of `$uri $http_prefer` that map to 1."""
    block = re.search(r'map "\$uri \$http_prefer" \$feedpub_long_poll \{(.*?)\n\}', template,
                      re.DOTALL)
    assert block, "the template has no long-poll map"
    patterns = []
    for key, value in re.findall(r'^\s*"(~\*?[^"]+)"\s+(\S+);', block.group(1), re.MULTILINE):
        assert value == "1"
        flags = re.IGNORECASE if key.startswith("~*") else 0
        patterns.append(re.compile(key.lstrip("~*"), flags))
    assert patterns, "the long-poll map has no pattern"
    return patterns


def nginx_sends_to_long_polling(patterns: list[re.Pattern], path: str) -> bool:
    return any(pattern.search(f"{path} wait=10") for pattern in patterns)


def routes_held_by_nginx_but_not_by_the_registry(template: str) -> list[str]:
    """Every route of the app's URLconf (a sample URL of each) on which nginx and the
    registry disagree about long polling: none, when the template matches the registry."""
    patterns = nginx_long_poll_patterns(template)
    disagree = []
    for route in archive_urls.urlpatterns:
        pattern = str(route.pattern)
        if route.name is None or pattern.startswith("^"):  # the date routes: re_path
            continue
        path = reverse(f"{kinds.NAMESPACE}:{route.name}", args=sample_arguments(pattern))
        kind = kinds.get(route.name)
        if nginx_sends_to_long_polling(patterns, path) != bool(kind and kind.long_polled):
            disagree.append(route.name)
    return disagree


def test_the_nginx_long_poll_map_sends_exactly_the_long_polled_kinds():
    template = TEMPLATE.read_text()
    assert routes_held_by_nginx_but_not_by_the_registry(template) == []
    patterns = nginx_long_poll_patterns(template)
    # A `wait` is needed; another preference alone goes to the web service.
    assert not any(pattern.search("/feeds/books/ respond-async") for pattern in patterns)


def test_the_nginx_check_fails_on_a_template_that_misses_a_long_polled_kind():
    template = TEMPLATE.read_text().replace("(rss/)?", "")
    assert routes_held_by_nginx_but_not_by_the_registry(template) == ["rss"]


# A kind registered here, and nowhere else -------------------------------------------------

def render_text(feed, rows) -> bytes:
    return "".join(f"{row.seq} {row.title}\n" for row in rows).encode()


class TextSubscriptionDocument(SubscriptionDocument):
    """A plain-text twin of the subscription document: its class and its renderer."""

    content_type = "text/plain; charset=utf-8"
    kind = "text-subscription"
    render = staticmethod(render_text)
    feed_links = staticmethod(atom.subscription_links)


TEXT = kinds.Kind("text", "feeds/<slug:slug>/feed.txt", TextSubscriptionDocument,
                  "plain-text subscription document", find=TextSubscriptionDocument.for_slug,
                  topic="text", long_polled=True)


@pytest.fixture
def text_kind(monkeypatch, settings):
    """TEXT registered: the one place a new kind is declared. The URLconf is built anew, as
    a process that starts with the kind builds it."""
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, TEXT))
    importlib.reload(archive_urls)
    root = types.ModuleType("urls_with_text_kind")
    root.urlpatterns = [path("", include("archives.urls"))]  # type: ignore[attr-defined]
    settings.ROOT_URLCONF = root  # (clears the URL caches)
    yield TEXT
    monkeypatch.undo()
    importlib.reload(archive_urls)
    clear_url_caches()
    urls.url_path.cache_clear()


def test_a_registered_kind_is_served_with_head(client, sealed_feed, text_kind):
    got = client.get("/feeds/books/feed.txt")
    assert got.status_code == 200
    assert got["Content-Type"] == "text/plain; charset=utf-8"
    assert got.content == b"7 Record 2\n"  # the one unsealed entry (deleting k2)
    head = client.head("/feeds/books/feed.txt")
    assert (head.status_code, head["ETag"]) == (200, got["ETag"])
    assert body(head) == b""
    assert client.get("/feeds/nope/feed.txt").status_code == 404


def test_a_registered_topic_is_subscribed_to_and_delivered(sealed_feed, text_kind):
    topic = urls.absolute("/feeds/books/feed.txt")
    request = QueryDict(mutable=True)
    request.update({"hub.mode": "subscribe", "hub.topic": topic,
                    "hub.callback": "https://subscriber.example/cb"})
    subscription = hub.record_request(request)
    assert (subscription.topic, subscription.format) == (topic, "text")
    subscription.full_clean()  # its format is one of the choices
    content = subscriptions.current_content(sealed_feed, "text")
    assert (content.body, content.content_type) == (b"7 Record 2\n", "text/plain; charset=utf-8")


def test_a_registered_kind_is_long_polled_and_nginx_must_follow(text_kind):
    assert longpoll.long_polled_feed(long_poll_scope("/feeds/books/feed.txt")) == "books"
    # The template does not know it yet: the check above would fail until it does.
    assert routes_held_by_nginx_but_not_by_the_registry(TEMPLATE.read_text()) == ["text"]
