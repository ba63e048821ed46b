"""The conformance checker: clean on our own server, and each broken feed caught by its rule."""

from __future__ import annotations

import io
import json
import os
import random
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from feedpub_consumer.check import CheckFailed, content_hash, save_state
from feedpub_consumer.checking import check_feed
from feedpub_consumer.http import Limits

from .broken_feeds import IMMUTABLE, Document, FeedServer, LinkedFeed, at, entry, feed_document
from .feeds_live import make_live_feed, random_history


def codes(result) -> set[tuple[str, str]]:
    """(code, path) of every problem, paths without the server's address."""
    return {(problem.code, "/" + problem.url.split("/", 3)[3]) for problem in result.problems}


@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    return make_live_feed(live_server, settings)


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


# Our own server ---------------------------------------------------------------------


def test_our_own_feed_is_clean(live_feed):
    feed, url = live_feed
    random_history(feed, random.Random(11), 40, [f"k{n}" for n in range(10)])
    result = check_feed(url, sample=5)
    assert result.problems == []
    feed.refresh_from_db()
    assert result.documents == feed.sealed_pages + 1
    assert result.complete


def test_our_own_feed_stays_clean_over_time_with_a_state_file(live_feed, tmp_path):
    feed, url = live_feed
    rng = random.Random(12)
    keys = [f"k{n}" for n in range(6)]
    random_history(feed, rng, 15, keys)
    state = str(tmp_path / "pages.json")
    assert check_feed(url, state_path=state, sample=0).problems == []
    random_history(feed, rng, 15, keys)  # seals pages: older ones gain next-archive links
    assert check_feed(url, state_path=state, sample=0).problems == []


def test_the_checkfeed_command_exits_0_on_our_clean_feed(live_feed):
    feed, url = live_feed
    random_history(feed, random.Random(13), 10, ["a", "b", "c"])
    out, errors = io.StringIO(), io.StringIO()
    call_command("checkfeed", url, stdout=out, stderr=errors)
    assert out.getvalue() == ""
    assert "0 problems" in errors.getvalue()


# Hand-made feeds ----------------------------------------------------------------------


def test_a_correct_hand_made_feed_is_clean(server):
    feed = LinkedFeed(server, pages=3)
    result = check_feed(feed.subscription)
    assert result.problems == []
    assert result.documents == 4


def test_it_finds_a_loop(server):
    feed = LinkedFeed(server, pages=3)
    feed.pages[0].prev = feed.pages[2].path
    feed.publish()
    assert ("rfc5005.loop", "/archives/1") in codes(check_feed(feed.subscription, sample=0))


def test_it_finds_a_one_way_link(server):
    feed = LinkedFeed(server, pages=3)
    feed.pages[0].next = None  # page 2 says prev-archive page 1, page 1 has no next-archive
    feed.publish()
    found = codes(check_feed(feed.subscription, sample=0))
    assert ("rfc5005.one-way", "/archives/1") in found


def test_it_finds_a_next_archive_link_that_points_elsewhere(server):
    feed = LinkedFeed(server, pages=3)
    feed.pages[0].next = feed.pages[2].path
    feed.publish()
    found = codes(check_feed(feed.subscription, sample=0))
    assert ("rfc5005.one-way", "/archives/1") in found
    assert ("rfc5005.one-way", "/archives/3") in found


def test_it_finds_a_missing_page(server):
    feed = LinkedFeed(server, pages=3)
    del server.documents["/archives/2"]
    result = check_feed(feed.subscription, sample=0)
    assert ("rfc5005.unresolved", "/archives/3") in codes(result)
    assert any("404" in p.message for p in result.problems)


def test_it_follows_next_archive_links_to_pages_the_backward_walk_missed(server):
    feed = LinkedFeed(server, pages=3)
    server.documents["/feed"] = feed.render(feed.pages[-1].__class__(
        "/feed", [("urn:x:7", at(7), False)], prev="/archives/2", archive=False))
    result = check_feed(feed.subscription, sample=0)
    assert ("rfc5005.one-way", "/feed") in codes(result)  # not the newest archive page
    assert result.documents == 4  # page 3 was reached forward


