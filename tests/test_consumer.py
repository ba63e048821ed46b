"""The harvester: against our own server (live) and against hand-made feeds."""

from __future__ import annotations

import gc
import gzip
import io
import json
import os
import random
import socket
import time

import pytest
from django.core.management import call_command
from feedpub_consumer import harvest as harvester
from feedpub_consumer import state as state_file
from feedpub_consumer.atom import parse_document
from feedpub_consumer.harvest import HarvestFailed
from feedpub_consumer.harvesting import harvest
from feedpub_consumer.http import FetchError, HttpClient, Limits
from feedpub_consumer.state import HarvestState, StateError
from lxml import etree

from .broken_feeds import Document, FeedServer, LinkedFeed, at, entry, feed_document
from .feeds_live import database_view, make_live_feed, random_history

# Our own server ---------------------------------------------------------------------


@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    return make_live_feed(live_server, settings)


def harvested_view(result) -> dict[str, tuple[str, str]]:
    return {record["id"]: (record["updated"], record["title"]) for record in result.records}


def test_it_rebuilds_exactly_the_live_records_after_random_puts_deletes_and_seals(live_feed,
                                                                                     tmp_path):
    feed, url = live_feed
    rng = random.Random(4287)
    keys = [f"k{n}" for n in range(12)]
    random_history(feed, rng, 70, keys)
    result = harvest(url, state_path=tmp_path / "state.json")
    assert result.complete, result.warnings
    assert harvested_view(result) == database_view(feed)
    feed.refresh_from_db()
    assert result.summary.pages_fetched == feed.sealed_pages + 1
    assert result.summary.entries_applied == feed.last_seq
    assert result.summary.deletions == feed.entries.filter(kind="delete").count()


def test_a_second_run_costs_one_conditional_request_when_nothing_changed(live_feed, tmp_path):
    feed, url = live_feed
    random_history(feed, random.Random(1), 20, ["a", "b", "c", "d"])
    state = tmp_path / "state.json"
    harvest(url, state_path=state)
    client = HttpClient()
    again = harvest(url, state_path=state, client=client)
    assert client.log == [("GET", url, 304)]
    assert again.summary.not_modified == 1
    assert harvested_view(again) == database_view(feed)


def test_fetch_records_gives_the_atom_harvest_each_records_key_and_metadata(live_feed,
                                                                              tmp_path):
    """An Atom entry carries no metadata: --fetch-records reads it at the record's
    alternate link, once per change of the record (and not again for the same entry met
    in a subscription document read again)."""
    from archives.log import publishing
    from archives.models import Record

    from .factories import record_data

    feed, url = live_feed
    random_history(feed, random.Random(3), 20, [f"k{n}" for n in range(5)])
    state = tmp_path / "state"

    def whole(result):
        return {r["atom_id"]: (r["key"], r["metadata"], r["title"]) for r in result.records}

    def in_database():
        return {r.atom_id: (r.key, r.metadata, r.title)
                for r in Record.objects.filter(feed=feed, deleted_at__isnull=True)}

    first = harvest(url, state_path=state, fetch_records=True)
    assert first.complete, first.warnings
    assert whole(first) == in_database()

    publishing.put_record(feed=feed, key="k9", data=record_data(9, metadata={"new": True}))
    client = HttpClient()
    second = harvest(url, state_path=state, client=client, fetch_records=True)
    fetched = [u for method, u, status in client.log if "/records/" in u]
    assert fetched == [f"{url}records/k9"]  # only the record that changed
    assert whole(second) == in_database()


def test_fetch_records_is_refused_for_formats_that_carry_their_records(live_feed):
    feed, url = live_feed
    random_history(feed, random.Random(5), 4, ["a", "b"])
    with pytest.raises(HarvestFailed, match="for Atom feeds only"):
        harvest(f"{url}pages/latest", fetch_records=True)


