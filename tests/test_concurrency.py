"""Real concurrency on PostgreSQL: the feed lock and the sealer's claim under contention."""

from __future__ import annotations

import pytest
from django.db import connection
from lxml import etree

from archives.db import locks
from archives.log import publishing
from archives.log.sealing import seal_all, seal_feed
from archives.models import ArchivePage, Entry, Feed, Record

from .factories import FeedFactory, record_data
from .threads import raise_first_error, run_at_once
from .walking import NS, walk

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def put_at_once(feed, writers: int, per_writer: int) -> None:
    """`writers` threads started together, each putting `per_writer` records of its own."""
    def writer(w):
        def job():
            for n in range(per_writer):
                publishing.put_record(feed=feed, key=f"w{w}-{n}", data=record_data(n))
        return job

    raise_first_error(run_at_once([writer(w) for w in range(writers)]))


def test_it_runs_on_postgresql():
    assert connection.vendor == "postgresql"


def test_concurrent_writers_lose_nothing_and_keep_seq_and_updated_order(settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(page_size=7)
    writers, per_writer = 8, 25
    put_at_once(feed, writers, per_writer)

    log = list(Entry.objects.filter(feed=feed).order_by("seq")
               .values_list("seq", "updated", "record__key"))
    assert [seq for seq, _, _ in log] == list(range(1, writers * per_writer + 1))
    assert all(a[1] < b[1] for a, b in zip(log, log[1:], strict=False))
    assert Record.objects.filter(feed=feed).count() == writers * per_writer
    for w in range(writers):  # each writer's own writes keep their order
        mine = [key for _, _, key in log if key.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{n}" for n in range(per_writer)]
    assert Feed.objects.get(pk=feed.pk).last_seq == writers * per_writer


def test_two_sealers_at_once_produce_each_page_exactly_once(settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    feed = FeedFactory(page_size=3)
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(61)
    ])

    results = raise_first_error(run_at_once(
        [lambda: seal_feed(Feed.objects.get(pk=feed.pk)) for _ in range(3)]))

    sealed = sorted(page.number for result in results for page in result)
    assert sealed == list(range(1, 21))  # each page sealed by exactly one sealer
    pages = list(ArchivePage.objects.filter(feed=feed).order_by("number"))
    assert [(p.number, p.first_seq, p.last_seq) for p in pages] == \
        [(n, 3 * n - 2, 3 * n) for n in range(1, 21)]
    assert [p.has_next for p in pages] == [True] * 19 + [False]
    for page in pages:
        links = etree.fromstring(bytes(page.body)).findall("a:link[@rel='next-archive']", NS)
        assert len(links) == (1 if page.has_next else 0)
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 20


def test_writers_and_sealers_together_leave_a_feed_that_rebuilds_exactly(settings, client):
    settings.FEEDPUB_SEAL_ON_WRITE = True  # every writer also seals after its commits
    feed = FeedFactory(slug="busy", page_size=4)

    def writer(w):
        def job():
            for n in range(30):
                key = f"k{(w * 7 + n) % 20}"
                if n % 5 == 4 and Record.objects.filter(feed=feed, key=key).exists():
                    publishing.delete_record(feed=feed, key=key)
                else:
                    publishing.put_record(feed=feed, key=key, data=record_data(w * 100 + n))
        return job

    def sealer():
        for _ in range(20):
            seal_feed(Feed.objects.get(pk=feed.pk))

    raise_first_error(run_at_once([writer(w) for w in range(4)] + [sealer, sealer]))
    seal_feed(feed)

    walked = walk(client, "http://127.0.0.1:8000/feeds/busy/")
    live = {r.atom_id: r for r in Record.objects.filter(feed=feed, deleted_at__isnull=True)}
    assert set(walked.live) == set(live)
    for atom_id, entry in walked.live.items():
        assert entry["title"] == live[atom_id].title
    total = sum(len(d.entries()) for d in walked.documents)
    assert total == Entry.objects.filter(feed=feed).count()


@pytest.fixture
def other_session():
    """A second database session, as another process's would be."""
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    yield raw
    raw.close()


def _fill(feed, first: int, count: int) -> None:
    for n in range(first, first + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))


def test_a_write_passes_sealing_by_while_another_writer_seals_and_the_next_seals(
        settings, other_session):
    settings.FEEDPUB_SEAL_ON_WRITE = True
    feed = FeedFactory(page_size=3)
    keys = [locks.SEALING_AFTER_WRITE, feed.pk]
    other_session.execute("SELECT pg_advisory_lock(%s, %s)", keys)

    _fill(feed, 0, 4)  # page 1 full while another writer "seals" it
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 0
    _fill(feed, 4, 3)  # page 2 too

    other_session.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
    _fill(feed, 7, 1)  # the next write seals one page of the backlog
    assert [p.number for p in ArchivePage.objects.filter(feed=feed)] == [1]
    _fill(feed, 8, 1)  # and the next the page it filled and one more
    assert [p.number for p in ArchivePage.objects.filter(feed=feed)] == [1, 2, 3]


def test_the_sealer_seals_a_feed_whose_writers_pass_sealing_by(settings, other_session):
    """seal_archives never takes the writers' lock: whatever becomes of that lock (a pooler
    that left it held on another session), the feed is sealed."""
    settings.FEEDPUB_SEAL_ON_WRITE = True
    feed = FeedFactory(page_size=3)
    other_session.execute("SELECT pg_advisory_lock(%s, %s)",
                          [locks.SEALING_AFTER_WRITE, feed.pk])
    _fill(feed, 0, 7)
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 0
    assert [(p.feed, p.number) for p in seal_all()] == [(feed.slug, 1), (feed.slug, 2)]


def test_writers_sealing_after_their_writes_seal_each_page_once_in_order(settings):
    settings.FEEDPUB_SEAL_ON_WRITE = True
    feed = FeedFactory(page_size=5)
    writers, per_writer = 8, 20
    put_at_once(feed, writers, per_writer)
    seal_all()  # what a write passed by, as seal_archives would

    pages = list(ArchivePage.objects.filter(feed=feed).order_by("number"))
    total = writers * per_writer
    assert [p.number for p in pages] == list(range(1, total // 5 + 1))
    assert [(p.first_seq, p.last_seq) for p in pages] == [
        (5 * n + 1, 5 * n + 5) for n in range(total // 5)]
    assert [p.has_next for p in pages] == [True] * (len(pages) - 1) + [False]
    # No session is left holding the lock: a seal after a write is not passed by.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks JOIN pg_database d ON d.oid = database "
                       "WHERE locktype = 'advisory' AND d.datname = current_database()")
        assert cursor.fetchone() == (0,)
