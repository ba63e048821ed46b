from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from archives.db import bulkwrite
from archives.log import access, publishing
from archives.log.sealing import seal_feed
from archives.models import Entry, Feed, Record
from archives.validation import RECORD_FIELDS

from .factories import FeedFactory, record_data


def entries(feed):
    return list(Entry.objects.filter(feed=feed).order_by("seq"))


def test_it_creates_a_record_with_one_create_entry(feed):
    entry = publishing.put_record(feed=feed, key="a", data=record_data(1))

    record = Record.objects.get(feed=feed, key="a")
    assert entry.kind == Entry.Kind.CREATE
    assert entry.seq == 1
    assert record.title == "Record 1"
    assert record.updated == entry.updated == record.created
    assert feed.last_seq == 1
    assert feed.last_updated == entry.updated
    assert Feed.objects.get(pk=feed.pk).last_seq == 1


def test_it_appends_an_update_entry_when_a_put_changes_something(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    entry = publishing.put_record(feed=feed, key="a", data=record_data(1, title="New title"))

    assert entry.kind == Entry.Kind.UPDATE
    assert [e.seq for e in entries(feed)] == [1, 2]
    assert Record.objects.get(key="a").title == "New title"


def test_it_ignores_a_repeated_put(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    before = Record.objects.get(key="a").updated

    assert publishing.put_record(feed=feed, key="a", data=record_data(1)) is None
    assert len(entries(feed)) == 1
    assert Record.objects.get(key="a").updated == before
    assert Feed.objects.get(pk=feed.pk).last_seq == 1


def test_it_appends_a_deletion_entry_and_keeps_the_row(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    entry = publishing.delete_record(feed=feed, key="a")

    record = Record.objects.get(key="a")
    assert entry.kind == Entry.Kind.DELETE
    assert entry.links == []
    assert record.is_deleted
    assert record.deleted_at == record.updated == entry.updated


def test_it_ignores_a_repeated_delete(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    publishing.delete_record(feed=feed, key="a")

    assert publishing.delete_record(feed=feed, key="a") is None
    assert len(entries(feed)) == 2


def test_it_refuses_to_delete_a_record_that_never_existed(feed):
    with pytest.raises(Record.DoesNotExist):
        publishing.delete_record(feed=feed, key="ghost")
    assert entries(feed) == []


def test_a_put_after_a_delete_recreates_the_record(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    publishing.delete_record(feed=feed, key="a")
    entry = publishing.put_record(feed=feed, key="a", data=record_data(1))

    record = Record.objects.get(key="a")
    assert entry.kind == Entry.Kind.CREATE
    assert not record.is_deleted
    assert record.created < record.updated


def test_updated_strictly_increases_even_when_the_clock_goes_back(feed, monkeypatch):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    stuck = Feed.objects.get(pk=feed.pk).last_updated - timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: stuck)

    for n in range(2, 6):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))

    stamps = [e.updated for e in entries(feed)]
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
    assert stamps[1] - stamps[0] == timedelta(microseconds=1)


def test_a_backdated_block_stamps_only_its_feed_and_stays_strictly_increasing(feed):
    other = FeedFactory()
    start = timezone.now() - timedelta(days=10)
    # A clock that jumps back, stands still and runs past now: none of it may show.
    times = iter([start, start - timedelta(days=1), start, start + timedelta(days=30)])

    with publishing.backdated(feed, lambda: next(times)):
        stamps = [publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n)).updated
                  for n in range(4)]
        elsewhere = publishing.put_record(feed=other, key="a", data=record_data(1)).updated
    after = publishing.put_record(feed=feed, key="later", data=record_data(9)).updated

    assert stamps[0] == start
    assert stamps[1] == stamps[0] + publishing.ONE_MICROSECOND
    assert stamps[2] == stamps[1] + publishing.ONE_MICROSECOND
    assert stamps[2] < stamps[3] <= elsewhere  # capped at the wall clock
    assert elsewhere > timezone.now() - timedelta(minutes=1)  # another feed: the wall clock
    assert stamps[3] < after  # outside the block: the wall clock again


def test_only_a_new_feeds_writes_may_be_backdated(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))

    with pytest.raises(ValueError, match="has entries"), publishing.backdated(
            feed, lambda: timezone.now() - timedelta(days=1)):
        pass