def test_an_incremental_harvest_fetches_only_the_new_pages(live_feed, tmp_path):
    feed, url = live_feed
    rng = random.Random(7)
    keys = [f"k{n}" for n in range(8)]
    random_history(feed, rng, 30, keys)
    state = tmp_path / "state.json"
    harvest(url, state_path=state)
    feed.refresh_from_db()
    pages_before = feed.sealed_pages

    random_history(feed, rng, 25, keys)
    feed.refresh_from_db()
    client = HttpClient()
    result = harvest(url, state_path=state, client=client)

    new_pages = feed.sealed_pages - pages_before
    assert new_pages >= 5
    fetched = [requested for _, requested, _ in client.log]
    # The subscription document, then only the pages sealed since: never an older one.
    assert fetched[0] == url
    assert sorted(fetched[1:]) == sorted(
        f"{url}archives/{n}/" for n in range(pages_before + 1, feed.sealed_pages + 1))
    assert client.requests == 1 + new_pages
    assert harvested_view(result) == database_view(feed)


def test_it_harvests_a_feed_with_no_entries(live_feed):
    _, url = live_feed
    result = harvest(url)
    assert result.complete
    assert list(result.records) == []
    assert result.summary.pages_fetched == 1


def test_the_harvest_command_writes_the_live_records_and_a_summary(live_feed, tmp_path):
    feed, url = live_feed
    random_history(feed, random.Random(3), 15, ["a", "b", "c", "d", "e"])
    output, errors = tmp_path / "records.jsonl", io.StringIO()
    call_command("harvest", url, "--state", str(tmp_path / "s.json"), "-o", str(output),
                 stderr=errors)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert {line["id"]: (line["updated"], line["title"]) for line in lines} == database_view(feed)
    assert all(line["alternate"].startswith(url + "records/") for line in lines)
    assert "live records" in errors.getvalue()


def test_the_harvest_command_writes_a_json_array_and_a_json_summary(live_feed, tmp_path):
    feed, url = live_feed
    random_history(feed, random.Random(5), 8, ["a", "b", "c"])
    output, errors = tmp_path / "records.json", io.StringIO()
    call_command("harvest", url, "-o", str(output), "--summary-json", stderr=errors)
    records = json.loads(output.read_text())
    assert {r["id"] for r in records} == set(database_view(feed))
    summary = json.loads(errors.getvalue().strip().splitlines()[-1])
    assert summary["complete"] is True
    assert summary["live_records"] == len(records)


# Hand-made feeds: the rules of consumption --------------------------------------------


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def test_the_newest_updated_wins_even_when_it_sits_on_an_older_page(server):
    feed = LinkedFeed(server, pages=2)
    feed.pages[0].entries.append(("urn:x:99", at(100), False))  # newest copy, oldest page
    feed.pages[1].entries.append(("urn:x:99", at(50), False))
    feed.publish()
    result = harvest(feed.subscription)
    [record] = [r for r in result.records if r["id"] == "urn:x:99"]
    assert record["updated"] == "2024-01-01T01:40:00.000000Z"
    assert record["source"] == server.url("/archives/1")


def test_on_a_tie_the_entry_of_the_more_recently_updated_document_wins(server):
    older = feed_document(updated=at(10), archive=True, links={"next-archive": server.url("/f")},
                          entries=[entry("urn:x:1", at(5), title="from the archive")])
    newer = feed_document(updated=at(20), links={"prev-archive": server.url("/a")},
                          entries=[entry("urn:x:1", at(5), title="from the subscription")])
    server.documents.update({"/a": Document(older), "/f": Document(newer)})
    [record] = harvest(server.url("/f")).records
    assert record["title"] == "from the subscription"


def test_a_deletion_entry_removes_its_record_and_an_older_copy_never_brings_it_back(server):
    feed = LinkedFeed(server, pages=2)
    feed.add_entries(("urn:x:1", at(50), True))
    result = harvest(feed.subscription)
    assert "urn:x:1" not in {r["id"] for r in result.records}
    assert result.summary.deletions == 1


def test_a_complete_subscription_document_replaces_everything_known(server, tmp_path):
    feed = LinkedFeed(server, pages=1)
    state = tmp_path / "state.json"
    assert len(harvest(feed.subscription, state_path=state).records) == 3
    server.documents["/feed"] = Document(feed_document(
        updated=at(60), complete=True, links={}, entries=[entry("urn:x:2", at(60))]))
    assert [r["id"] for r in harvest(feed.subscription, state_path=state).records] == ["urn:x:2"]