def test_it_finds_out_of_order_timestamps(server):
    feed = LinkedFeed(server, pages=3)
    feed.pages[1].entries = [("urn:x:3", at(0.5), False), ("urn:x:4", at(4), False)]
    feed.publish()
    found = codes(check_feed(feed.subscription, sample=0))
    assert ("pmh.order", "/archives/2") in found
    assert ("pmh.prev-updated", "/archives/1") in found


def test_it_finds_a_document_older_than_its_entries(server):
    server.documents["/f"] = Document(feed_document(
        updated=at(1), links={}, entries=[entry("urn:x:1", at(5), alternate=None,
                                                deleted=True)]))
    assert ("pmh.doc-updated", "/f") in codes(check_feed(server.url("/f"), sample=0))


def test_it_finds_malformed_deletion_entries(server):
    server.documents["/f"] = Document(feed_document(updated=at(9), links={}, entries=[
        entry("urn:x:1", at(1), alternate=None, content="<content>gone</content>"),
        entry("urn:x:2", at(2), alternate=None, content='<content src="http://x.org/"/>'),
        entry("urn:x:3", at(3), content="<content/>"),
    ]))
    result = check_feed(server.url("/f"), sample=0)
    messages = [p.message for p in result.problems if p.code.startswith("pmh.")]
    assert any("urn:x:1" in m and "non-empty content" in m for m in messages)
    assert any("urn:x:2" in m and "src" in m for m in messages)
    assert any("urn:x:3" in m and "neither an active entry" in m for m in messages)


def test_it_finds_an_alternate_link_that_does_not_resolve(server):
    feed = LinkedFeed(server, pages=1)
    for path in list(server.documents):
        if path.startswith("/records/"):
            server.documents[path].status = 410
    result = check_feed(feed.subscription, sample=2)
    assert len([p for p in result.problems if p.code == "pmh.alternate"]) == 2


def test_it_finds_an_archive_page_without_its_markers(server):
    server.documents["/a"] = Document(feed_document(updated=at(1), links={}, entries=[]))
    server.documents["/f"] = Document(feed_document(
        updated=at(2), links={"prev-archive": server.url("/a")}, complete=True, entries=[]))
    found = codes(check_feed(server.url("/f"), sample=0))
    assert ("rfc5005.archive", "/a") in found
    assert ("rfc5005.complete", "/f") in found


def test_it_finds_an_archive_page_without_a_current_link(server):
    server.documents["/a"] = Document(feed_document(updated=at(1), links={}, archive=True,
                                                    entries=[]))
    assert ("rfc5005.current", "/a") in codes(check_feed(server.url("/a"), sample=0))


def test_it_finds_a_changed_archive_page(server, tmp_path):
    feed = LinkedFeed(server, pages=3)
    state = str(tmp_path / "pages.json")
    assert check_feed(feed.subscription, state_path=state, sample=0).problems == []
    feed.pages[0].entries[0] = ("urn:x:1", at(1), True)  # rewritten history
    feed.publish()
    result = check_feed(feed.subscription, state_path=state, sample=0)
    assert codes(result) == {("immutability.changed", "/archives/1")}


def test_gaining_a_next_archive_link_is_not_a_change(server, tmp_path):
    feed = LinkedFeed(server, pages=2)
    state = str(tmp_path / "pages.json")
    check_feed(feed.subscription, state_path=state, sample=0)
    feed.pages[-1].archive = True  # seal: the subscription's entries become page 3
    feed.pages[-1].path = "/archives/3"
    feed.pages[-2].next = "/archives/3"
    feed.pages.append(feed.pages[-1].__class__("/feed", [("urn:x:9", at(9), False)],
                                               prev="/archives/3", archive=False))
    feed.publish()
    assert check_feed(feed.subscription, state_path=state, sample=0).problems == []


