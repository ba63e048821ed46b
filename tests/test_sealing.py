from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from lxml import etree

from archives.log import publishing, sealing
from archives.log.sealing import seal_all, seal_feed
from archives.models import NEEDS_SEALING, ArchivePage, Entry, Feed

from .factories import FeedFactory, record_data
from .walking import NS


def write(feed, count, start=0):
    for n in range(start, start + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))


def entry_ids_on(page):
    return [e.findtext("a:updated", namespaces=NS)
            for e in etree.fromstring(bytes(page.body)).findall("a:entry", NS)]


def test_it_seals_a_full_page(feed):
    write(feed, 3)
    sealed = seal_feed(feed)

    page = ArchivePage.objects.get(feed=feed)
    assert [(p.number, p.first_seq, p.last_seq) for p in sealed] == [(1, 1, 3)]
    assert (page.number, page.first_seq, page.last_seq) == (1, 1, 3)
    assert not page.has_next
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 1


def test_it_leaves_a_partial_page_unsealed(feed):
    write(feed, 5)
    seal_feed(feed)
    assert list(feed.pages.values_list("number", flat=True)) == [1]


def test_page_n_holds_exactly_its_range_of_entries(feed):
    write(feed, 10)
    seal_feed(feed)

    for page in feed.pages.all():
        n, size = page.number, feed.page_size
        assert (page.first_seq, page.last_seq) == ((n - 1) * size + 1, n * size)
        expected = Entry.objects.filter(feed=feed, seq__range=(page.first_seq, page.last_seq))
        assert sorted(entry_ids_on(page)) == sorted(
            e.updated.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for e in expected)
        assert page.first_updated == expected.first().updated
        assert page.last_updated == expected.last().updated


def test_it_is_idempotent(feed):
    write(feed, 6)
    assert len(seal_feed(feed)) == 2
    bodies = list(feed.pages.values_list("body", flat=True))

    assert seal_feed(feed) == []
    assert seal_all() == []
    assert [bytes(b) for b in feed.pages.values_list("body", flat=True)] == \
        [bytes(b) for b in bodies]


def test_sealing_the_next_page_adds_only_the_next_archive_link(feed):
    write(feed, 3)
    seal_feed(feed)
    before = bytes(feed.pages.get(number=1).body)
    write(feed, 3, start=3)
    seal_feed(feed)

    page = feed.pages.get(number=1)
    after = etree.fromstring(bytes(page.body))
    links = after.findall("a:link[@rel='next-archive']", NS)
    assert page.has_next
    assert [link.get("href") for link in links] == \
        ["http://127.0.0.1:8000/feeds/books/archives/2/"]
    links[0].getparent().remove(links[0])
    assert etree.tostring(after, xml_declaration=True, encoding="utf-8") == before


def test_a_sealed_page_keeps_its_bytes_when_the_feed_is_retitled(feed):
    write(feed, 3)
    seal_feed(feed)
    before = bytes(feed.pages.get(number=1).body)
    publishing.update_feed(feed=feed, title="A new title", author="Someone else")
    write(feed, 3, start=3)
    seal_feed(feed)

    after = etree.fromstring(bytes(feed.pages.get(number=1).body))
    for link in after.findall("a:link[@rel='next-archive']", NS):
        link.getparent().remove(link)
    assert etree.tostring(after, xml_declaration=True, encoding="utf-8") == before


def test_a_sealer_that_lost_the_race_stores_nothing(feed, monkeypatch):
    write(feed, 3)
    # Another sealer claims page 1 between this one's render and its claim.
    from archives.documents import atom

    real_render = atom.render_archive

    def render_then_lose(*args, **kwargs):
        body = real_render(*args, **kwargs)
        Feed.objects.filter(pk=feed.pk).update(sealed_pages=1)
        return body

    monkeypatch.setattr(atom, "render_archive", render_then_lose)
    assert seal_feed(feed) == []
    assert not ArchivePage.objects.exists()


