"""The invariants of docs/how-it-works/invariants.md#pages, checked over random histories
through HTTP.

A consumer that walks the served documents from the subscription document back through
every prev-archive, and applies RFC 5005 4.2 and Atom-PMH, must rebuild exactly the live
records; pages hold exact seq ranges; updated strictly increases; pages never change but for
their next-archive link.
"""

from __future__ import annotations

import random

import pytest
from lxml import etree

from archives.documents.records import record_json
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import FeedFactory, record_data
from .walking import NS, walk

BASE = "http://127.0.0.1:8000"

pytestmark = pytest.mark.django_db


def random_history(feed, rng, steps, keys=12):
    """Puts, identical puts, updates, deletes, batches and seals, in a random mix."""
    pages = {}
    for step in range(steps):
        key = f"r{rng.randrange(keys)}"
        roll = rng.random()
        if roll < 0.45:
            publishing.put_record(feed=feed, key=key, data=record_data(rng.randrange(4)))
        elif roll < 0.6:
            if Record.objects.filter(feed=feed, key=key).exists():
                publishing.delete_record(feed=feed, key=key)
        elif roll < 0.75:
            publishing.apply_batch(feed=feed, operations=[
                {"op": "put", "key": f"r{rng.randrange(keys)}",
                 "record": record_data(rng.randrange(4), title=f"batch {step}")}
                for _ in range(rng.randrange(1, 6))
            ])
        else:
            seal_feed(feed)
            for page in ArchivePage.objects.filter(feed=feed):
                pages.setdefault(page.number, []).append(bytes(page.body))
    return pages


def live_records(feed):
    return {
        record.atom_id: record
        for record in Record.objects.filter(feed=feed, deleted_at__isnull=True)
    }


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_walking_the_feed_rebuilds_exactly_the_live_records(client, seed):
    feed = FeedFactory(slug="books", page_size=rng_page_size(seed))
    random_history(feed, random.Random(seed), steps=120)

    walked = walk(client, f"{BASE}/feeds/books/")
    live = live_records(feed)

    assert set(walked.live) == set(live)
    for atom_id, entry in walked.live.items():
        record = live[atom_id]
        assert entry["title"] == record.title
        assert entry["updated"] == record_json(record)["updated"]
        assert entry["alternates"][0] == f"{BASE}/feeds/books/records/{record.key}"


def rng_page_size(seed):
    return [1, 3, 5, 8][seed % 4]


@pytest.mark.parametrize("seed", [5, 6])
def test_the_walk_covers_every_entry_exactly_once_in_seq_order(client, seed):
    feed = FeedFactory(slug="books", page_size=4)
    random_history(feed, random.Random(seed), steps=100)
    seal_feed(feed)

    walked = walk(client, f"{BASE}/feeds/books/")
    served = [e["updated"] for d in reversed(walked.documents)
              for e in reversed(d.entries())]
    logged = [e.updated for e in Entry.objects.filter(feed=feed).order_by("seq")]
    assert served == [e.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for e in logged]


@pytest.mark.parametrize("seed", [7, 8])
def test_seq_is_gapless_and_updated_strictly_increases(seed):
    feed = FeedFactory(page_size=3)
    random_history(feed, random.Random(seed), steps=100)

    log = list(Entry.objects.filter(feed=feed).order_by("seq").values_list("seq", "updated"))
    assert [seq for seq, _ in log] == list(range(1, len(log) + 1))
    assert all(a[1] < b[1] for a, b in zip(log, log[1:], strict=False))
    assert Feed.objects.get(pk=feed.pk).last_seq == len(log)


@pytest.mark.parametrize("seed", [9, 10])
def test_pages_hold_exact_ranges_and_documents_are_dated_by_their_newest_entry(client, seed):
    feed = FeedFactory(slug="books", page_size=5)
    random_history(feed, random.Random(seed), steps=100)
    seal_feed(feed)
    feed.refresh_from_db()

    walked = walk(client, f"{BASE}/feeds/books/")
    archives = list(reversed(walked.documents[1:]))
    assert len(archives) == feed.sealed_pages
    for number, document in enumerate(archives, start=1):
        seqs = Entry.objects.filter(feed=feed, seq__range=((number - 1) * 5 + 1, number * 5))
        stamps = sorted(e.updated.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for e in seqs)
        assert sorted(e["updated"] for e in document.entries()) == stamps
        assert document.updated == stamps[-1]
    for newer, older in zip(walked.documents, walked.documents[1:], strict=False):
        # Atom-PMH: a prev-archive target is no later than any entry linking to it.
        if newer.entries():
            assert older.updated <= min(e["updated"] for e in newer.entries())


@pytest.mark.parametrize("seed", [11, 12])
def test_a_page_only_ever_gains_its_next_archive_link(seed):
    feed = FeedFactory(page_size=2)
    history = random_history(feed, random.Random(seed), steps=150)

    for number, versions in history.items():
        distinct = list(dict.fromkeys(versions))
        assert len(distinct) <= 2, f"page {number} changed {len(distinct) - 1} times"
        if len(distinct) == 2:
            first, last = (etree.fromstring(v) for v in distinct)
            assert first.find("a:link[@rel='next-archive']", NS) is None
            gained = last.findall("a:link[@rel='next-archive']", NS)
            assert len(gained) == 1
            gained[0].getparent().remove(gained[0])
            assert etree.tostring(last, xml_declaration=True, encoding="utf-8") == distinct[0]