def test_the_content_hash_ignores_only_the_next_archive_link():
    base = feed_document(updated=at(1), links={"current": "http://x/f"}, archive=True, entries=[])
    linked = feed_document(updated=at(1), links={"current": "http://x/f",
                                                 "next-archive": "http://x/2"},
                           archive=True, entries=[])
    changed = feed_document(updated=at(2), links={"current": "http://x/f"}, archive=True,
                            entries=[])
    assert content_hash(base) == content_hash(linked)
    assert content_hash(base) != content_hash(changed)


def test_relative_links_resolve_against_the_url_after_redirects(server):
    server.documents["/feed"] = Document(b"", status=301,
                                         extra_headers={"Location": "/v2/feed"})
    server.documents["/v2/feed"] = Document(
        feed_document(updated=at(2), links={"prev-archive": "archives/1"},
                      entries=[entry("urn:x:2", at(2))]),
        extra_headers={"Link": '<archives/1>; rel="prev-archive"'})
    server.documents["/v2/archives/1"] = Document(feed_document(
        updated=at(1), archive=True, links={"current": "../feed"},
        entries=[entry("urn:x:1", at(1))]))
    result = check_feed(server.url("/feed"), sample=0)
    assert result.problems == []
    assert result.documents == 2


def with_entity(body: bytes, value: str) -> bytes:
    """The document with an internal DTD subset declaring &org;, used in its entries' titles."""
    doctype = f'<!DOCTYPE feed [<!ENTITY org "{value}">]>\n'.encode()
    body = body.replace(b"<title>A record</title>", b"<title>A record of &org;</title>")
    return body.replace(b"<feed ", doctype + b"<feed ", 1)


def test_a_page_that_declares_and_uses_an_entity_is_checked_with_a_state_file(server,
                                                                             tmp_path):
    feed = LinkedFeed(server, pages=2)
    page = server.documents["/archives/1"]
    page.body = with_entity(page.body, "Example Org")
    state = str(tmp_path / "pages.json")
    assert check_feed(feed.subscription, state_path=state, sample=0).problems == []
    assert check_feed(feed.subscription, state_path=state, sample=0).problems == []
    page.body = page.body.replace(b"Example Org", b"Another Org")  # what the entity means
    result = check_feed(feed.subscription, state_path=state, sample=0)
    assert codes(result) == {("immutability.changed", "/archives/1")}


def test_the_content_hash_of_a_page_with_an_entity_is_that_of_its_expansion():
    body = feed_document(updated=at(1), links={}, archive=True, entries=[entry("urn:x:1", at(1))])
    expanded = body.replace(b"<title>A record</title>", b"<title>A record of Example Org</title>")
    assert content_hash(with_entity(body, "Example Org")) == content_hash(expanded)


def test_the_content_hash_of_a_page_c14n_refuses_is_still_a_hash():
    body = feed_document(updated=at(1), links={}, archive=True, entries=[],
                         extra='<x:ext xmlns:x="relative/namespace"/>')  # C14N 1.0 refuses it
    assert len(content_hash(body)) == 64


def test_two_checks_saving_one_state_file_at_once_do_not_clash(tmp_path, monkeypatch):
    path = str(tmp_path / "pages.json")
    real_replace, renamed = os.replace, []

    def replace(source, target):
        renamed.append(source)
        if len(renamed) == 1:  # another run saves between this one's write and its rename
            save_state(path, {"version": 1, "pages": {"b": {}}})
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    save_state(path, {"version": 1, "pages": {"a": {}}})
    assert len(set(renamed)) == 2
    assert json.loads(Path(path).read_text())["pages"] == {"a": {}}  # the last rename wins
    assert os.listdir(tmp_path) == ["pages.json"]


