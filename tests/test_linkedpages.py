"""The linked-pages representation and snapshots: the same log as the Atom documents,
read here as a consumer would, with the standard library's `email` parser."""

from __future__ import annotations

import importlib
import json
import random
import uuid
from datetime import UTC, datetime
from email import policy
from email.parser import BytesParser
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils.http import http_date

from archives.documents import linkedpages
from archives.documents.atom import EntryRow
from archives.documents.records import record_json
from archives.formats import rfc3339
from archives.log import publishing
from archives.log.sealing import freeze_linked_pages, seal_feed
from archives.models import ArchivePage, Entry, Feed, Record, Snapshot
from archives.storage.snapshots import (
    NothingToSnapshot,
    snapshot_changed_feeds,
    take_snapshot,
)

from .factories import FeedFactory, record_data
from .threads import raise_first_error, run_at_once
from .walking import walk

SCHEMA = json.loads(
    (Path(__file__).parent / "schema" / "snapshot-index.schema.json").read_text())
IMMUTABLE = "public, max-age=31536000, immutable"


def parts_of(response) -> list:
    """The body parts of a multipart response, parsed by the standard library."""
    head = f"Content-Type: {response['Content-Type']}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + response.content)
    assert message.is_multipart()
    assert message.defects == []
    return list(message.iter_parts())


def links(response) -> dict[str, str]:
    found = {}
    for part in response["Link"].split(", "):
        href, rel = part.split(">; rel=")
        found[rel.strip('"')] = urlsplit(href.lstrip("<")).path
    return found


def history(feed: Feed, steps: int, rng: random.Random, keys: int = 8) -> None:
    """Random puts and deletes through the write path, sealing now and then."""
    for step in range(steps):
        key = f"k{rng.randrange(keys)}"
        record = Record.objects.filter(feed=feed, key=key).first()
        if record is not None and not record.is_deleted and rng.random() < 0.3:
            publishing.delete_record(feed=feed, key=key)
        else:
            publishing.put_record(feed=feed, key=key, data=record_data(step, title=f"{key} {step}"))
        if rng.random() < 0.2:
            seal_feed(Feed.objects.get(pk=feed.pk))


def test_page_n_holds_exactly_the_entries_of_archive_page_n(client, sealed_feed):
    for page in ArchivePage.objects.filter(feed=sealed_feed):
        response = client.get(f"/feeds/books/pages/{page.number}")
        ids = [part["Content-ID"] for part in parts_of(response)]
        assert ids == [f"<entry-{seq}@{sealed_feed.uuid}>"
                       for seq in range(page.first_seq, page.last_seq + 1)]
    open_page = client.get("/feeds/books/pages/3")
    assert [part["Content-ID"] for part in parts_of(open_page)] == [f"<entry-7@{sealed_feed.uuid}>"]
    assert client.get("/feeds/books/pages/4").status_code == 404
    assert client.get("/feeds/books/pages/0").status_code == 404


def test_entities_carry_their_operation_and_the_record_as_it_was(client, sealed_feed):
    parts = parts_of(client.get("/feeds/books/pages/2")) + \
        parts_of(client.get("/feeds/books/pages/3"))
    by_seq = {entry.seq: entry for entry in Entry.objects.filter(feed=sealed_feed)}
    for part, seq in zip(parts, range(4, 8), strict=True):
        entry = by_seq[seq]
        assert part["Last-Modified"] == http_date(entry.updated.timestamp())
        assert part["Content-Location"] == f"http://127.0.0.1:8000/feeds/books/records/" \
            f"{entry.record.key}"
        if entry.is_deletion:
            assert part["Operation-Type"] == "http-equiv=DELETE"
            assert part.get_content() == b""
        else:
            assert part["Operation-Type"] == "http-equiv=PUT"
            assert part.get_content_type() == "application/json"
            record = json.loads(part.get_content())
            assert record["title"] == entry.title
            assert record["metadata"] == entry.metadata
            assert record["deleted"] is False
    # k1's update (entry 5) shows the record as it was then, not as it is now.
    k1 = json.loads(parts[1].get_content())
    assert (k1["key"], k1["title"]) == ("k1", "Renamed")
    # k1 has not changed since: its entity is the API's JSON of the record, field for field.
    assert k1 == record_json(Record.objects.get(feed=sealed_feed, key="k1"))