def test_seq_has_no_gaps_across_feeds_and_batches(feed):
    other = FeedFactory()
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    publishing.put_record(feed=other, key="a", data=record_data(1))
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": "b", "record": record_data(2)},
        {"op": "put", "key": "c", "record": record_data(3)},
        {"op": "delete", "key": "a"},
    ])

    assert [e.seq for e in entries(feed)] == [1, 2, 3, 4]
    assert [e.seq for e in entries(other)] == [1]


def test_a_batch_applies_its_operations_in_order(feed):
    results = publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": "a", "record": record_data(1)},
        {"op": "put", "key": "a", "record": record_data(1)},  # identical: nothing
        {"op": "put", "key": "a", "record": record_data(1, title="Second")},
        {"op": "delete", "key": "a"},
        {"op": "put", "key": "b", "record": record_data(2)},
    ])

    assert [r and r.kind for r in results] == ["create", None, "update", "delete", "create"]
    assert [e.kind for e in entries(feed)] == ["create", "update", "delete", "create"]
    assert [e.title for e in entries(feed)] == ["Record 1", "Second", "Second", "Record 2"]
    assert Record.objects.get(key="a").is_deleted


def test_a_batch_stores_records_and_entries_as_they_were_put(feed):
    # New records and their entries go in by COPY, their JSON encoded once for both tables:
    # what is read back must be what was put, escapes and all.
    tricky = {"quote": 'say "hi"', "backslash": "C:\\path\\n", "tab\tkey": "a\tb\nc\r",
              "unicode": "Ünïcödé ✓ 𝄞", "nested": [{"deep": [1, 2.5, None, True]}], "empty": {}}
    links = [{"href": "https://e.org/x?a=1&b=2", "rel": "related", "type": "text/html",
              "title": "Tab\there"}]
    results = publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": "a", "record": record_data(1, metadata=tricky, links=links)},
        {"op": "put", "key": "b", "record": record_data(2, summary="")},
        {"op": "put", "key": "a", "record": record_data(1, title="Again", metadata=tricky,
                                                        links=links)},
    ])

    stored = {record.key: record for record in Record.objects.filter(feed=feed)}
    assert [entry.record.pk for entry in results] == [stored["a"].pk, stored["b"].pk,
                                                       stored["a"].pk]
    assert stored["a"].metadata == tricky
    assert stored["a"].links == [{**links[0]}]
    assert stored["a"].title == "Again"
    assert stored["a"].created == results[0].updated
    assert stored["a"].updated == results[2].updated
    assert stored["b"].summary == ""
    logged = entries(feed)
    assert [(e.seq, e.record_id, e.kind) for e in logged] == [
        (1, stored["a"].pk, "create"), (2, stored["b"].pk, "create"),
        (3, stored["a"].pk, "update")]
    assert logged[0].metadata == tricky
    assert logged[0].links == logged[2].links == [{**links[0]}]
    assert logged[1].metadata == record_data(2)["metadata"]
    # The records are saved rows: a later write finds and updates them.
    entry = publishing.put_record(feed=feed, key="b", data=record_data(2, title="Later"))
    assert entry.kind == "update"
    assert entry.record.pk == stored["b"].pk


def test_a_batch_stores_the_new_state_of_records_it_changes(feed):
    tricky = {"quote": 'say "hi"', "backslash": "C:\\path", "lines": "a\tb\nc\r",
              "unicode": "Ünïcödé ✓ 𝄞"}
    for key in ("a", "b", "c"):
        publishing.put_record(feed=feed, key=key, data=record_data(1))
    before = {record.key: record for record in Record.objects.filter(feed=feed)}

    results = publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": "a", "record": record_data(1, title="New & <title>", summary="",
                                                        metadata=tricky, links=[])},
        {"op": "delete", "key": "b"},
        {"op": "put", "key": "c", "record": record_data(1)},  # identical: unchanged
    ])

    after = {record.key: record for record in Record.objects.filter(feed=feed)}
    assert [r and r.kind for r in results] == ["update", "delete", None]
    assert (after["a"].title, after["a"].summary, after["a"].metadata, after["a"].links) == \
        ("New & <title>", "", tricky, [])
    assert after["a"].updated == results[0].updated
    assert after["a"].created == before["a"].created
    assert after["a"].deleted_at is None
    assert after["b"].deleted_at == after["b"].updated == results[1].updated
    assert after["b"].metadata == before["b"].metadata
    assert after["b"].title == before["b"].title
    assert after["c"].updated == before["c"].updated