def test_a_sealer_killed_half_way_leaves_nothing_half_sealed(feed, monkeypatch):
    write(feed, 3)
    seal_feed(feed)
    write(feed, 6, start=3)
    from archives.log import sealing

    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    # Pages 2 and 3 are stored in one transaction, which dies while linking page 1.
    monkeypatch.setattr(sealing, "_link_previous_page", crash)
    with pytest.raises(RuntimeError):
        seal_feed(feed)
    assert list(feed.pages.values_list("number", "has_next")) == [(1, False)]
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 1

    monkeypatch.undo()
    seal_feed(feed)
    assert list(feed.pages.values_list("number", "has_next")) == \
        [(1, True), (2, True), (3, False)]


def test_the_garbage_collector_is_back_on_after_a_run_whether_it_sealed_or_failed(
        feed, monkeypatch):
    import gc

    write(feed, 6)
    collecting = []
    freeze = sealing.ArchiveDocument.freeze

    def watched_freeze(*args, **kwargs):
        collecting.append(gc.isenabled())
        return freeze(*args, **kwargs)

    monkeypatch.setattr(sealing.ArchiveDocument, "freeze", watched_freeze)
    assert len(seal_feed(feed, max_pages=1)) == 1
    assert collecting == [False]  # paused while the run is rendered
    assert gc.isenabled()

    def crash(*args, **kwargs):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(sealing.linkedpages, "render_page", crash)
    with pytest.raises(RuntimeError, match="rendering failed"):
        seal_feed(feed)
    assert gc.isenabled()

    monkeypatch.undo()
    gc.disable()  # a caller's own pause is left to its caller
    try:
        seal_feed(feed)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert Feed.objects.get(pk=feed.pk).sealed_pages == 2


def test_a_page_born_with_its_next_link_has_the_bytes_it_would_have_gained(feed):
    from archives.documents import atom, urls

    write(feed, 3)
    rows = atom.entry_rows(feed, 1, 3)
    born = atom.render_archive(feed, 1, rows, has_next=True)
    gained = atom.add_next_archive(atom.render_archive(feed, 1, rows),
                                   urls.archive_url("books", 2))
    assert born == gained


def test_dry_run_seals_nothing(feed):
    write(feed, 7)
    pages = seal_feed(feed, dry_run=True)
    assert [p.number for p in pages] == [1, 2]
    assert not ArchivePage.objects.exists()


def test_the_command_seals_and_reports(feed):
    write(feed, 7)
    out = StringIO()
    call_command("seal_archives", "--dry-run", stdout=out)
    assert "would seal books page 2 (entries 4..6)" in out.getvalue()
    assert not ArchivePage.objects.exists()

    out = StringIO()
    call_command("seal_archives", "--feed", "books", stdout=out)
    assert out.getvalue().splitlines() == [
        "sealed books page 1 (entries 1..3)", "sealed books page 2 (entries 4..6)"]

    out = StringIO()
    call_command("seal_archives", stdout=out)
    assert out.getvalue() == "nothing to seal\n"


def test_the_command_refuses_an_unknown_feed(db):
    with pytest.raises(CommandError, match="No feed 'nope'"):
        call_command("seal_archives", "--feed", "nope", stdout=StringIO())


def test_a_move_while_a_page_is_rendered_makes_the_sealer_give_up_that_render(
        feed, monkeypatch, settings):
    """The claim requires the address the page was rendered under: a move recorded
    meanwhile (rerender_documents) makes the sealer render the page again."""
    write(feed, 3)
    from archives.documents import atom

    real_render = atom.render_archive
    moved = "https://feeds.example.org"

    def render_then_move(*args, **kwargs):
        body = real_render(*args, **kwargs)
        Feed.objects.filter(pk=feed.pk).update(base_url=moved)  # what a move records
        settings.FEEDPUB_BASE_URL = moved
        return body

    monkeypatch.setattr(atom, "render_archive", render_then_move)
    seal_feed(feed)
    monkeypatch.undo()

    page = ArchivePage.objects.get()
    links = {link.get("rel"): link.get("href")
             for link in etree.fromstring(bytes(page.body)).findall("a:link", NS)}
    assert links["self"] == f"{moved}/feeds/books/archives/1/"