def test_every_entity_names_its_content_type_a_deletion_s_too(client, sealed_feed):
    # The format lists Content-Type for every entity; a part without one would be
    # text/plain by default (RFC 2046), which get_content_type() would not tell apart.
    parts = [part for number in (1, 2, 3)
             for part in parts_of(client.get(f"/feeds/books/pages/{number}"))]
    deletions = [part for part in parts if part["Operation-Type"] == "http-equiv=DELETE"]
    assert len(parts) == 7
    assert len(deletions) == 1
    for part in parts:
        assert part["Content-Type"] == "application/json", part["Content-ID"]
        assert int(part["Content-Length"]) == len(part.get_payload(decode=True))
    assert deletions[0]["Content-Length"] == "0"


def test_bodies_use_crlf_line_ends(client, sealed_feed):
    body = client.get("/feeds/books/pages/1").content
    assert b"\n" not in body.replace(b"\r\n", b"")


def test_links_and_cache_control_follow_the_pages_that_exist(client, sealed_feed):
    first, middle, newest = (client.get(f"/feeds/books/pages/{n}") for n in (1, 2, 3))
    assert links(first) == {"self": "/feeds/books/pages/1", "next": "/feeds/books/pages/2"}
    assert links(middle) == {"self": "/feeds/books/pages/2", "prev": "/feeds/books/pages/1",
                             "next": "/feeds/books/pages/3"}
    # The newest page names the WebSub hub (its topic is the entry point, /pages/latest).
    assert links(newest) == {"self": "/feeds/books/pages/3", "prev": "/feeds/books/pages/2",
                             "hub": "/websub/"}
    assert first["Cache-Control"] == middle["Cache-Control"] == IMMUTABLE
    assert newest["Cache-Control"] != IMMUTABLE


def test_a_page_last_modified_is_its_last_entity_s(client, sealed_feed):
    for n in (1, 2, 3):
        response = client.get(f"/feeds/books/pages/{n}")
        assert response["Last-Modified"] == parts_of(response)[-1]["Last-Modified"]


def test_a_sealed_page_without_a_later_page_gains_next_by_its_headers_only(client, feed):
    for n in range(1, 4):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)
    before = client.get("/feeds/books/pages/1")
    publishing.put_record(feed=feed, key="k4", data=record_data(4))
    after = client.get("/feeds/books/pages/1", HTTP_IF_NONE_MATCH=before["ETag"])

    assert "next" not in links(before)
    assert before["Cache-Control"] != IMMUTABLE
    assert after.status_code == 200  # the ETag covers the next link
    assert links(after)["next"] == "/feeds/books/pages/2"
    assert after.content == before.content
    assert after["Cache-Control"] == IMMUTABLE


def test_the_open_page_is_revalidated_by_etag_and_never_by_date(client, sealed_feed):
    first = client.get("/feeds/books/pages/3")
    by_etag = client.get("/feeds/books/pages/3", HTTP_IF_NONE_MATCH=first["ETag"])
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    by_date = client.get("/feeds/books/pages/3", HTTP_IF_MODIFIED_SINCE=first["Last-Modified"])

    assert by_etag.status_code == 304
    assert by_date.status_code == 200
    assert len(parts_of(by_date)) == 2


def test_latest_redirects_briefly_to_the_newest_page(client, sealed_feed, feed):
    response = client.get("/feeds/books/pages/latest")
    assert response.status_code == 302
    assert response["Location"] == "/feeds/books/pages/3"
    assert response["Cache-Control"] == "public, max-age=60"
    FeedFactory(slug="empty")
    assert client.get("/feeds/empty/pages/latest").status_code == 404
    assert client.get("/feeds/empty/pages/1").status_code == 404
    assert client.get("/feeds/nope/pages/latest").status_code == 404


def test_following_prev_from_latest_reaches_page_one(client, sealed_feed):
    url, seen = client.get("/feeds/books/pages/latest")["Location"], []
    while url:
        response = client.get(url)
        seen.append(url)
        url = links(response).get("prev")
    assert seen[-1] == "/feeds/books/pages/1"
    assert len(seen) == 3


