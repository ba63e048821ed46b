"""The harvester on linked-pages feeds: against our own server (live) and hand-made feeds."""

from __future__ import annotations

import io
import json
import random
from email import policy
from email.parser import BytesParser
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.core.management import call_command
from feedpub_consumer.harvest import HarvestFailed
from feedpub_consumer.harvesting import harvest
from feedpub_consumer.http import HttpClient
from feedpub_consumer.linked import merge_patch, parse_entities
from feedpub_consumer.linkedharvest import FROM_PAGE_1, FROM_SNAPSHOT
from feedpub_consumer.state import StateError

from archives.models import Feed, Record, Snapshot
from archives.storage.snapshots import NothingToSnapshot, take_snapshot

from .broken_feeds import Document, FeedServer, LinkedFeed, at
from .broken_linked_feeds import LF, Entity, LinkedPagesFeed, entity, multipart, part
from .feeds_live import make_live_feed, random_history

# Our own server ---------------------------------------------------------------------


@pytest.fixture
def live_feed(live_server, settings, transactional_db):
    feed, atom_url = make_live_feed(live_server, settings)
    return feed, atom_url, f"{live_server.url}/feeds/live/pages/latest"


def grow(feed: Feed, rng: random.Random, steps: int, keys: list[str]) -> None:
    """Random writes, deletes and seals, with a snapshot taken half-way now and then."""
    random_history(feed, rng, steps // 2, keys)
    if rng.random() < 0.7:
        take_snapshot(Feed.objects.get(pk=feed.pk), keep=2)
    random_history(feed, rng, steps - steps // 2, keys)


def live_records(feed: Feed) -> dict[str, tuple[str, dict]]:
    return {record.key: (record.title, record.metadata)
            for record in Record.objects.filter(feed=feed, deleted_at__isnull=True)}


def by_key(result) -> dict[str, tuple[str, dict]]:
    return {r["record"]["key"]: (r["record"]["title"], r["record"]["metadata"])
            for r in result.records}


def as_atom_sees_them(result) -> dict[str, tuple[str, str]]:
    """atom:id -> (updated, title), as the Atom harvest reports records."""
    return {r["record"]["atom_id"]: (r["record"]["updated"], r["record"]["title"])
            for r in result.records}


def atom_view(result) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["updated"], r["title"]) for r in result.records}


@pytest.mark.parametrize("seed", range(3))
def test_it_rebuilds_the_live_records_over_runs_as_the_atom_harvest_does(live_feed, tmp_path,
                                                                         seed):
    feed, atom_url, entry = live_feed
    rng = random.Random(seed)
    keys = [f"k{n}" for n in range(10)]
    state = tmp_path / "linked.state"
    for _ in range(3):
        grow(feed, rng, 30, keys)
        result = harvest(entry, state_path=state)
        assert result.complete, result.warnings
        assert by_key(result) == live_records(feed)
        assert as_atom_sees_them(result) == atom_view(harvest(atom_url))


def test_a_first_run_starts_from_the_newest_snapshot_and_applies_each_entry_once(live_feed):
    feed, _, entry = live_feed
    rng = random.Random(7)
    random_history(feed, rng, 40, [f"k{n}" for n in range(8)])
    snapshot = take_snapshot(Feed.objects.get(pk=feed.pk))
    random_history(feed, rng, 10, [f"k{n}" for n in range(8)])
    feed.refresh_from_db()
    client = HttpClient()

    result = harvest(entry, client=client)

    fetched = [urlsplit(url).path for _, url, _ in client.log]
    assert fetched[:2] == ["/feeds/live/pages/latest", "/feeds/live/snapshots/latest"]
    assert "/feeds/live/pages/1" not in fetched
    assert result.summary.entries_applied == snapshot.records + feed.last_seq - snapshot.last_seq
    assert by_key(result) == live_records(feed)