def test_seal_all_goes_on_past_a_feed_that_fails(feed, monkeypatch):
    other = FeedFactory(slug="films")
    write(feed, 3)
    for n in range(3):
        publishing.put_record(feed=other, key=f"f{n}", data=record_data(n))
    from archives.log import sealing

    real_seal_feed = sealing.seal_feed

    def fail_for_books(target, **kwargs):
        if target.slug == "books":
            raise RuntimeError("disk full")
        return real_seal_feed(target, **kwargs)

    monkeypatch.setattr(sealing, "seal_feed", fail_for_books)
    sealed = seal_all()
    assert [(p.feed, p.number) for p in sealed] == [("films", 1)]


def test_max_pages_bounds_one_call(feed):
    write(feed, 10)
    assert [p.number for p in seal_feed(feed, max_pages=2)] == [1, 2]
    assert [p.number for p in seal_feed(feed, dry_run=True, max_pages=5)] == [3]
    assert [p.number for p in seal_feed(feed)] == [3]


def test_a_write_seals_the_pages_it_filled_and_one_more_of_a_backlog(
        feed, settings, django_capture_on_commit_callbacks):
    settings.FEEDPUB_SEAL_ON_WRITE = False
    write(feed, 9)  # a backlog of three full pages, as if no sealer had run
    settings.FEEDPUB_SEAL_ON_WRITE = True

    with django_capture_on_commit_callbacks(execute=True):
        publishing.apply_batch(feed=feed, operations=[
            {"op": "put", "key": f"b{n}", "record": record_data(n)} for n in range(3)])
    # this write filled page 4; it seals 2 pages: pages 1 and 2 of the backlog, in order
    assert list(feed.pages.values_list("number", flat=True)) == [1, 2]


def test_a_sealer_that_loses_part_of_its_run_stores_the_rest_byte_for_byte(
        feed, settings, monkeypatch):
    from archives.documents import atom
    from archives.log import sealing

    settings.FEEDPUB_SEAL_ON_WRITE = False
    monkeypatch.setattr(sealing, "PAGES_PER_RUN", 10)  # runs of pages 1..10, 11..20, 21..25
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"k{n}", "record": record_data(n)} for n in range(75)])
    real_render = atom.render_archive
    raced = []

    def render_while_another_sealer_runs(target, number, rows, **kwargs):
        body = real_render(target, number, rows, **kwargs)
        if number == 15 and not raced:  # mid-render of pages 11..20
            raced.append(seal_feed(Feed.objects.get(pk=target.pk), max_pages=2))
        return body

    monkeypatch.setattr(atom, "render_archive", render_while_another_sealer_runs)
    sealed = seal_feed(feed)
    monkeypatch.setattr(atom, "render_archive", real_render)

    assert [p.number for p in raced[0]] == [11, 12]
    assert [p.number for p in sealed] == [n for n in range(1, 26) if n not in (11, 12)]
    pages = list(feed.pages.order_by("number"))
    assert [p.number for p in pages] == list(range(1, 26))
    assert [p.has_next for p in pages] == [True] * 24 + [False]
    fresh = Feed.objects.get(pk=feed.pk)
    for page in pages:  # whoever stored or linked it, each page is what a fresh render gives
        rows = atom.entry_rows(fresh, page.first_seq, page.last_seq)
        assert bytes(page.body) == atom.render_archive(fresh, page.number, rows,
                                                      has_next=page.has_next)


def test_a_stored_page_no_claim_covers_is_reported_not_retried_forever(feed):
    write(feed, 6)
    ArchivePage.objects.create(  # page 1 as a broken restore might leave it
        feed=feed, number=1, first_seq=1, last_seq=3, first_updated=feed.last_updated,
        last_updated=feed.last_updated, body=b"<feed/>", etag='"x"')
    with pytest.raises(RuntimeError, match="needs repair"):
        seal_feed(feed)