def test_it_finds_an_invalid_document(server):
    body = feed_document(updated=at(1), links={}, entries=[entry("urn:x:1", at(1))])
    server.documents["/f"] = Document(body.replace(b"<title>A record</title>", b""))
    found = codes(check_feed(server.url("/f"), sample=0))
    assert ("atom.relaxng", "/f") in found


def test_it_finds_a_violated_schematron_rule(server):
    body = feed_document(updated=at(1), links={}, entries=[entry("urn:x:1", at(1))])
    server.documents["/f"] = Document(body.replace(b"<author><name>Tests</name></author>", b""))
    result = check_feed(server.url("/f"), sample=0)
    assert any(p.code == "atom.schematron" and "atom:author" in p.message
               for p in result.problems)


def test_a_link_that_is_not_a_url_is_a_problem_not_a_crash(server):
    feed = LinkedFeed(server, pages=2)
    page = server.documents["/archives/2"]
    page.body = page.body.replace(b'href="http://127.0.0.1', b'href="http://[oops', 1)
    page.extra_headers["Link"] = '<http://[oops/>; rel="prev-archive"'
    assert ("atom.xml", "/archives/2") in codes(check_feed(feed.subscription, sample=0))


def test_it_finds_a_body_that_is_not_xml(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"] = Document(b"<feed><oops>")
    assert ("atom.xml", "/archives/1") in codes(check_feed(feed.subscription, sample=0))


def test_it_finds_http_problems(server):
    feed = LinkedFeed(server, pages=2)
    subscription = server.documents["/feed"]
    subscription.cache_control = IMMUTABLE
    subscription.conditional = False
    subscription.content_type = "text/xml"
    page = server.documents["/archives/2"]
    page.etag, page.last_modified = False, None
    page.extra_headers["Link"] = f'<{server.url("/elsewhere")}>; rel="prev-archive"'
    found = codes(check_feed(feed.subscription, sample=0))
    assert {("http.immutable", "/feed"), ("http.revalidation", "/feed"),
            ("http.content-type", "/feed"), ("http.validators", "/archives/2"),
            ("http.link-header", "/archives/2")} <= found


def test_it_finds_immutable_cache_control_on_the_newest_archive_page(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/2"].cache_control = IMMUTABLE
    assert ("http.immutable", "/archives/2") in codes(check_feed(feed.subscription, sample=0))


def test_it_stops_when_the_request_budget_is_spent(server):
    feed = LinkedFeed(server, pages=5)
    result = check_feed(feed.subscription, limits=Limits(max_requests=6))
    assert not result.complete
    assert result.requests == 6


@pytest.mark.parametrize("max_requests", [7, 8])
def test_a_spent_budget_is_not_reported_as_a_problem_of_the_feed(server, max_requests):
    feed = LinkedFeed(server, pages=5)
    result = check_feed(feed.subscription, limits=Limits(max_requests=max_requests))
    assert not result.complete
    assert result.problems == []


def test_it_stops_at_the_run_deadline_without_blaming_the_page_it_was_reading(server):
    feed = LinkedFeed(server, pages=4)
    for number in range(1, 5):
        server.documents[f"/archives/{number}"].delay = 0.5
    started = time.monotonic()
    result = check_feed(feed.subscription, limits=Limits(deadline=1.2), sample=0,
                        http_checks=False)
    assert time.monotonic() - started < 1.8
    assert not result.complete
    assert result.problems == []
    assert any("run deadline of 1.2 s" in note for note in result.notes)


def test_it_cannot_run_without_a_document_to_start_from(server):
    with pytest.raises(CheckFailed, match="HTTP 404"):
        check_feed(server.url("/nothing"))


# The command --------------------------------------------------------------------------


def test_the_checkfeed_command_prints_one_line_per_problem_and_exits_1(server):
    feed = LinkedFeed(server, pages=3)
    del server.documents["/archives/1"]
    out = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("checkfeed", feed.subscription, "--sample", "0", stdout=out,
                     stderr=io.StringIO())
    assert stop.value.code == 1
    [line] = out.getvalue().splitlines()
    assert line.startswith(server.url("/archives/2") + "  rfc5005.unresolved: prev-archive")


def test_the_checkfeed_command_exits_2_when_it_cannot_run():
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("checkfeed", "http://127.0.0.1:9/feed", "--timeout", "2", stderr=errors)
    assert stop.value.code == 2
    assert errors.getvalue().startswith("checkfeed could not run:")


def test_the_checkfeed_command_refuses_a_corrupt_state_file(server, tmp_path):
    feed = LinkedFeed(server, pages=1)
    state = tmp_path / "pages.json"
    state.write_text("[]")
    with pytest.raises(SystemExit) as stop:
        call_command("checkfeed", feed.subscription, "--state", str(state),
                     stderr=io.StringIO())
    assert stop.value.code == 2


def test_without_http_checks_it_makes_one_request_per_page(server):
    feed = LinkedFeed(server, pages=3)
    result = check_feed(feed.subscription, sample=0, http_checks=False)
    assert result.problems == []
    assert result.requests == 4


def test_it_finds_two_alternate_links_of_one_type_in_an_entry_and_in_a_feed(server):
    html_page = '<link rel="alternate" type="text/html" href="https://e.org/{}"/>'
    twice = entry("urn:x:1", at(1)).replace(
        "</entry>", html_page.format("a") + html_page.format("b") + "</entry>")
    by_language = entry("urn:x:2", at(2)).replace("</entry>", "".join(
        f'<link rel="alternate" type="text/html" hreflang="{lang}" href="https://e.org/{lang}"/>'
        for lang in ("en", "fr")) + "</entry>")
    untyped = entry("urn:x:3", at(3)).replace(
        "</entry>", '<link href="https://e.org/c"/><link href="https://e.org/d"/></entry>')
    server.documents["/f"] = Document(feed_document(
        updated=at(9), links={}, entries=[twice, by_language, untyped],
        extra=html_page.format("feed") + html_page.format("feed-again")))

    result = check_feed(server.url("/f"), sample=0)

    found = sorted(p.message for p in result.problems if p.code == "atom.alternates")
    assert found == [
        "entry urn:x:1 has 2 alternate links of type text/html and no hreflang (RFC 4287 "
        "4.1.2 allows one of each type and hreflang)",
        "entry urn:x:3 has 2 alternate links of no type and no hreflang (RFC 4287 4.1.2 "
        "allows one of each type and hreflang)",
        "the feed has 2 alternate links of type text/html and no hreflang (RFC 4287 4.1.1 "
        "allows one of each type and hreflang)",
    ]


def test_our_feed_with_the_admins_links_example_is_clean(live_feed):
    from archives import validation
    from archives.log import publishing

    feed, url = live_feed
    for n in range(4):  # a sealed page and the subscription document
        publishing.put_record(feed=feed, key=f"k{n}", data={
            "title": f"Record {n}", "links": validation.LINKS_EXAMPLE})
    assert check_feed(url, sample=0).problems == []


def test_the_checker_holds_one_page_at_a_time_not_every_page():
    """A feed of 200 pages of 100 entries (9 MB of bodies, 20,000 entries): what Python
    holds at its peak is about one page's worth, not the whole walk's (a 1,000,000-entry
    feed must stay under 200 MB: bench/checkfeed_memory.py)."""
    import tracemalloc

    from bench.harvest_memory import serve

    server, feed = serve(pages=200, per_page=100)
    try:
        page_bytes = len(feed.document("/archives/1"))
        tracemalloc.start()
        result = check_feed(f"{feed.base}/feed", sample=5, http_checks=False,
                            state_path=None, limits=Limits(max_requests=400))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.shutdown()
    assert result.documents == 200
    assert result.complete
    assert peak < 40 * page_bytes  # every page kept would be 200 bodies and their entries