def test_records_and_entries_are_built_by_position_from_their_models_fields(feed):
    # The write path builds them by position (Django's fast path), in an order it takes
    # from the models: each value lands in the field it is named for, the rest at their
    # fields' defaults (a fresh object for each, where the default is a callable).
    record = bulkwrite.new_record(feed, "k")
    assert (record.pk, record.feed_id, record.key, record.title, record.metadata,
            record.links) == (None, feed.pk, "k", "", {}, [])
    assert bulkwrite.new_record(feed, "j").metadata is not record.metadata
    bulkwrite.set_record_fields(record, ("T", "S", {"a": 1}, [], *(
        getattr(record, name) for name in RECORD_FIELDS[4:])))
    moment = datetime(2024, 1, 2, tzinfo=UTC)
    entry = bulkwrite.new_entry(feed, 7, record, Entry.Kind.CREATE, moment, access.UNKNOWN, 3)
    assert (entry.pk, entry.feed_id, entry.seq, entry.kind, entry.updated, entry.title,
            entry.summary, entry.links, entry.metadata, entry.schema_version) == \
        (None, feed.pk, 7, "create", moment, "T", "S", [], {"a": 1}, 3)
    assert entry.record is record
    assert entry.feed is feed
    # An entry holds every field of its record as the change left it.
    assert [getattr(entry, name) for name in RECORD_FIELDS] == \
        [getattr(record, name) for name in RECORD_FIELDS]
    deletion = bulkwrite.new_entry(feed, 8, record, Entry.Kind.DELETE, moment, access.UNKNOWN, None)
    assert (deletion.title, deletion.summary, deletion.links, deletion.metadata,
            deletion.schema_version) == ("T", "", [], None, None)


def test_a_batch_with_a_bad_operation_writes_nothing_and_names_each_one(feed):
    with pytest.raises(publishing.BatchError) as raised:
        publishing.apply_batch(feed=feed, operations=[
            {"op": "put", "key": "ok", "record": record_data(1)},
            {"op": "put", "key": "bad/key", "record": record_data(2)},
            {"op": "frobnicate", "key": "x"},
            {"op": "put", "key": "nul", "record": record_data(3, title="a\x00b")},
        ])

    assert set(raised.value.errors) == {1, 2, 3}
    assert "key" in raised.value.errors[1]
    assert "op" in raised.value.errors[2]
    assert "title" in raised.value.errors[3]
    assert entries(feed) == []
    assert not Record.objects.exists()


def test_a_batch_deleting_an_unknown_key_names_it_and_writes_nothing(feed):
    with pytest.raises(publishing.BatchError) as raised:
        publishing.apply_batch(feed=feed, operations=[
            {"op": "put", "key": "a", "record": record_data(1)},
            {"op": "delete", "key": "ghost"},
            {"op": "delete", "key": "a"},  # exists by then: fine
            {"op": "put", "key": "b", "record": {"title": ""}},
        ])
    assert raised.value.errors == {
        1: {"key": ["No record 'ghost' in this feed to delete."]},
        3: {"title": ["Must not be blank."]},
    }
    assert entries(feed) == []
    assert not Record.objects.exists()
    assert Feed.objects.get(pk=feed.pk).last_seq == 0


def test_a_batch_over_the_limit_is_refused(feed):
    operations = [{"op": "delete", "key": "x"}] * (publishing.MAX_BATCH_OPERATIONS + 1)
    with pytest.raises(ValidationError):
        publishing.apply_batch(feed=feed, operations=operations)