def test_the_watching_sealer_outlives_a_lost_database_and_logs_each_outage_once(
        monkeypatch, caplog, db):  # (db: each good pass records itself for /metrics)
    from django.db import OperationalError

    from archives.management.commands import seal_archives

    lost = OperationalError("server closed the connection unexpectedly")
    passes = [lost, lost, lost, [], lost, []]  # two outages, each followed by a good pass
    calls, closed = [], []

    def seal_all(**kwargs):
        calls.append(kwargs)
        outcome = passes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    class Stop(Exception):
        pass

    def sleep(seconds):
        if len(calls) == len(passes):
            raise Stop

    monkeypatch.setattr(seal_archives, "seal_all", seal_all)
    monkeypatch.setattr(seal_archives, "close_old_connections", lambda: closed.append(1))
    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    caplog.set_level("INFO", logger=seal_archives.__name__)

    with pytest.raises(Stop):
        call_command("seal_archives", "--watch", "1", stdout=StringIO())

    messages = [r.getMessage() for r in caplog.records if r.name == seal_archives.__name__]
    assert len(calls) == len(passes)
    assert len(closed) == 4  # the dead connection is dropped after every failed pass
    assert ["lost" if "unavailable" in m else "back" if "again" in m else m
            for m in messages] == ["lost", "back", "lost", "back"]


# Many feeds: a pass reads only the feeds with a page to seal -----------------------------

@pytest.fixture
def backfilled(monkeypatch):
    """A sealer process that has already found no page missing a stored format."""
    monkeypatch.setattr(sealing, "_backfilled", True)


@pytest.mark.parametrize(("export", "queries"), [(False, 1), (True, 2)])
def test_a_pass_with_nothing_to_do_is_one_query_however_many_feeds(
        db, backfilled, settings, export, queries):
    settings.FEEDPUB_EXPORT_PAGES = export  # on: one more, for pages not exported yet
    feeds = FeedFactory.create_batch(30, page_size=3)
    for feed in feeds[:5]:
        write(feed, 2)  # a partial page: nothing to seal
    with CaptureQueriesContext(connection) as captured:
        assert seal_all() == []
    assert len(captured) == queries


def test_a_pass_seals_exactly_the_feeds_with_a_full_page(db, backfilled):
    quiet, full, sealed_already = FeedFactory.create_batch(3, page_size=3)
    write(quiet, 2)
    write(full, 7)
    write(sealed_already, 3)
    seal_feed(sealed_already)
    assert [(p.feed, p.number) for p in seal_all()] == [(full.slug, 1), (full.slug, 2)]
    write(sealed_already, 3, start=3)  # fills its second page exactly
    assert [(p.feed, p.number) for p in seal_all()] == [(sealed_already.slug, 2)]


def test_the_first_pass_backfills_then_later_passes_skip_it(db, monkeypatch):
    monkeypatch.setattr(sealing, "_backfilled", False)
    calls = []
    monkeypatch.setattr(sealing, "freeze_linked_pages", lambda: calls.append("linked") or 0)
    monkeypatch.setattr(sealing, "freeze_rss_pages", lambda: calls.append("rss") or 0)
    seal_all()
    seal_all()
    assert calls == ["linked", "rss"]


def test_a_backfill_that_found_pages_runs_again_next_pass(db, monkeypatch):
    monkeypatch.setattr(sealing, "_backfilled", False)
    left = [1, 0]
    monkeypatch.setattr(sealing, "freeze_linked_pages", lambda: left.pop(0))
    monkeypatch.setattr(sealing, "freeze_rss_pages", lambda: 0)
    seal_all()
    assert not sealing._backfilled
    seal_all()
    assert sealing._backfilled


@pytest.mark.postgres
def test_postgresql_reads_the_feeds_to_seal_from_the_partial_index(db, backfilled):
    FeedFactory.create_batch(3, page_size=3)
    query = Feed.objects.filter(Q(NEEDS_SEALING)).order_by("pk")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = query.explain()
    assert "feed_needs_sealing" in plan


