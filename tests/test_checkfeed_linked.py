"""The checker on linked-pages feeds: clean on our own server, and each hand-made broken
feed caught by its rule."""

from __future__ import annotations

import io
import random

import pytest
from django.core.management import call_command
from feedpub_consumer.check import CheckFailed
from feedpub_consumer.checking import check_feed

from archives.models import Feed
from archives.storage.snapshots import take_snapshot

from .broken_feeds import IMMUTABLE, FeedServer, at
from .broken_linked_feeds import Entity, LinkedPagesFeed, entity
from .feeds_live import make_live_feed, random_history


def codes(result) -> set[tuple[str, str]]:
    """(code, path) of every problem, paths without the server's address."""
    return {(problem.code, "/" + problem.url.split("/", 3)[3]) for problem in result.problems}


# Our own server ---------------------------------------------------------------------


@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    feed, atom_url = make_live_feed(live_server, settings)
    return feed, atom_url, f"{live_server.url}/feeds/live/pages/latest"


def test_our_own_feed_is_clean_in_both_formats(live_feed):
    feed, atom_url, entry = live_feed
    rng = random.Random(21)
    random_history(feed, rng, 25, [f"k{n}" for n in range(8)])
    take_snapshot(Feed.objects.get(pk=feed.pk))
    random_history(feed, rng, 8, [f"k{n}" for n in range(8)])
    linked = check_feed(entry)
    assert linked.problems == []
    assert linked.complete
    feed.refresh_from_db()
    assert linked.documents == -(-feed.last_seq // feed.page_size)
    assert check_feed(atom_url, sample=3).problems == []


def test_our_own_feed_stays_clean_over_time_with_a_state_file(live_feed, tmp_path):
    """Between the checks the newest page gains entities and its next link, new pages come."""
    feed, _, entry = live_feed
    rng = random.Random(22)
    keys = [f"k{n}" for n in range(6)]
    state = str(tmp_path / "pages.json")
    for _ in range(3):
        random_history(feed, rng, 7, keys)
        assert check_feed(entry, state_path=state).problems == []


def test_the_checkfeed_command_exits_0_on_our_clean_linked_pages(live_feed):
    feed, _, entry = live_feed
    random_history(feed, random.Random(23), 10, ["a", "b", "c"])
    out, errors = io.StringIO(), io.StringIO()
    call_command("checkfeed", entry, "--format", "linked-pages", stdout=out, stderr=errors)
    assert out.getvalue() == ""
    assert "0 problems in 4 documents" in errors.getvalue()


# Hand-made feeds: one broken rule each ----------------------------------------------------


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def check(feed: LinkedPagesFeed, **kwargs):
    return check_feed(feed.latest, **kwargs)


def test_a_correct_hand_made_feed_is_clean(server):
    feed = LinkedPagesFeed(server, pages=3)
    result = check(feed)
    assert result.problems == []
    assert result.documents == 3


@pytest.mark.parametrize("newline", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_line_ends_may_be_crlf_or_lf(server, newline):
    assert check(LinkedPagesFeed(server, pages=2, newline=newline)).problems == []


def test_it_finds_a_page_that_is_not_multipart(server):
    feed = LinkedPagesFeed(server, pages=3)
    server.documents["/pages/2"].body = b"--other-boundary\r\nContent-ID: <x>\r\n\r\n"
    result = check(feed)
    assert codes(result) == {("linked.multipart", "/pages/2")}
    assert result.documents == 3  # its links are headers: followed all the same


def test_it_finds_a_missing_or_wrong_self_link(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].self_link = False
    feed.pages[1].self_link = "/pages/elsewhere"
    feed.publish()
    result = check(feed)
    assert {("linked.self", "/pages/1"), ("linked.self", "/pages/2")} <= codes(result)
    assert any("no self link" in p.message for p in result.problems)


def test_it_finds_a_prev_link_without_its_next_link(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].next = None  # page 2 says prev page 1; page 1 has no next
    feed.publish()
    assert codes(check(feed)) == {("linked.prev-next", "/pages/1")}


def test_it_finds_prev_and_next_links_that_disagree(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[2].prev = "/pages/1"  # page 3 skips page 2, which says next page 3
    feed.publish()
    server.documents["/pages/latest"].extra_headers["Location"] = "/pages/2"
    assert codes(check(feed)) == {("linked.prev-next", "/pages/1"),
                                  ("linked.prev-next", "/pages/3")}


def test_it_finds_two_next_links(server):
    feed = LinkedPagesFeed(server, pages=2)
    page = server.documents["/pages/1"]
    page.extra_headers["Link"] += f', <{server.url("/pages/9")}>; rel="next"'
    assert ("linked.prev-next", "/pages/1") in codes(check(feed))


def test_a_page_that_lost_its_prev_link_is_no_problem(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[1].prev = None  # pages before page 2 cleaned up
    feed.publish()
    result = check(feed)
    assert result.problems == []
    assert result.documents == 2


def test_it_finds_a_link_that_does_not_resolve(server):
    feed = LinkedPagesFeed(server, pages=3)
    del server.documents["/pages/2"]
    result = check(feed)
    assert ("linked.unresolved", "/pages/3") in codes(result)
    assert any("prev" in p.message and "404" in p.message for p in result.problems)


def test_it_finds_a_loop_along_prev(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].prev = "/pages/3"
    feed.publish()
    assert ("linked.loop", "/pages/1") in codes(check(feed))


def test_it_finds_a_loop_along_next(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[2].next = "/pages/1"  # page 1 has no prev: only next loops
    feed.publish()
    server.documents["/pages/latest"].extra_headers["Location"] = "/pages/2"
    assert ("linked.loop", "/pages/3") in codes(check(feed))


def test_it_finds_an_empty_page(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[1].entities = []
    feed.publish()
    assert ("linked.empty-page", "/pages/2") in codes(check(feed))


def test_it_finds_entity_dates_that_go_back_within_and_across_pages(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].entities[1].modified = at(0.5)  # older than entity 1, on its page
    feed.pages[2].entities[0].modified = at(3.5)  # older than page 2's last entity
    feed.pages[1].entities[0].modified = None
    feed.publish()
    found = check(feed)
    assert {("linked.entity-last-modified", "/pages/1"),
            ("linked.entity-last-modified", "/pages/2"),
            ("linked.entity-last-modified", "/pages/3")} <= codes(found)
    assert any("previous page" in p.message for p in found.problems)


def test_it_finds_a_page_date_that_is_not_its_last_entity_s(server):
    feed = LinkedPagesFeed(server, pages=3)
    server.documents["/pages/2"].last_modified = at(30)
    server.documents["/pages/1"].last_modified = None
    found = codes(check(feed))
    assert ("linked.page-last-modified", "/pages/2") in found
    assert ("linked.page-last-modified", "/pages/1") in found
    assert ("linked.page-last-modified", "/pages/3") in found  # earlier than page 2's


def test_it_finds_missing_and_repeated_content_ids(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].entities[0].content_id = None
    feed.pages[2].entities[1].content_id = feed.pages[1].entities[0].content_id
    feed.publish()
    result = check(feed)
    assert ("linked.content-id", "/pages/1") in codes(result)
    [repeated] = [p for p in result.problems if "<3@hand-made>" in p.message]
    assert repeated.code == "linked.content-id"
    assert {repeated.url, repeated.message.split()[-2]} == {server.url("/pages/2"),
                                                           server.url("/pages/3")}


def test_it_finds_missing_and_unknown_operation_types(server):
    feed = LinkedPagesFeed(server, pages=2)
    feed.pages[0].entities[0].operation = None
    feed.pages[1].entities[0].operation = "http-equiv=MOVE"
    feed.pages[1].entities[1].operation = "DELETE"  # plain is fine too
    feed.publish()
    found = codes(check(feed))
    assert found == {("linked.operation-type", "/pages/1"),
                     ("linked.operation-type", "/pages/2")}


def test_it_finds_http_problems(server):
    feed = LinkedPagesFeed(server, pages=2)
    newest = server.documents["/pages/2"]
    newest.cache_control = IMMUTABLE
    newest.conditional = False
    server.documents["/pages/1"].head_headers["Content-Type"] = "multipart/mixed; boundary=x"
    found = codes(check(feed))
    assert found == {("http.immutable", "/pages/2"), ("http.revalidation", "/pages/2"),
                     ("http.head", "/pages/1")}


# Over time: what a published page may and may not do ----------------------------------


def twice(feed: LinkedPagesFeed, tmp_path, change) -> set[tuple[str, str]]:
    state = str(tmp_path / "pages.json")
    assert check(feed, state_path=state).problems == []
    change()
    feed.publish()
    return {found for found in codes(check(feed, state_path=state))
            if found[0] == "linked.immutability"}


def test_the_three_allowed_changes_are_no_problem(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)

    def change():
        feed.pages[-1].entities.append(entity(7))  # entities on the page without next
        feed.add_page(entity(8))  # ... which gains its next link
        feed.pages[1].prev = None  # a prev link removed

    assert twice(feed, tmp_path, change) == set()


def test_a_changed_entity_is_a_problem(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)

    def change():
        feed.pages[0].entities[0].body = b'{"title": "rewritten"}'

    assert twice(feed, tmp_path, change) == {("linked.immutability", "/pages/1")}


def test_entities_added_to_a_page_with_a_next_link_are_a_problem(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)

    def change():
        feed.pages[1].entities.append(entity(9, minute=4.5))

    assert twice(feed, tmp_path, change) == {("linked.immutability", "/pages/2")}


def test_changed_links_are_a_problem(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=4)

    def change():
        feed.pages[1].next = "/pages/4"  # page 2 skips page 3
        feed.pages[2].prev = "/pages/1"  # page 3 names another prev

    assert twice(feed, tmp_path, change) == {("linked.immutability", "/pages/2"),
                                              ("linked.immutability", "/pages/3")}


def test_a_removed_entity_is_a_problem(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=2)

    def change():
        feed.pages[1].entities.pop()

    assert twice(feed, tmp_path, change) == {("linked.immutability", "/pages/2")}


def test_a_state_file_of_an_atom_check_is_refused(server, tmp_path):
    from .broken_feeds import LinkedFeed

    atom, linked = LinkedFeed(server, pages=1), LinkedPagesFeed(server, pages=1)
    state = str(tmp_path / "pages.json")
    check_feed(atom.subscription, state_path=state, sample=0)
    with pytest.raises(CheckFailed, match="atom format, not linked-pages"):
        check(linked, state_path=state)


# The command --------------------------------------------------------------------------


def test_the_checkfeed_command_prints_each_problem_and_exits_1(server):
    feed = LinkedPagesFeed(server, pages=2)
    feed.pages[0].entities[0].operation = None
    feed.publish()
    out = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("checkfeed", feed.latest, stdout=out, stderr=io.StringIO())
    assert stop.value.code == 1
    [line] = out.getvalue().splitlines()
    assert line == (f"{server.url('/pages/1')}  linked.operation-type: <1@hand-made> has "
                    "Operation-Type None, not PUT, DELETE or PATCH")


def test_the_checkfeed_command_exits_2_when_the_entry_point_is_not_there(server):
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("checkfeed", server.url("/pages/latest"), "--format", "linked-pages",
                     stderr=errors)
    assert stop.value.code == 2
    assert "HTTP 404" in errors.getvalue()


def test_without_http_checks_it_makes_one_request_per_page(server):
    feed = LinkedPagesFeed(server, pages=3)
    result = check(feed, http_checks=False)
    assert result.problems == []
    assert result.requests == 3  # the entry point (redirected to page 3), pages 2 and 1


def test_an_entity_without_content_id_is_named_by_its_position(server):
    feed = LinkedPagesFeed(server, pages=1)
    feed.add_page(Entity(None, at(3), "k3", operation=None))
    messages = [p.message for p in check(feed).problems]
    assert "entity 1 has no Content-ID" in messages