def test_from_page_1_it_applies_every_entry(live_feed):
    feed, _, entry = live_feed
    random_history(feed, random.Random(8), 30, ["a", "b", "c", "d"])
    take_snapshot(Feed.objects.get(pk=feed.pk))
    feed.refresh_from_db()
    result = harvest(entry, start=FROM_PAGE_1)
    assert result.summary.entries_applied == feed.last_seq
    assert by_key(result) == live_records(feed)


def test_a_second_run_costs_one_conditional_request_when_nothing_changed(live_feed, tmp_path):
    feed, _, entry = live_feed
    grow(feed, random.Random(9), 30, ["a", "b", "c", "d", "e"])
    state = tmp_path / "linked.state"
    harvest(entry, state_path=state)
    feed.refresh_from_db()
    newest = newest_page_url(feed)
    client = HttpClient()
    again = harvest(entry, state_path=state, client=client)
    assert client.log == [("GET", newest, 304)]
    assert again.summary.not_modified == 1
    assert by_key(again) == live_records(feed)


def newest_page_url(feed: Feed) -> str:
    newest = feed.sealed_pages + (1 if feed.last_seq > feed.sealed_seq else 0)
    return f"{settings.FEEDPUB_BASE_URL}/feeds/{feed.slug}/pages/{newest}"


def test_an_empty_feed_is_followed_once_it_has_entries(live_feed, tmp_path):
    feed, _, entry = live_feed
    with pytest.raises(NothingToSnapshot):  # no snapshot: the run starts from page 1
        take_snapshot(feed)
    state = tmp_path / "linked.state"
    first = harvest(entry, state_path=state, format="linked-pages")
    assert list(first.records) == []  # (its newest page answers 404 until its first entry)
    random_history(feed, random.Random(12), 10, ["a", "b", "c"])
    again = harvest(entry, state_path=state)
    assert again.complete, again.warnings
    assert by_key(again) == live_records(feed)


def test_the_harvest_command_tells_the_format_by_the_content_type(live_feed, tmp_path):
    feed, _, entry = live_feed
    grow(feed, random.Random(10), 20, ["a", "b", "c", "d"])
    output, errors = tmp_path / "records.jsonl", io.StringIO()
    call_command("harvest", entry, "--state", str(tmp_path / "s"), "-o", str(output),
                 "--summary-json", stderr=errors)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert {line["record"]["key"]: (line["record"]["title"], line["record"]["metadata"])
            for line in lines} == live_records(feed)
    assert all(line["id"] == line["record"]["url"] for line in lines)
    summary = json.loads(errors.getvalue().strip().splitlines()[-1])
    assert summary["complete"] is True
    assert summary["live_records"] == len(lines)


def test_our_snapshot_pages_parse_without_defects_in_the_standard_library(live_feed):
    feed, _, entry = live_feed
    random_history(feed, random.Random(11), 12, ["a", "b", "c"])
    snapshot = take_snapshot(Feed.objects.get(pk=feed.pk))
    client = HttpClient()
    index = json.loads(client.fetch(entry.replace("pages/latest", "snapshots/latest")).body)
    assert index["id"] == str(snapshot.uuid)
    response = client.fetch(index["pages"][0])
    head = f"Content-Type: {response.header('Content-Type')}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + response.body)
    assert message.defects == []
    ours = parse_entities(response.body, response.header("Content-Type"))
    assert [dict(e.headers)["Content-ID"] for e in ours] == \
        [p["Content-ID"] for p in message.iter_parts()]
    assert Snapshot.objects.filter(feed=feed).count() == 1


# Hand-made feeds ------------------------------------------------------------------------


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def titles(result) -> dict[str, str]:
    return {r["id"]: r["record"]["title"] for r in result.records}


@pytest.mark.parametrize("newline", [b"\r\n", LF], ids=["crlf", "lf"])
def test_it_reads_a_feed_from_its_oldest_page(server, newline):
    feed = LinkedPagesFeed(server, pages=3, newline=newline)
    result = harvest(feed.latest)
    assert result.complete, result.warnings
    assert titles(result) == feed.records()
    assert result.summary.entries_applied == 6