@pytest.mark.postgres
def test_the_index_predicate_does_not_overflow_on_a_huge_feed(db):
    # (sealed_pages + 1) * page_size beyond 2**31: integer arithmetic would fail the update.
    feed = FeedFactory(page_size=10_000)
    Feed.objects.filter(pk=feed.pk).update(sealed_pages=300_000, last_seq=3_000_000_000)
    assert not Feed.objects.filter(Q(NEEDS_SEALING), pk=feed.pk).exists()
    Feed.objects.filter(pk=feed.pk).update(last_seq=3_000_010_000)
    assert Feed.objects.filter(Q(NEEDS_SEALING), pk=feed.pk).exists()


# Sealed bytes are the product: text renderers write what lxml writes ------------------

SEALED_FEED_UUID = "0492efcc-6fb0-440b-9298-fbb452fc5427"
# sha256 (first 16 hex digits) of the tricky page in each frozen format, as the renderers
# before text rendering (commit 1d2be99) wrote them; the multipart page's since its DELETE
# entity carries a Content-Type.
SEALED_DIGESTS = {"atom": "bb83320635df802b", "atom-next": "370d4dc148cf9af6",
                  "multipart": "fd8c3266e6208078", "rss": "201d0ce1cffa91d4",
                  "rss-next": "965dc1faacde4722"}


def tricky_page_rows():
    """A page of rows with what escaping, dates and formats can get wrong: markup, quotes
    and line breaks in text and attributes, non-ASCII, an empty summary, producer links
    with and without type and title, metadata missing (older entries) or tricky, a record
    changed twice on the page (RSS shows its newest only), a deletion, instants on a
    second's edge, before 1970 and in another zone than UTC."""
    from datetime import UTC, datetime, timedelta, timezone

    from archives.documents.atom import EntryRow

    base = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    tricky_links = [
        {"href": "https://example.org/a?x=1&y=<2>", "rel": "related", "type": "", "title": ""},
        {"href": "https://example.org/b", "rel": "enclosure", "type": "application/pdf",
         "title": ""},
        {"href": "https://example.org/c", "rel": "https://example.org/rel/\"odd\"", "type": "",
         "title": 'A "title" & <more>\n\tin\r\nlines'},
        {"href": "https://example.org/d", "rel": "describedby",
         "type": "application/ld+json; profile=\"x\"", "title": "Ω"},
    ]
    metadata = {"quote": 'say "hi" & <b>', "path": "C:\\dir\\n", "lines": "a\r\nb\tc",
                "unicode": "日本語 \u2028 \u0085 𝄞", "nested": [{"n": 1.5, "none": None}]}
    rows = [
        ("amp", "create", base, 'Fish & "Chips" <raw> \'quoted\' ]]>', "a < b && c > d",
         [], metadata),
        ("unicode", "create", base + timedelta(microseconds=999_999),
         "Bøøks ✓ 日本語 \u2028 \u0085", "Ünïcödé", tricky_links[:2], {"k": "v"}),
        ("breaks", "update", base + timedelta(seconds=1),
         "Line\r\nbreak\tand tab", "Two\nlines\r\nCR\r", tricky_links, None),
        ("empty-summary", "create", (base + timedelta(seconds=1, microseconds=1))
         .astimezone(plus_two), "No summary", "", tricky_links[2:], {}),
        ("amp", "update", base + timedelta(seconds=2), "Fish, again", "", tricky_links[3:],
         metadata),
        ("gone", "delete", base + timedelta(seconds=3), "Gone & <forgotten>", "", [], None),
        ("old", "create", datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
         "Before 1970", "Summary", [], {"year": 1969}),
    ]
    return [EntryRow(seq, kind, updated, title, summary, links, key, meta,
                     base - timedelta(days=seq, microseconds=seq))
            for seq, (key, kind, updated, title, summary, links, meta)
            in enumerate(rows, start=1)]


def tricky_feed():
    import uuid

    return Feed(slug="books", uuid=uuid.UUID(SEALED_FEED_UUID), title='Bøøks & <Co> "1"',
                subtitle="Sub & title", author="Ann & Bob", language="en", page_size=7)