@pytest.mark.parametrize(
    ("key", "data", "field"),
    [
        ("", record_data(1), "key"),
        ("x" * 201, record_data(1), "key"),
        ("a b", record_data(1), "key"),
        ("..", record_data(1), "key"),
        ("k", record_data(1, title="bell\x07"), "title"),
        ("k", record_data(1, summary="tab\x0bvertical"), "summary"),
        ("k", record_data(1, title="lone \ud800 surrogate"), "title"),
        ("k", record_data(1, metadata=["not", "an", "object"]), "metadata"),
        ("k", record_data(1, metadata={"deep": {"x": "\x00"}}), "metadata"),
        ("k", record_data(1, metadata={"ok": ["fine", {"bad\x01key": 1}]}), "metadata"),
        ("k", record_data(1, metadata={"big": float("inf")}), "metadata"),
        ("k", record_data(1, metadata={"nan": float("nan")}), "metadata"),
        ("k", record_data(1, links=[
            {"href": "https://e.org/a", "rel": "http://www.iana.org/assignments/relation/alternate",
             "type": "application/atom+xml"}]), "links"),
        ("k", record_data(1, links=[{"href": "https://e.org/p", "type": "text/html"}]), "links"),
        ("k", record_data(1, links=[{"href": "https://e.org/p", "rel": "alternate",
                                     "type": "Text/HTML; charset=utf-8"}]), "links"),
        ("k", record_data(1, links=[{"href": "https://e.org/a.png", "type": "image/png"},
                                    {"href": "https://e.org/b.png", "type": "image/png"}]),
         "links"),
        ("k", record_data(1, links=[{"href": "/relative"}]), "links"),
        ("k", record_data(1, links=[{"href": "ftp://example.org/x"}]), "links"),
        ("k", record_data(1, links=[{"href": "https://e.org", "type": "html"}]), "links"),
        ("k", record_data(1, links=[{"href": "https://e.org", "colour": "red"}]), "links"),
        ("k", {**record_data(1), "extra": 1}, "extra"),
        ("k", {"summary": "no title"}, "title"),
    ],
)
def test_it_refuses_bad_input_and_writes_nothing(feed, key, data, field):
    with pytest.raises(ValidationError) as raised:
        publishing.put_record(feed=feed, key=key, data=data)

    assert field in raised.value.message_dict
    assert entries(feed) == []
    assert not Record.objects.exists()


def test_it_accepts_urn_and_tag_links_and_unicode(feed):
    data = record_data(1, title="Ünïcödé ✓ 𝄞", links=[
        {"href": "urn:isbn:0451450523", "rel": "related"},
        {"href": "tag:example.org,2024:record-1", "rel": "http://example.org/rel/source"},
    ])
    entry = publishing.put_record(feed=feed, key="a.b_c~d-1", data=data)
    assert entry.title == "Ünïcödé ✓ 𝄞"


def test_if_match_guards_against_lost_updates(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))
    etag = publishing.record_etag(Record.objects.get(key="a"))
    publishing.put_record(feed=feed, key="a", data=record_data(1, title="Someone else"))

    with pytest.raises(publishing.PreconditionFailed):
        publishing.put_record(feed=feed, key="a", data=record_data(1, title="Mine"), if_match=etag)
    with pytest.raises(publishing.PreconditionFailed):
        publishing.delete_record(feed=feed, key="a", if_match=etag)
    current = publishing.record_etag(Record.objects.get(key="a"))
    assert publishing.put_record(feed=feed, key="a", data=record_data(9), if_match=current)
    assert len(entries(feed)) == 3


def test_a_feed_cannot_be_renamed_resized_or_deleted_once_a_page_is_sealed(feed):
    for n in range(3):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)

    with pytest.raises(ValidationError):
        publishing.update_feed(feed=feed, slug="renamed")
    with pytest.raises(ValidationError):
        publishing.update_feed(feed=feed, page_size=10)
    with pytest.raises(ValidationError):
        publishing.delete_feed(feed=feed)
    assert publishing.update_feed(feed=feed, title="New title").title == "New title"
    assert Feed.objects.get(pk=feed.pk).slug == "books"


def test_a_feed_with_one_entry_keeps_its_slug_and_cannot_be_deleted(feed):
    publishing.put_record(feed=feed, key="a", data=record_data(1))

    with pytest.raises(publishing.FeedPromised):
        publishing.update_feed(feed=feed, slug="renamed")
    with pytest.raises(publishing.FeedPromised):
        publishing.delete_feed(feed=feed)
    assert Feed.objects.get(pk=feed.pk).slug == "books"