@pytest.mark.parametrize("url", ["/feeds/books/pages/1", "/feeds/books/pages/3"])
def test_head_agrees_with_get(client, sealed_feed, url):
    get, head = client.get(url), client.head(url)
    assert head.status_code == get.status_code == 200
    for name in ("Content-Type", "ETag", "Last-Modified", "Link", "Cache-Control",
                 "Content-Length"):
        assert head[name] == get[name], name


def test_pages_sealed_before_linked_pages_existed_are_served_then_frozen(client, sealed_feed):
    expected = client.get("/feeds/books/pages/1").content
    ArchivePage.objects.filter(feed=sealed_feed).update(multipart=None)

    rendered = client.get("/feeds/books/pages/1").content
    assert freeze_linked_pages() == 2
    stored = bytes(ArchivePage.objects.get(feed=sealed_feed, number=1).multipart)
    assert rendered == stored == expected


def test_the_migration_keeps_each_record_s_metadata_on_its_newest_entry(sealed_feed):
    migration = importlib.import_module("archives.migrations.0005_entry_metadata_of_newest_entries")
    Entry.objects.filter(feed=sealed_feed).update(metadata=None)
    migration.keep_current_metadata(apps, None)

    for record in Record.objects.filter(feed=sealed_feed):
        newest = record.entries.order_by("-seq").first()
        assert newest.metadata == (None if newest.is_deletion else record.metadata)
        assert all(entry.metadata is None for entry in record.entries.exclude(pk=newest.pk))


# Snapshots -----------------------------------------------------------------------------

def snapshot_records(client, slug: str) -> tuple[dict, dict[str, dict]]:
    """The newest snapshot's index and the records it holds, by key."""
    index = json.loads(client.get(client.get(f"/feeds/{slug}/snapshots/latest")["Location"])
                       .content)
    records = {}
    for url in index["pages"]:
        for part in parts_of(client.get(urlsplit(url).path)):
            assert part["Operation-Type"] == "http-equiv=PUT"
            record = json.loads(part.get_content())
            records[record["key"]] = record
    return index, records


def follow_feed(client, index: dict, records: dict[str, dict]) -> dict[str, dict]:
    """Apply the feed after the snapshot: from its resume page, skip each entity up to
    and including its Content-ID, then apply every one, each once (by Content-ID)."""
    records, applied = dict(records), set()
    url = urlsplit(index["feed"]["resumePage"]).path
    skipping = index["feed"]["resumeAfterContentId"] is not None
    while url:
        response = client.get(url)
        if response.status_code == 404:  # the feed had no entry after the snapshot
            break
        for part in parts_of(response):
            if skipping:
                skipping = part["Content-ID"] != index["feed"]["resumeAfterContentId"]
                continue
            assert part["Content-ID"] not in applied
            applied.add(part["Content-ID"])
            key = urlsplit(part["Content-Location"]).path.rsplit("/", 1)[1]
            if part["Operation-Type"] == "http-equiv=DELETE":
                records.pop(key, None)
            else:
                records[key] = json.loads(part.get_content())
        url = links(response).get("next")
    return records


def live_records(feed: Feed) -> dict[str, tuple[str, dict]]:
    return {record.key: (record.title, record.metadata)
            for record in Record.objects.filter(feed=feed, deleted_at__isnull=True)}


def shape(records: dict[str, dict]) -> dict[str, tuple[str, dict]]:
    return {key: (record["title"], record["metadata"]) for key, record in records.items()}


def test_a_snapshot_holds_the_live_records_and_its_index_follows_the_schema(client, sealed_feed):
    take_snapshot(sealed_feed)
    index, records = snapshot_records(client, "books")

    jsonschema.validate(index, SCHEMA)
    assert all(url.startswith("http://127.0.0.1:8000/") for url in index["pages"])
    assert shape(records) == live_records(sealed_feed)
    assert index["feed"]["lastEntry"] == 7
    # Dated as of its cut, not as of when it was made: nothing after it is older.
    assert index["createdAt"] == rfc3339(Feed.objects.get(pk=sealed_feed.pk).last_updated)


