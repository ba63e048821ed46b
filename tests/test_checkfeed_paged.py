"""checkfeed on complete and paged feeds: clean on our own server, and hand-made broken ones
caught by their rules (consumer/feedpub_consumer/checkpaged.py)."""

from __future__ import annotations

import io
import random

import pytest
from django.core.management import call_command
from feedpub_consumer.checking import check_feed

from .broken_feeds import IMMUTABLE, Document, FeedServer, at, entry, feed_document
from .feeds_live import make_live_feed, random_history


def codes(result) -> set[tuple[str, str]]:
    """(code, path) of every problem, paths without the server's address."""
    return {(problem.code, "/" + problem.url.split("/", 3)[3]) for problem in result.problems}


@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    feed, _ = make_live_feed(live_server, settings)
    random_history(feed, random.Random(21), 30, [f"k{n}" for n in range(8)])
    feed.refresh_from_db()
    assert feed.sealed_pages > 2
    return feed, f"{live_server.url}/feeds/live/"


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def test_our_complete_feed_is_clean(live_feed):
    _, url = live_feed
    result = check_feed(url + "complete/", sample=3)
    assert result.problems == []
    assert result.documents == 1


def test_our_paged_feed_is_clean_to_its_end(live_feed):
    feed, url = live_feed
    result = check_feed(url + "paged/", sample=3)
    assert result.problems == []
    assert result.documents == feed.sealed_pages + 1
    assert result.complete


def test_the_checkfeed_command_accepts_each_style(live_feed):
    _, url = live_feed
    for style in ("complete/", "paged/", "paged/2/", ""):
        out, errors = io.StringIO(), io.StringIO()
        call_command("checkfeed", url + style, stdout=out, stderr=errors)
        assert out.getvalue() == "", style
        assert "0 problems" in errors.getvalue()


# Hand-made complete feeds ----------------------------------------------------------------


def serve_complete(server: FeedServer, entries: list[str]) -> str:
    server.documents["/complete"] = Document(feed_document(
        updated=at(10), entries=entries, links={"self": server.url("/complete")},
        complete=True))
    return server.url("/complete")


def test_a_correct_hand_made_complete_feed_is_clean(server):
    url = serve_complete(server, [entry("urn:x:1", at(1)), entry("urn:x:2", at(2))])
    assert check_feed(url, sample=0).problems == []


def test_it_finds_a_record_twice_and_a_deletion_in_a_complete_feed(server):
    url = serve_complete(server, [entry("urn:x:1", at(1)), entry("urn:x:1", at(2)),
                                  entry("urn:x:3", at(3), deleted=True)])
    assert codes(check_feed(url, sample=0)) == {("complete.duplicate", "/complete"),
                                                ("complete.deletion", "/complete")}


def test_the_checkfeed_command_exits_1_on_a_broken_complete_feed(server):
    url = serve_complete(server, [entry("urn:x:1", at(1)), entry("urn:x:1", at(1))])
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_status:
        call_command("checkfeed", url, "--sample", "0", stdout=out, stderr=io.StringIO())
    assert exit_status.value.code == 1
    assert "complete.duplicate" in out.getvalue()


# Hand-made paged feeds -------------------------------------------------------------------


class PagedFeed:
    """A correct paged feed of three documents, newest first: /p/0 (entries 5, 4),
    /p/1 (3, 2), /p/2 (1). Tests change `links` or `entries` and publish again."""

    def __init__(self, server: FeedServer):
        self.server = server
        self.entries = {"/p/0": [5, 4], "/p/1": [3, 2], "/p/2": [1]}
        self.links = {
            "/p/0": {"first": "/p/0", "last": "/p/2", "next": "/p/1"},
            "/p/1": {"first": "/p/0", "last": "/p/2", "next": "/p/2", "previous": "/p/0"},
            "/p/2": {"first": "/p/0", "last": "/p/2", "previous": "/p/1"},
        }
        self.publish()

    def publish(self) -> None:
        for path, numbers in self.entries.items():
            links = {"self": path, **self.links[path]}
            self.server.documents[path] = Document(feed_document(
                updated=at(max(numbers)), entries=[entry(f"urn:x:{n}", at(n)) for n in numbers],
                links={rel: self.server.url(href) for rel, href in links.items()}))

    @property
    def url(self) -> str:
        return self.server.url("/p/0")


def test_a_correct_hand_made_paged_feed_is_clean(server):
    feed = PagedFeed(server)
    result = check_feed(feed.url, sample=0)
    assert result.problems == []
    assert result.documents == 3


def test_it_finds_a_paged_loop(server):
    feed = PagedFeed(server)
    feed.links["/p/2"]["next"] = "/p/0"
    feed.publish()
    assert ("paged.loop", "/p/2") in codes(check_feed(feed.url, sample=0))


def test_it_finds_next_and_previous_that_are_not_inverse(server):
    feed = PagedFeed(server)
    feed.links["/p/2"]["previous"] = "/p/0"
    feed.publish()
    assert codes(check_feed(feed.url, sample=0)) == {("paged.previous", "/p/2")}


def test_it_finds_documents_that_disagree_on_first_and_last(server):
    feed = PagedFeed(server)
    feed.links["/p/1"]["first"] = "/p/1"
    feed.links["/p/0"]["last"] = "/p/1"
    feed.links["/p/1"]["last"] = "/p/1"
    feed.links["/p/2"]["last"] = "/p/1"
    feed.publish()
    assert codes(check_feed(feed.url, sample=0)) == {("paged.first", "/p/0"),
                                                     ("paged.last", "/p/2")}


def test_it_finds_an_entry_on_two_paged_documents(server):
    feed = PagedFeed(server)
    feed.entries["/p/2"] = [2, 1]
    feed.publish()
    assert codes(check_feed(feed.url, sample=0)) == {("paged.duplicate", "/p/2")}


def test_it_finds_immutable_on_the_first_paged_document_only(server):
    feed = PagedFeed(server)
    for path in feed.entries:
        server.documents[path].cache_control = IMMUTABLE
    assert codes(check_feed(feed.url, sample=0)) == {("http.immutable", "/p/0")}


def test_it_finds_a_link_header_that_names_other_paged_links(server):
    feed = PagedFeed(server)
    server.documents["/p/1"].extra_headers["Link"] = f'<{server.url("/p/0")}>; rel="next"'
    assert ("http.link-header", "/p/1") in codes(check_feed(feed.url, sample=0))


def test_a_state_file_is_noted_as_unused_on_a_paged_feed(server, tmp_path):
    feed = PagedFeed(server)
    result = check_feed(feed.url, sample=0, state_path=str(tmp_path / "state.json"))
    assert result.problems == []
    assert any("state file is not used" in note for note in result.notes)