def test_a_feed_without_entries_can_be_renamed_and_deleted(feed):
    publishing.update_feed(feed=feed, slug="renamed")
    publishing.delete_feed(feed=feed)
    assert not Feed.objects.exists()


def test_a_write_that_fills_a_page_seals_it_after_commit(feed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(4):
            publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))

    assert Feed.objects.get(pk=feed.pk).sealed_pages == 1
    assert feed.pages.get().last_seq == 3


def test_sealing_after_commit_can_be_switched_off(feed, settings,
                                                  django_capture_on_commit_callbacks):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(4):
            publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 0


@pytest.mark.parametrize("href", [
    "https://example.org", "http://example.org/", "HTTPS://Example.ORG:8443/a?b=1#c",
    "https://a-b.c/x y", "https://a.b/\x00", "https:///path", "https://", "http:example.org",
    "https://[::1]/x", "https://[::1/x", "https://exa]mple.org/", "https://üñí.example/",
    "https://user:pw@example.org/", "https://example.org:port/", "https://e.org/\u2028",
    "https://e.org/" + "x" * 2000, "ftp://example.org/", "urn:isbn:0451450523", "urn:",
    "tag:example.org,2024:x", "https://e.org?q", "https://e.org#f", "https://e..org/ü?ä=1",
    "https://e.org\\x", " https://e.org/", "https://e.org/\t", "https://a\uff03b/",
    "https://a\u2100b/", "urn://host/x", "urn:/x", "tag:?q", "https://e.org/\u0085",
])
def test_every_href_the_rule_takes_urlsplit_reads_as_that_kind_of_uri(href):
    """What reads a stored href (the record's page, consumers) may use urlsplit: it must
    never raise on one, and must find its scheme, and the host of an http(s) one."""
    from urllib.parse import urlsplit

    from archives import validation

    if not validation.records._is_absolute_uri(href):
        return
    parts = urlsplit(href)
    assert parts.scheme.lower() in validation.LINK_SCHEMES
    assert bool(parts.netloc) == (parts.scheme.lower() in {"http", "https"})
    assert parts.path or parts.netloc


def test_the_host_part_excludes_every_character_urlsplit_refuses_there():
    import sys
    import unicodedata

    from archives import validation

    # urlsplit refuses a non-ASCII host part whose NFKC form gains / ? # @ or :.
    refused = {chr(c) for c in range(0x80, sys.maxunicode + 1)
               if any(mark in unicodedata.normalize("NFKC", chr(c)) for mark in "/?#@:")}

    assert refused == set(re.findall(f"[{validation.NETLOC_UNSAFE_CLASS}]",
                                     "".join(map(chr, range(0x80, 0x10000)))))


def test_the_whitespace_class_is_what_python_calls_whitespace():
    import sys

    from archives import validation

    spelt_out = re.compile(f"[{validation.WHITESPACE_CLASS}]")
    assert all(bool(spelt_out.match(chr(c))) == chr(c).isspace()
               for c in range(sys.maxunicode + 1))


def test_a_producers_text_html_alternate_is_refused_saying_what_to_do_instead(feed):
    """feedpub links every active entry's page for people as its text/html alternate: a
    second one would break RFC 4287 4.1.2 in every document the entry is in."""
    with pytest.raises(ValidationError) as raised:
        publishing.put_record(feed=feed, key="k", data=record_data(1, links=[
            {"href": "https://e.org/img", "rel": "related", "type": "image/png"},
            {"href": "https://e.org/page", "rel": "alternate", "type": "text/html"}]))

    (message,) = raised.value.message_dict["links"]
    assert message.startswith("links[1]: feedpub already links the record's page for people")
    assert "such as related" in message
    assert entries(feed) == []


def test_one_alternate_of_each_other_type_and_related_html_pages_are_accepted(feed):
    links = [{"href": "https://e.org/page", "rel": "related", "type": "text/html"},
             {"href": "https://e.org/other", "rel": "related", "type": "text/html"},
             {"href": "https://e.org/data.json", "type": "application/json"},
             {"href": "https://e.org/cover.png", "rel": "alternate", "type": "image/png"}]
    publishing.put_record(feed=feed, key="k", data=record_data(1, links=links))
    assert len(Record.objects.get(key="k").links) == 4