def test_puts_deletes_and_patches_are_applied_in_order(server):
    feed = LinkedPagesFeed(server, pages=1)
    patch = json.dumps({"title": "patched", "extra": {"a": 1}}).encode()
    feed.add_page(entity(3, key="k1", operation="http-equiv=DELETE"),
                  entity(4, key="k2", operation="PATCH", body=patch,
                         content_type="application/merge-patch+json"))
    result = harvest(feed.latest)
    assert result.complete, result.warnings
    [record] = result.records
    assert record["record"] == {"key": "k2", "title": "patched", "extra": {"a": 1}}
    assert result.summary.deletions == 1


def test_a_text_body_is_kept_as_text(server):
    """The format's own example: text/plain entities."""
    body = multipart([part([("Operation-Type", "http-equiv=PUT"), ("Content-Type", "text/plain"),
                            ("Content-ID", "<1-A@x>"), ("Content-Location", "http://x/a"),
                            ("Last-Modified", "Mon, 27 Nov 2023 03:10:00 GMT"),
                            ("Content-Length", "5")], b"hello", LF)], newline=LF)
    server.documents["/p"] = Document(
        body, content_type='multipart/mixed; boundary="hand-made-boundary"',
        extra_headers={"Link": f'<{server.url("/p")}>; rel="self"'})
    [record] = harvest(server.url("/p")).records
    assert record == {"id": "http://x/a", "updated": "2023-11-27T03:10:00.000000Z",
                      "content_id": "<1-A@x>", "source": server.url("/p"),
                      "content_type": "text/plain", "text": "hello",
                      # the shared fields (feedpub_consumer.records): none in a text body
                      "key": None, "atom_id": None, "title": "", "summary": "",
                      "metadata": None, "links": [], "alternate": "http://x/a",
                      "language": ""}


def test_a_snapshot_without_hints_is_followed_by_crawling_back_to_its_date(server):
    feed = LinkedPagesFeed(server, pages=4)  # entities 1..8, minute n
    snapshot = feed.snapshot(5, created=at(5.5))  # holds 1..5: 6..8 come after it
    result = harvest(feed.latest, snapshot=snapshot)
    assert result.complete, result.warnings
    assert titles(result) == feed.records()
    # Back with HEAD requests from the newest page (read once, to tell the format) to page 2,
    # the newest older than minute 5.5; then forward, skipping entities 3 to 5.
    assert [(m, p) for m, p, _ in server.requests if p.startswith("/pages")] == [
        ("GET", "/pages/latest"), ("GET", "/pages/4"), ("HEAD", "/pages/3"),
        ("HEAD", "/pages/2"), ("GET", "/pages/2"), ("GET", "/pages/3")]
    assert result.summary.entries_applied == 5 + 3


def test_entities_of_the_snapshot_s_own_second_are_applied_again(server):
    feed = LinkedPagesFeed(server, pages=2)  # entities 1..4
    feed.add_entities(entity(5, minute=4))  # the same second as entity 4
    snapshot = feed.snapshot(4, created=at(4))  # holds 1..4, created in their second
    result = harvest(feed.latest, snapshot=snapshot)
    assert titles(result) == feed.records()
    assert result.summary.entries_applied == 4 + 2  # entity 4 again, and 5: at least once


def test_the_snapshot_s_resume_hints_give_exactly_once(server):
    feed = LinkedPagesFeed(server, pages=2)
    feed.add_entities(entity(5, minute=4))
    snapshot = feed.snapshot(4, created=at(4), hints={
        "resumePage": server.url("/pages/2"), "resumeAfterContentId": "<4@hand-made>"})
    result = harvest(feed.latest, snapshot=snapshot)
    assert titles(result) == feed.records()
    assert result.summary.entries_applied == 4 + 1
    assert server.requested("/pages/2", "HEAD") == 0