def test_snapshot_entities_are_the_page_entities_of_the_same_entries(client, sealed_feed):
    take_snapshot(sealed_feed)
    _, records = snapshot_records(client, "books")
    index = json.loads(client.get(client.get("/feeds/books/snapshots/latest")["Location"])
                       .content)
    snapshot_parts = [part for url in index["pages"]
                      for part in parts_of(client.get(urlsplit(url).path))]
    page_parts = {part["Content-ID"]: part for n in (1, 2, 3)
                  for part in parts_of(client.get(f"/feeds/books/pages/{n}"))}
    for part in snapshot_parts:
        same = page_parts[part["Content-ID"]]
        assert part.as_bytes() == same.as_bytes()


@pytest.mark.parametrize("seed", range(5))
def test_a_snapshot_then_the_feed_after_it_rebuilds_the_live_records(client, db, seed):
    rng = random.Random(seed)
    feed = FeedFactory(slug="books", page_size=rng.choice([1, 3, 5]))
    history(feed, 40, rng)
    take_snapshot(feed, keep=1)
    history(feed, 40, rng)  # the feed goes on after the snapshot
    seal_feed(Feed.objects.get(pk=feed.pk))

    index, records = snapshot_records(client, "books")
    assert shape(follow_feed(client, index, records)) == live_records(feed)


@pytest.mark.parametrize("seed", range(5))
def test_both_representations_hold_the_same_entries_in_the_same_order(client, db, seed):
    rng = random.Random(seed)
    feed = FeedFactory(slug="books", page_size=rng.choice([1, 2, 4]))
    history(feed, 50, rng)

    atom_ids = [entry["id"] + entry["updated"] for document in
                reversed(walk(client, "/feeds/books/").documents)
                for entry in reversed(document.entries())]
    linked, url = [], client.get("/feeds/books/pages/latest")["Location"]
    while urlsplit(url).path != "/feeds/books/pages/1":
        url = links(client.get(url))["prev"]
    while url:
        response = client.get(url)
        for part in parts_of(response):
            key = urlsplit(part["Content-Location"]).path.rsplit("/", 1)[1]
            record = Record.objects.get(feed=feed, key=key)
            seq = int(part["Content-ID"].split("-")[1].split("@")[0])
            linked.append(record.atom_id + Entry.objects.get(feed=feed, seq=seq)
                          .updated.isoformat(timespec="microseconds")
                          .replace("+00:00", "Z"))
        url = links(response).get("next")
    assert linked == atom_ids


def test_a_feed_with_no_entries_gets_no_snapshot(client, feed):
    """Its index would send consumers to a page 1 that does not exist yet."""
    with pytest.raises(NothingToSnapshot):
        take_snapshot(feed)
    assert client.get("/feeds/books/snapshots/latest").status_code == 404


def test_snapshots_are_immutable_and_unknown_ones_are_404(client, sealed_feed):
    snapshot = take_snapshot(sealed_feed)
    index = client.get(f"/feeds/books/snapshots/{snapshot.uuid}/")
    page = client.get(f"/feeds/books/snapshots/{snapshot.uuid}/pages/1")
    assert index["Cache-Control"] == page["Cache-Control"] == IMMUTABLE
    assert index["Content-Type"] == "application/json"
    assert client.get(f"/feeds/books/snapshots/{snapshot.uuid}/pages/9").status_code == 404
    assert client.get("/feeds/books/snapshots/not-a-uuid/").status_code == 404
    assert client.get("/feeds/books/snapshots/not-a-uuid/pages/1").status_code == 404
    Snapshot.objects.update(complete=False)  # half-made: not served
    assert client.get(f"/feeds/books/snapshots/{snapshot.uuid}/").status_code == 404
    assert client.get("/feeds/books/snapshots/latest").status_code == 404