def test_an_entity_of_the_internal_dtd_subset_is_read_as_its_text(server):
    body = feed_document(updated=at(1), links={}, entries=[entry("urn:x:1", at(1))])
    body = body.replace(b"<title>A record</title>", b"<title>A record of &org;</title>")
    body = body.replace(b"<feed ", b'<!DOCTYPE feed [<!ENTITY org "Example Org">]><feed ', 1)
    server.documents["/f"] = Document(body)
    [record] = harvest(server.url("/f")).records
    assert record["title"] == "A record of Example Org"


def test_a_page_with_a_link_that_is_not_a_url_is_a_warning_not_a_crash(server):
    feed = LinkedFeed(server, pages=2)
    page = server.documents["/archives/1"]
    page.body = page.body.replace(b'href="http://127.0.0.1', b'href="http://[oops', 1)
    result = harvest(feed.subscription)
    assert not result.complete
    assert any("unreadable archive page" in w and "[oops" in w for w in result.warnings)


def test_links_are_resolved_against_xml_base(server):
    body = feed_document(updated=at(1), links={}, entries=[], extra="").replace(
        b"<feed ", b'<feed xml:base="http://example.org/base/" ')
    body = body.replace(b"</feed>", b'<link rel="prev-archive" href="page/1"/></feed>')
    document = parse_document(body, server.url("/f"))
    assert document.prev_archive == "http://example.org/base/page/1"


# Hand-made feeds: broken ones -----------------------------------------------------------


def test_a_missing_page_is_a_warning_and_the_next_run_picks_it_up(server, tmp_path):
    feed = LinkedFeed(server, pages=3)
    missing = server.documents.pop("/archives/2")
    state = tmp_path / "state.json"
    warnings = []
    result = harvest(feed.subscription, state_path=state, warn=warnings.append)
    assert not result.complete
    assert any("missing archive page" in w and "/archives/2" in w and "404" in w
               for w in warnings)
    assert any("incomplete" in w for w in result.warnings)
    assert {r["id"] for r in result.records} == {"urn:x:5", "urn:x:6", "urn:x:7"}
    saved = HarvestState.load(state)
    assert saved.pending == [server.url("/archives/2")]
    saved.close()

    server.documents["/archives/2"] = missing
    server.requests.clear()
    result = harvest(feed.subscription, state_path=state)
    assert result.complete
    assert len(result.records) == 7
    # One 304 for the subscription, then the two pages it never had; page 3 not again.
    assert [(m, p) for m, p, _ in server.requests] == [
        ("GET", "/feed"), ("GET", "/archives/2"), ("GET", "/archives/1")]


@pytest.mark.parametrize("status", [403, 410])
def test_a_refused_page_is_reported_with_its_status(server, status):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"].status = status
    result = harvest(feed.subscription)
    assert not result.complete
    assert any(f"HTTP {status}" in w for w in result.warnings)