def lxml_archive(feed, number, rows, *, has_next):
    """The archive page as one lxml tree, entries by `_add_entries`: the reference."""
    from archives.documents import atom, urls

    root = atom._feed_head(feed, rows[-1].updated,
                           atom.archive_links(feed.slug, number, has_next=False))
    etree.SubElement(root, f"{{{atom.FH_NS}}}archive")
    if has_next:
        atom._insert_next_archive(root, urls.archive_url(feed.slug, number + 1))
    atom._add_entries(root, feed, list(reversed(rows)))
    return atom._serialize(root)


def lxml_rss_archive(feed, number, rows, *, has_next):
    """The RSS twin as one lxml tree, items by `_add_items`: the reference."""
    from archives.documents import rss, urls

    document, channel = rss._channel(feed, rows[-1].updated,
                                     rss.archive_links(feed.slug, number, has_next=False))
    etree.SubElement(channel, rss.FH_ARCHIVE)
    if has_next:
        rss._insert_next_archive(channel, urls.rss_archive_url(feed.slug, number + 1))
    rss._add_items(channel, feed, list(reversed(rows)))
    return rss._serialize(document)


@pytest.mark.parametrize("has_next", [False, True])
def test_sealing_writes_the_atom_page_lxml_writes(settings, atom_validators, has_next):
    from archives.documents.feeds import ArchiveDocument

    settings.FEEDPUB_BASE_URL = "https://feeds.example.org/a&b"
    feed, rows = tricky_feed(), tricky_page_rows()
    body, _ = ArchiveDocument.freeze(feed, 2, rows, has_next=has_next)

    assert body == lxml_archive(feed, 2, rows, has_next=has_next)
    root = atom_validators(body)
    assert len(root.findall("a:entry", NS)) == len(rows)
    assert root.find("a:entry/a:content", NS) is not None  # the deletion entry


@pytest.mark.parametrize("has_next", [False, True])
def test_sealing_writes_the_rss_twin_lxml_writes(settings, has_next):
    from archives.documents.feeds import RssArchiveDocument

    settings.FEEDPUB_BASE_URL = "https://feeds.example.org/a&b"
    feed, rows = tricky_feed(), tricky_page_rows()
    body = RssArchiveDocument.freeze(feed, 2, rows, has_next=has_next)

    assert body == lxml_rss_archive(feed, 2, rows, has_next=has_next)
    items = etree.fromstring(body).findall("channel/item")
    assert [item.findtext("title") for item in items] == [
        "Before 1970", "Gone & <forgotten>", "Fish, again", "No summary",
        "Line\r\nbreak\tand tab", "Bøøks ✓ 日本語 \u2028 \u0085"]  # CR kept: escaped


def test_sealed_bytes_of_every_format_are_those_of_the_renderers_before_text_rendering(
        settings):
    """The digests of the three frozen formats of the tricky page, as rendered before
    sealing wrote entries and items as text and cached atom:ids and dates (commit 1d2be99):
    a sealed page's bytes never change with a release."""
    import hashlib

    from archives.documents import linkedpages
    from archives.documents.feeds import ArchiveDocument, RssArchiveDocument

    settings.FEEDPUB_BASE_URL = "https://feeds.example.org/a&b"
    feed, rows = tricky_feed(), tricky_page_rows()
    bodies = {
        "atom": ArchiveDocument.freeze(feed, 2, rows, has_next=False)[0],
        "atom-next": ArchiveDocument.freeze(feed, 2, rows, has_next=True)[0],
        "multipart": linkedpages.render_page(feed, rows),
        "rss": RssArchiveDocument.freeze(feed, 2, rows, has_next=False),
        "rss-next": RssArchiveDocument.freeze(feed, 2, rows, has_next=True),
    }
    digests = {name: hashlib.sha256(body).hexdigest()[:16] for name, body in bodies.items()}
    assert digests == SEALED_DIGESTS