def test_the_snapshot_command_reports_and_keeps_the_newest(sealed_feed, settings):
    settings.FEEDPUB_SNAPSHOT_GRACE_SECONDS = 0  # superseded ones go at once
    out = StringIO()
    for _ in range(3):
        call_command("snapshot", "--feed", "books", "--keep", "2", stdout=out)
    assert "books: snapshot" in out.getvalue()
    assert "4 records as of entry 7" in out.getvalue()
    assert Snapshot.objects.filter(feed=sealed_feed).count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_snapshots_taken_while_writers_run_are_consistent_cuts(client):
    feed = FeedFactory(slug="books", page_size=5)
    history(feed, 20, random.Random(1))

    def writer(n: int) -> None:
        rng = random.Random(n)
        for step in range(30):
            key = f"k{rng.randrange(8)}"
            publishing.put_record(feed=feed, key=key, data=record_data(step, title=f"{n} {step}"))

    def snapshotter(_: int) -> None:
        for _ in range(3):
            take_snapshot(Feed.objects.get(pk=feed.pk))

    raise_first_error(run_at_once([lambda: writer(1), lambda: writer(2),
                                   lambda: snapshotter(0)]))
    seal_feed(Feed.objects.get(pk=feed.pk))
    for snapshot in Snapshot.objects.filter(feed=feed):
        index = json.loads(client.get(f"/feeds/books/snapshots/{snapshot.uuid}/").content)
        records = {}
        for url in index["pages"]:
            for part in parts_of(client.get(urlsplit(url).path)):
                record = json.loads(part.get_content())
                records[record["key"]] = record
        assert shape(follow_feed(client, index, records)) == live_records(feed)