def test_an_unreadable_page_is_a_warning_not_a_crash(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"] = Document(b"<feed><entry>")
    result = harvest(feed.subscription)
    assert not result.complete
    assert any("unreadable archive page" in w and "well-formed" in w for w in result.warnings)


def test_a_loop_is_detected_and_the_walk_stops(server):
    feed = LinkedFeed(server, pages=3)
    feed.pages[0].prev = feed.pages[2].path  # page 1 points back to page 3
    feed.publish()
    result = harvest(feed.subscription, limits=Limits(max_requests=50))
    assert any(w.startswith("loop:") for w in result.warnings)
    assert server.requested("/archives/3") == 1
    assert len(result.records) == 7


def test_the_request_budget_stops_a_long_walk_and_a_later_run_resumes_it(server, tmp_path):
    feed = LinkedFeed(server, pages=8)
    state = tmp_path / "state.json"
    result = harvest(feed.subscription, state_path=state, limits=Limits(max_requests=4))
    assert not result.complete
    assert any("request budget" in w for w in result.warnings)
    assert result.summary.requests == 4
    result = harvest(feed.subscription, state_path=state)
    assert result.complete
    assert len(result.records) == 17
    assert result.summary.requests == 1 + 5  # the 304, then the five pages never read


def test_a_document_larger_than_the_limit_is_refused(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"].body += b" " * 5000
    result = harvest(feed.subscription, limits=Limits(max_bytes=4000))
    assert any("larger than the limit" in w or "more than the limit" in w
               for w in result.warnings)
    assert not result.complete


def test_a_server_that_does_not_answer_in_time_is_a_warning(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"].delay = 1.5
    result = harvest(feed.subscription, limits=Limits(timeout=0.3))
    assert not result.complete
    assert any("timed out" in w for w in result.warnings)


@pytest.mark.parametrize("body_only", [False, True], ids=["headers", "body"])
def test_the_timeout_bounds_the_whole_fetch_not_each_read(server, body_only):
    body = feed_document(updated=at(1), links={}, entries=[entry("urn:x:1", at(1))])
    # A byte every 0.2 s: a timeout per read of 1 s would never fire.
    server.documents["/f"] = Document(body, trickle=0.2, trickle_body_only=body_only)
    client = HttpClient(Limits(timeout=1.0))
    started = time.monotonic()
    with pytest.raises(FetchError, match="timed out after 1 s"):
        client.fetch(server.url("/f"))
    assert time.monotonic() - started < 1.8
    assert client.log == [("GET", server.url("/f"), 0)]


def test_a_trickling_archive_page_is_a_warning_within_the_timeout(server):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"].trickle = 0.2
    started = time.monotonic()
    result = harvest(feed.subscription, limits=Limits(timeout=1.0))
    assert time.monotonic() - started < 2.5
    assert not result.complete
    assert any("timed out" in w and "/archives/1" in w for w in result.warnings)


def test_the_run_deadline_stops_a_slow_walk_and_a_later_run_resumes_it(server, tmp_path):
    feed = LinkedFeed(server, pages=4)
    for number in range(1, 5):
        server.documents[f"/archives/{number}"].delay = 0.6
    state = tmp_path / "state.json"
    started = time.monotonic()
    result = harvest(feed.subscription, state_path=state, limits=Limits(deadline=1.5))
    assert time.monotonic() - started < 2.2
    assert not result.complete
    assert any("run deadline of 1.5 s" in w for w in result.warnings)
    assert server.requested("/archives/1") == 0  # never asked: the run was over
    result = harvest(feed.subscription, state_path=state)
    assert result.complete
    assert len(result.records) == 9


def test_the_harvest_command_takes_a_run_deadline(server, tmp_path):
    feed = LinkedFeed(server, pages=2)
    server.documents["/archives/1"].delay = 3
    errors = io.StringIO()
    started = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", feed.subscription, "--deadline", "1", "-o",
                     str(tmp_path / "r.jsonl"), stderr=errors)
    assert time.monotonic() - started < 2
    assert stop.value.code == 1
    assert "timed out" in errors.getvalue()


def test_it_refuses_to_follow_a_link_to_a_local_file(server):
    server.documents["/f"] = Document(feed_document(
        updated=at(1), links={"prev-archive": "file:///etc/passwd"}, entries=[]))
    result = harvest(server.url("/f"))
    assert any("only http and https" in w for w in result.warnings)


def test_an_immutable_page_is_never_fetched_twice(server, tmp_path):
    feed = LinkedFeed(server, pages=2)
    state = tmp_path / "state.json"
    for minute in (30, 31, 32):
        feed.add_entries((f"urn:x:{minute}", at(minute), False))
        harvest(feed.subscription, state_path=state)
    assert server.requested("/archives/1") == 1
    assert server.requested("/archives/2") == 1
    assert server.requested("/feed") == 3


def test_an_unreachable_subscription_fails_cleanly():
    with pytest.raises(HarvestFailed, match="could not fetch"):
        harvest("http://127.0.0.1:9/feed", limits=Limits(timeout=2))


def test_a_state_file_of_another_feed_is_refused(server, tmp_path):
    feed = LinkedFeed(server, pages=1)
    state = tmp_path / "state.json"
    harvest(feed.subscription, state_path=state)
    with pytest.raises(StateError, match="is for"):
        harvest(server.url("/archives/1"), state_path=state)


def test_a_corrupt_state_file_is_refused(tmp_path):
    state = tmp_path / "state.json"
    state.write_text("{not json")
    with pytest.raises(StateError, match="cannot read state file"):
        harvest("http://127.0.0.1:9/feed", state_path=state)


def test_a_second_run_on_a_state_file_in_use_gives_up_cleanly(server, tmp_path, monkeypatch):
    feed = LinkedFeed(server, pages=1)
    state = tmp_path / "state"
    harvest(feed.subscription, state_path=state)
    monkeypatch.setattr(state_file, "STATE_LOCK_WAIT", 0.2)
    running = HarvestState.load(state)  # a run in progress holds the file
    with pytest.raises(StateError, match="another run"):
        harvest(feed.subscription, state_path=state)
    running.close()
    assert harvest(feed.subscription, state_path=state).complete


def test_a_run_that_fails_half_way_leaves_the_previous_state_whole(server, tmp_path,
                                                                 monkeypatch):
    feed = LinkedFeed(server, pages=2)
    state = tmp_path / "state"
    harvest(feed.subscription, state_path=state)
    feed.add_entries(("urn:x:50", at(50), False))

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(harvester.Harvester, "_apply", interrupted)
        with pytest.raises(KeyboardInterrupt):
            harvest(feed.subscription, state_path=state)
    result = harvest(feed.subscription, state_path=state)
    assert result.summary.pages_fetched == 1  # the old validators: no 304
    assert "urn:x:50" in {r["id"] for r in result.records}
    assert result.summary.records_changed == 1


def test_a_state_file_of_the_former_json_format_is_converted(server, tmp_path):
    feed = LinkedFeed(server, pages=1)
    fresh = harvest(feed.subscription)
    records = {r["id"]: {**r, "doc_updated": "2024-01-01T00:03:00.000000Z", "deleted": False}
               for r in fresh.records}
    records["urn:x:9"] = {"id": "urn:x:9", "updated": "2024-01-01T00:00:09.000000Z",
                          "doc_updated": "", "deleted": True, "title": "", "source": ""}
    state = tmp_path / "state.json"
    state.write_text(json.dumps({
        "version": 1, "subscription": feed.subscription,
        "validators": {"etag": server.documents["/feed"].headers()["ETag"]},
        "processed": {server.url("/archives/1"): {"etag": None}}, "pending": [],
        "records": records}))
    server.requests.clear()
    result = harvest(feed.subscription, state_path=state)
    assert [(m, p) for m, p, _ in server.requests] == [("GET", "/feed")]
    assert result.summary.not_modified == 1
    assert list(result.records) == list(fresh.records)
    assert state.read_bytes().startswith(b"SQLite format 3")
    assert os.listdir(tmp_path) == ["state.json"]


def test_the_harvest_command_exits_1_with_warnings_when_incomplete(server, tmp_path):
    feed = LinkedFeed(server, pages=2)
    del server.documents["/archives/1"]
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", feed.subscription, "-o", str(tmp_path / "r.jsonl"),
                     stderr=errors)
    assert stop.value.code == 1
    assert "warning: missing archive page" in errors.getvalue()
    assert "INCOMPLETE" in errors.getvalue()


def test_the_harvest_command_exits_2_without_a_traceback_when_it_cannot_run(tmp_path):
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", "http://127.0.0.1:9/feed", "--timeout", "2", stderr=errors)
    assert stop.value.code == 2
    assert errors.getvalue().startswith("harvest failed: could not fetch")


def test_the_harvest_command_exits_2_when_the_subscription_is_not_a_feed(server):
    server.documents["/f"] = Document(b"<html/>", content_type="text/html")
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", server.url("/f"), stderr=errors)
    assert stop.value.code == 2
    assert "not an Atom feed" in errors.getvalue()


def documents_alive(base: str) -> set[str]:
    """URLs (under `base`) of the parsed documents some lxml element of which is alive."""
    gc.collect()
    # type(), not isinstance(): isinstance() on a dead weak proxy raises ReferenceError.
    elements = [o for o in gc.get_objects() if issubclass(type(o), etree._Element)]
    return {url for element in elements
            if (url := element.getroottree().docinfo.URL or "").startswith(base)}


def test_no_page_tree_outlives_its_processing(server, monkeypatch):
    """A page is reduced to what rebuilding needs before the next one is read: none of its
    lxml elements may still be alive then (a tree costs ~10 times the page's bytes)."""
    feed = LinkedFeed(server, pages=6)
    alive_at_each_parse = []
    parse_document = harvester.parse_document

    def parse(body, url, **kwargs):
        alive_at_each_parse.append(documents_alive(server.base))
        return parse_document(body, url, **kwargs)

    monkeypatch.setattr(harvester, "parse_document", parse)
    result = harvest(feed.subscription)
    assert result.complete
    assert alive_at_each_parse == [set()] * 7


def test_it_reads_a_gzip_compressed_document(server):
    body = feed_document(updated=at(1), links={}, entries=[entry("urn:x:1", at(1))])
    server.documents["/f"] = Document(gzip.compress(body),
                                      extra_headers={"Content-Encoding": "gzip"})
    assert [r["id"] for r in harvest(server.url("/f")).records] == ["urn:x:1"]
    assert "gzip" in server.requests[0][2]["Accept-Encoding"]


# Redirects --------------------------------------------------------------------------


def redirect(location: str, status: int = 301) -> Document:
    return Document(b"", status=status, extra_headers={"Location": location})


def test_relative_links_resolve_against_the_url_after_redirects(server):
    """RFC 3986 5.1.3: the base of a retrieved document is the URI it was retrieved from."""
    server.documents["/feed"] = redirect("/v2/feed")
    server.documents["/v2/feed"] = Document(feed_document(
        updated=at(2), links={"prev-archive": "archives/1"}, entries=[entry("urn:x:2", at(2))]))
    server.documents["/v2/archives/1"] = Document(feed_document(
        updated=at(1), archive=True, links={"current": "../feed", "next-archive": "../feed"},
        entries=[entry("urn:x:1", at(1))]))
    result = harvest(server.url("/feed"))
    assert result.complete, result.warnings
    assert sorted(r["id"] for r in result.records) == ["urn:x:1", "urn:x:2"]
    assert server.requested("/v2/archives/1") == 1


@pytest.mark.parametrize("scheme", ["ftp", "file"])
def test_a_redirect_to_a_scheme_other_than_http_is_refused(server, scheme):
    with socket.create_server(("127.0.0.1", 0)) as listener:  # an "ftp server" to watch
        port = listener.getsockname()[1]
        feed = LinkedFeed(server, pages=2)
        server.documents["/archives/1"] = redirect(f"{scheme}://127.0.0.1:{port}/1", 302)
        result = harvest(feed.subscription, limits=Limits(timeout=1))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert not result.complete
    assert any(f"redirect from {server.url('/archives/1')} to {scheme}://" in w
               and "only http and https" in w for w in result.warnings), result.warnings


def test_a_subscription_redirected_to_another_scheme_fails_cleanly(server):
    server.documents["/feed"] = redirect("ftp://127.0.0.1:9/feed")
    with pytest.raises(HarvestFailed, match="only http and https"):
        harvest(server.url("/feed"), limits=Limits(timeout=1))


def test_a_redirect_to_another_host_is_followed(server):
    """A feed may move its archive pages to a CDN; its links could name any host anyway."""
    with FeedServer() as cdn:
        cdn_base = cdn.base.replace("127.0.0.1", "localhost")
        feed = LinkedFeed(server, pages=2)
        cdn.documents["/archives/1"] = server.documents["/archives/1"]
        server.documents["/archives/1"] = redirect(cdn_base + "/archives/1", 302)
        result = harvest(feed.subscription)
        assert cdn.requested("/archives/1") == 1
    assert result.complete, result.warnings
    assert len(result.records) == 5