def test_a_snapshot_is_found_next_to_the_pages_and_is_the_default_start(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.snapshot(6, created=at(6.5))
    result = harvest(feed.latest)
    assert result.summary.entries_applied == 6  # the snapshot's, none of the feed's
    assert server.requested("/pages/1") == 0
    assert titles(result) == feed.records()


def test_without_a_snapshot_the_default_start_is_the_oldest_page(server):
    feed = LinkedPagesFeed(server, pages=2)
    assert titles(harvest(feed.latest)) == feed.records()
    assert server.requested("/snapshots/latest") == 1


def test_from_snapshot_fails_when_there_is_none(server):
    feed = LinkedPagesFeed(server, pages=2)
    with pytest.raises(HarvestFailed, match="snapshot"):
        harvest(feed.latest, start=FROM_SNAPSHOT)


def test_a_snapshot_that_cannot_be_read_whole_fails_the_run_and_keeps_no_state(server,
                                                                              tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    feed.snapshot(6, created=at(6.5))
    del server.documents["/snapshots/s1/pages/2"]
    state = tmp_path / "s"
    with pytest.raises(HarvestFailed, match="pages/2 answered HTTP 404"):
        harvest(feed.latest, state_path=state)
    feed.snapshot(6, created=at(6.5))
    result = harvest(feed.latest, state_path=state)
    assert result.summary.entries_applied == 6


def test_a_second_run_costs_one_conditional_request(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    state = tmp_path / "s"
    harvest(feed.latest, state_path=state)
    server.requests.clear()
    result = harvest(feed.latest, state_path=state)
    assert [(m, p) for m, p, _ in server.requests] == [("GET", "/pages/3")]
    assert server.requests[0][2]["If-None-Match"] == server.documents["/pages/3"].headers()["ETag"]
    assert result.summary.not_modified == 1
    assert titles(result) == feed.records()


def test_a_page_that_gained_entities_gives_only_the_new_ones(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=2)
    state = tmp_path / "s"
    harvest(feed.latest, state_path=state)
    feed.add_entities(entity(5, key="k1"), entity(6))
    result = harvest(feed.latest, state_path=state)
    assert result.summary.entries_applied == 2
    assert result.summary.requests == 1
    assert titles(result) == feed.records()


def test_a_page_that_gained_a_next_link_leads_to_the_new_pages(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=2)
    state = tmp_path / "s"
    harvest(feed.latest, state_path=state)
    feed.add_page(entity(5), entity(6, key="k2", operation="http-equiv=DELETE"))
    feed.add_page(entity(7))
    server.requests.clear()
    result = harvest(feed.latest, state_path=state)
    assert [p for _, p, _ in server.requests] == ["/pages/2", "/pages/3", "/pages/4"]
    assert result.summary.entries_applied == 3
    assert titles(result) == feed.records()


def test_a_missing_page_stops_the_walk_and_the_next_run_goes_on_there(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=2)
    state = tmp_path / "s"
    harvest(feed.latest, state_path=state)
    feed.add_page(entity(5))
    feed.add_page(entity(6))
    missing = server.documents.pop("/pages/3")
    result = harvest(feed.latest, state_path=state)
    assert not result.complete
    assert any("unreadable page" in w and "/pages/3 answered HTTP 404" in w
               for w in result.warnings)

    server.documents["/pages/3"] = missing
    server.requests.clear()
    result = harvest(feed.latest, state_path=state)
    assert result.complete, result.warnings
    # page 2 is unchanged (304), but its next page was never read: on to it.
    assert [p for _, p, _ in server.requests] == ["/pages/2", "/pages/3", "/pages/4"]
    assert titles(result) == feed.records()


def test_a_remembered_page_that_is_gone_is_found_again_by_its_last_modified(server,
                                                                            tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    state = tmp_path / "s"
    harvest(feed.latest, state_path=state)
    feed.add_page(entity(7), entity(8))
    for page in feed.pages:  # the server moves its pages
        page.path = page.path.replace("/pages/", "/v2/pages/")
    feed.link()
    feed.publish()
    for number in (1, 2, 3):
        del server.documents[f"/pages/{number}"]
    result = harvest(feed.latest, state_path=state)
    assert any("answered HTTP 404; finding the way on" in w for w in result.warnings)
    assert result.complete, result.warnings
    assert result.summary.entries_applied == 2  # 7 and 8: 6 found by its Content-ID
    assert len(result.records) == 8


def test_a_loop_is_detected_and_the_walk_stops(server):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[2].next = "/pages/1"
    feed.publish()
    result = harvest(feed.latest, start=FROM_PAGE_1)
    assert any(w.startswith("loop:") for w in result.warnings)
    assert not result.complete


def test_entity_problems_are_counted_per_page_and_reported_once(server):
    feed = LinkedPagesFeed(server, pages=1)
    feed.add_page(Entity(None, at(3), "k3"), Entity(None, at(4), "k4"),
                  Entity("<5@hand-made>", at(5), None),
                  Entity("<6@hand-made>", at(6), "k6", operation="http-equiv=MOVE"),
                  entity(1, minute=7))
    result = harvest(feed.latest)
    page = server.url("/pages/2")
    assert result.warnings[:4] == [
        f"{page}: entities without a Content-ID (applied; resuming after them is at least "
        "once): 2",
        f"{page}: entities without a Content-Location, not applied: 1",
        f"{page}: entities without an Operation-Type of PUT, DELETE or PATCH, not applied: 1",
        f"{page}: entities repeating a Content-ID applied earlier in this run, not applied "
        "again: 1"]
    assert not result.complete
    assert sorted(r["id"].rsplit("/", 1)[1] for r in result.records) == ["k1", "k2", "k3",
                                                                           "k4"]


def test_a_body_that_is_not_multipart_is_an_unreadable_page(server):
    feed = LinkedPagesFeed(server, pages=2)
    server.documents["/pages/1"].body = b"--elsewhere\r\nContent-ID: <1>\r\n\r\n"
    result = harvest(feed.latest, start=FROM_PAGE_1)
    assert not result.complete
    assert any("/pages/1: not a well-formed multipart body" in w for w in result.warnings)


def test_a_state_file_of_the_other_format_is_refused(server, tmp_path):
    linked, atom = LinkedPagesFeed(server, pages=1), LinkedFeed(server, pages=1)
    state = tmp_path / "s"
    harvest(linked.latest, state_path=state)
    with pytest.raises(StateError, match="linked-pages format, not atom"):
        harvest(atom.subscription, state_path=state, format="atom")
    with pytest.raises(StateError, match="is for"):
        harvest(atom.subscription, state_path=state)
    atom_state = tmp_path / "atom"
    harvest(atom.subscription, state_path=atom_state)
    with pytest.raises(StateError, match="atom format, not linked-pages"):
        harvest(linked.latest, state_path=atom_state, format="linked-pages")


def test_a_multipart_feed_read_as_atom_fails_cleanly(server):
    feed = LinkedPagesFeed(server, pages=1)
    with pytest.raises(HarvestFailed, match="not well-formed XML"):
        harvest(feed.latest, format="atom")


def test_the_harvest_command_takes_the_start_and_the_format(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=2)
    feed.snapshot(4, created=at(4.5))
    errors = io.StringIO()
    call_command("harvest", feed.latest, "--format", "linked-pages", "--from-page-1",
                 "-o", str(tmp_path / "r.jsonl"), stderr=errors)
    assert "4 entries applied (0 deletions), 4 records changed, 4 live records" \
        in errors.getvalue()
    assert server.requested("/snapshots/latest") == 0


def test_the_harvest_command_exits_1_when_a_linked_page_is_missing(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    del server.documents["/pages/2"]
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", feed.latest, "--from-page-1", "-o", str(tmp_path / "r"),
                     stderr=errors)
    assert stop.value.code == 1
    assert "INCOMPLETE" in errors.getvalue()


def test_the_harvest_command_exits_2_without_a_snapshot_when_one_is_required(server):
    feed = LinkedPagesFeed(server, pages=1)
    errors = io.StringIO()
    with pytest.raises(SystemExit) as stop:
        call_command("harvest", feed.latest, "--from-snapshot", stderr=errors)
    assert stop.value.code == 2
    assert "snapshot index" in errors.getvalue()


def test_merge_patch_follows_rfc_7396():
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert merge_patch({"a": 1}, ["x"]) == ["x"]


def test_a_next_link_that_is_not_a_url_is_an_unreadable_page_not_a_crash(server):
    feed = LinkedPagesFeed(server, pages=2)
    server.documents["/pages/1"].extra_headers["Link"] = \
        f'<{server.url("/pages/1")}>; rel="self", <http://[oops/>; rel="next"'
    result = harvest(feed.latest, start=FROM_PAGE_1)
    assert not result.complete
    assert any("unreadable page" in w and "not a URL" in w for w in result.warnings)


def test_a_walk_forward_that_ends_before_the_page_it_crawled_back_from_is_incomplete(server,
                                                                                   tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    feed.pages[0].next = None  # page 2 says prev page 1; page 1 has no next
    feed.publish()
    state = tmp_path / "s"
    for _ in range(2):  # and the next run finds its way from the entry point again
        result = harvest(feed.latest, state_path=state, start=FROM_PAGE_1)
        assert not result.complete
        assert any("/pages/1 has no next link, but " in w and "/pages/3, where crawling back"
                   in w for w in result.warnings)


def test_the_harvest_command_starts_from_a_named_snapshot(server, tmp_path):
    feed = LinkedPagesFeed(server, pages=3)
    index = feed.snapshot(4, created=at(4.5), snapshot_id="named")
    del server.documents["/snapshots/latest"]  # nothing to find: only the one named
    output, errors = tmp_path / "r.jsonl", io.StringIO()
    call_command("harvest", feed.latest, "--snapshot", index, "-o", str(output), stderr=errors)
    assert "6 entries applied" in errors.getvalue()  # 4 of the snapshot, 5 and 6 after it
    assert len(output.read_text().splitlines()) == 6
    assert server.requested("/snapshots/named/") == 1


def test_every_format_writes_one_record_shape(live_feed):
    """Atom and linked pages of one feed: the same fields in every record
    (feedpub_consumer.records), the same atom_id, title, summary and links; key and metadata
    wherever the format carries them (linked pages: the record's JSON; Atom: none)."""
    from feedpub_consumer.records import SHARED

    feed, atom_url, entry = live_feed
    random_history(feed, random.Random(7), 20, [f"k{n}" for n in range(6)])
    atom = {r["atom_id"]: r for r in harvest(atom_url).records}
    linked = {r["atom_id"]: r for r in harvest(entry).records}

    fields = {"id", "updated", "source", *SHARED}
    assert all(fields <= set(record) for record in [*atom.values(), *linked.values()])
    assert atom.keys() == linked.keys()
    same = ("title", "summary")
    assert {i: [r[f] for f in same] for i, r in atom.items()} == {
        i: [r[f] for f in same] for i, r in linked.items()}
    live = {record.atom_id: record for record in Record.objects.filter(
        feed=feed, deleted_at__isnull=True)}
    assert {i: (r["key"], r["metadata"]) for i, r in linked.items()} == {
        i: (record.key, record.metadata) for i, record in live.items()}
    assert {(r["key"], r["metadata"]) for r in atom.values()} == {(None, None)}
    # The producer's links: the Atom entry's besides feedpub's two alternates.
    assert {i: r["links"] for i, r in linked.items()} == {
        i: [link for link in r["links"] if link["rel"] != "alternate"] for i, r in atom.items()}