class FakeClock:
    """time.monotonic for a watching sealer: moved only by the test."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watching_sealer_snapshots_changed_feeds_only(sealed_feed, monkeypatch):
    from archives.management.commands import seal_archives

    clock, passes = FakeClock(), iter(range(3))

    def sleep(seconds):  # between passes: 1000 s go by, and one more write
        if next(passes, None) is None:
            raise KeyboardInterrupt
        clock.now += 1000
        publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))

    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    monkeypatch.setattr(seal_archives.time, "monotonic", clock)
    out = StringIO()
    with pytest.raises(KeyboardInterrupt):  # passes at 0, 1000, 2000 and 3000 s
        call_command("seal_archives", "--watch", "1", "--snapshot-every", "1500", stdout=out)

    snapshots = list(Snapshot.objects.filter(feed=sealed_feed).order_by("created"))
    assert [snapshot.last_seq for snapshot in snapshots] == [7, 8]  # at 0 and 2000 s
    assert out.getvalue().count("snapshot ") == 2


def test_a_full_page_is_sealed_while_a_slow_snapshot_is_under_way(db, settings, monkeypatch):
    """A snapshot slowed to 0.3 s a page spans many of the sealer's passes: a page of
    another feed that fills meanwhile is sealed at the next pass, not after the snapshot;
    and the pages taken in slices, across a seal of the snapshot's own feed, are the bytes
    a snapshot taken at once would hold."""
    from archives.management.commands import seal_archives
    from archives.storage import snapshots

    settings.FEEDPUB_SEAL_ON_WRITE = False
    big, other = FeedFactory(slug="big", page_size=3), FeedFactory(slug="other", page_size=3)
    for n in range(20):  # 6 pages sealed by the first pass, entries 19 and 20 after them
        publishing.put_record(feed=big, key=f"k{n}", data=record_data(n))
    clock, seen = FakeClock(), []
    make_page = snapshots._page

    def slow_page(snapshot, number, parts):
        clock.now += 0.3
        seen.append((snapshot.pages, Feed.objects.get(pk=other.pk).sealed_pages))
        if number == 3:  # under way: pages fill meanwhile
            for n in range(3):
                publishing.put_record(feed=other, key=f"k{n}", data=record_data(n))
            publishing.put_record(feed=big, key="k20", data=record_data(20))  # after the cut
        return make_page(snapshot, number, parts)

    def sleep(seconds):  # a sealer sleeps only once the snapshot is done
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshots, "_page", slow_page)
    monkeypatch.setattr(seal_archives.time, "monotonic", clock)
    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        call_command("seal_archives", "--watch", "60", "--snapshot-every", "3600",
                     stdout=StringIO())

    snapshot = Snapshot.objects.get(feed=big)
    sealed_at = next(pages for pages, other_sealed in seen if other_sealed)
    assert (snapshot.complete, snapshot.last_seq, snapshot.pages) == (True, 20, 7)
    assert 1 <= sealed_at < snapshot.pages  # sealed while the snapshot was half-way
    assert Feed.objects.get(pk=big.pk).sealed_pages == 7  # big's page 7 too, meanwhile
    at_once = [snapshots.linkedpages.render(parts) for parts in snapshots._chunks(
        snapshots.live_entities(Feed.objects.get(pk=big.pk), 20), 3)]
    assert [bytes(body) for body in snapshot.page_set.order_by("number")
            .values_list("body", flat=True)] == at_once


def test_a_feed_with_nothing_new_since_its_snapshot_gets_no_other(sealed_feed, feed):
    FeedFactory(slug="empty")
    assert [s.feed.slug for s in snapshot_changed_feeds(keep=3)] == ["books"]
    assert snapshot_changed_feeds(keep=3) == []
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    assert [s.last_seq for s in snapshot_changed_feeds(slug="books", keep=3)] == [8]


def test_pages_not_sealed_yet_hold_their_own_range_and_keep_it_when_sealed(
        client, feed, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False  # a sealer that lags behind
    for n in range(1, 6):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    before = [client.get(f"/feeds/books/pages/{n}") for n in (1, 2)]
    seal_feed(feed)
    after = [client.get(f"/feeds/books/pages/{n}") for n in (1, 2)]

    assert [len(parts_of(page)) for page in before] == [3, 2]
    assert links(before[0])["next"] == "/feeds/books/pages/2"
    assert before[0]["Cache-Control"] == IMMUTABLE  # it has next: it will never change
    assert [page.content for page in after] == [page.content for page in before]
    assert client.get("/feeds/books/pages/latest")["Location"] == "/feeds/books/pages/2"
    assert client.get("/feeds/books/pages/3").status_code == 404


def test_the_page_size_is_fixed_once_the_feed_has_an_entry(feed):
    publishing.update_feed(feed=feed, page_size=5)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    with pytest.raises(ValidationError) as refused:
        publishing.update_feed(feed=feed, page_size=7)
    assert "page_size" in refused.value.message_dict


def test_a_failing_snapshot_never_stops_the_sealer(sealed_feed, monkeypatch, caplog):
    from archives.management.commands import seal_archives
    from archives.storage import snapshots

    def broken(snapshot, **kwargs):
        raise ValueError("a broken page")

    passes = iter(range(2))
    monkeypatch.setattr(snapshots, "advance_snapshot", broken)
    monkeypatch.setattr(seal_archives.time, "sleep", lambda seconds: next(passes))
    monkeypatch.setattr(seal_archives.time, "monotonic", lambda: 10_000.0)
    with pytest.raises(StopIteration):  # the loop went on to its third pass
        call_command("seal_archives", "--watch", "1", "--snapshot-every", "1",
                     stdout=StringIO())
    assert caplog.text.count("failed; the next round tries again") == 1  # then not due

def test_an_entity_without_the_optional_fields_is_the_bytes_sealed_before_them():
    # Sealed linked pages keep these bytes: a key added to records' JSON must be left out
    # when empty (archives/formats.py record_json), or every stored page would differ from
    # a fresh render of itself.
    feed = Feed(slug="books", uuid=uuid.UUID(int=7), title="Books")
    row = EntryRow(seq=12, kind=Entry.Kind.CREATE,
                   updated=datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=UTC),
                   title="Ünder & <over>", summary="A summary.",
                   links=[{"rel": "related", "href": "https://example.org/a"}], key="isbn-1",
                   metadata={"year": 2003, "subject": "Soil"},
                   created=datetime(2026, 3, 1, tzinfo=UTC), schema_version=None)

    part = linkedpages.entity(feed, row, "https://pub.example/feeds/books/records/")

    assert part == (
        b"Content-ID: <entry-12@00000000-0000-0000-0000-000000000007>\r\n"
        b"Operation-Type: http-equiv=PUT\r\n"
        b"Last-Modified: Wed, 04 Mar 2026 05:06:07 GMT\r\n"
        b"Content-Location: https://pub.example/feeds/books/records/isbn-1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 375\r\n\r\n"
        + '{"key":"isbn-1","atom_id":"urn:uuid:6105f6e0-b414-5f0c-940c-ad973219dfee",'
          '"title":"Ünder & <over>","summary":"A summary.",'
          '"metadata":{"year":2003,"subject":"Soil"},'
          '"links":[{"rel":"related","href":"https://example.org/a"}],'
          '"created":"2026-03-01T00:00:00.000000Z","updated":"2026-03-04T05:06:07.000089Z",'
          '"deleted":false,"url":"https://pub.example/feeds/books/records/isbn-1"}'.encode())
