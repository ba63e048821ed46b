"""After a move to another base URL: `manage.py rerender_documents` renders the frozen
documents again (archives/log/rerendering.py), and development refuses a request for a host
other than FEEDPUB_BASE_URL's (archives/serving/basecheck.py)."""

from __future__ import annotations

from datetime import timedelta
from email.utils import parsedate_to_datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.test import Client

from archives.documents import base, linkedpages
from archives.documents.base import final_pages, gzipped_bodies, subscription_bodies
from archives.log import publishing, rerendering
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Feed, Record, SnapshotPage
from archives.storage import export
from archives.storage.snapshots import take_snapshot

from .factories import FeedFactory, record_data
from .oai import NS, ask, response_date, walk

OLD, NEW = "http://127.0.0.1:8000", "http://127.0.0.1:8001"  # the same length: see below
ATOM = "application/atom+xml"


@pytest.fixture
def moved(settings, db, settled, pages_dir):
    """A feed sealed, snapshotted and exported under OLD, then retitled; the setting is
    then changed to NEW (as an operator does before running the command)."""
    settings.FEEDPUB_BASE_URL = OLD
    feed = FeedFactory(slug="books", title="Books", page_size=3)
    for n in range(1, 6):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="k1", data=record_data(1, title="Renamed"))
    publishing.delete_record(feed=feed, key="k2")
    publishing.put_record(feed=feed, key="k6", data=record_data(6))  # 8 entries: 2 pages
    seal_feed(feed)
    snapshot = take_snapshot(Feed.objects.get(pk=feed.pk))
    export.export_pending()
    publishing.update_feed(feed=Feed.objects.get(pk=feed.pk), title="Books, retitled")
    settings.FEEDPUB_BASE_URL = NEW
    return snapshot


def urls(snapshot) -> list[str]:
    """Every frozen document of the feed: sealed pages in each format, and the snapshot."""
    pages = [f"/feeds/books/archives/{n}/" for n in (1, 2)]
    return [*pages, *(page + "rss/" for page in pages), "/feeds/books/pages/1",
            "/feeds/books/pages/2", f"/feeds/books/snapshots/{snapshot.uuid}/",
            f"/feeds/books/snapshots/{snapshot.uuid}/pages/1",
            f"/feeds/books/snapshots/{snapshot.uuid}/pages/2"]


def fetch(url: str):
    # A fresh process's caches: the docs tell operators to restart after the command.
    for cache in (final_pages, subscription_bodies, gzipped_bodies):
        cache.clear()
    return Client().get(url, HTTP_ACCEPT=f"{ATOM}, application/json, multipart/mixed")


def rerender(*args: str) -> str:
    out = StringIO()
    call_command("rerender_documents", *args, "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


def test_every_link_of_every_frozen_document_moves_and_nothing_else(moved):
    before = {url: fetch(url) for url in urls(moved)}
    assert [url for url, response in before.items() if OLD.encode() not in response.content] \
        == [f"/feeds/books/snapshots/{moved.uuid}/"]  # rendered per request: NEW already

    out = rerender()

    assert "2 sealed pages and 2 snapshot pages rendered again with http://127.0.0.1:8001" \
        in out
    for url, old in before.items():
        new = fetch(url)
        assert new.status_code == 200, url
        assert OLD.encode() not in new.content, url
        assert OLD not in new["Link"], url
        assert NEW in new["Link"], url
        if url.endswith(f"{moved.uuid}/"):
            continue
        if url.startswith("/feeds/books/pages/") or "/pages/" in url:
            # Multipart: each entity is the same but for its URLs (the boundary is a hash).
            old_parts = linkedpages.split(old.content)
            assert linkedpages.split(new.content) == [
                part.replace(OLD.encode(), NEW.encode()) for part in old_parts], url
        else:
            # The same bytes but for the base URL, which has the same length here: no entry
            # reordered or changed, and the page keeps the title it was sealed with.
            assert new.content == old.content.replace(OLD.encode(), NEW.encode()), url
        assert b"retitled" not in new.content, url
        # A cache holding the old bytes never keeps them: the ETag moves (for the file
        # ETags of pages, by their date's second, as the length did not change) ...
        assert new["ETag"] != old["ETag"], url
        # ... and so does Last-Modified where it is not the last entity's (the formats' rule)
        if url.startswith("/feeds/books/archives/"):
            assert parsedate_to_datetime(new["Last-Modified"]) > parsedate_to_datetime(
                old["Last-Modified"]), url


def test_the_exported_files_are_written_again(moved, pages_dir):
    rerender()

    for number, name in ((1, "index.xml"), (2, "open.xml")):
        page = ArchivePage.objects.get(feed__slug="books", number=number)
        directory = pages_dir / f"feeds/books/archives/{number}"
        assert (directory / name).read_bytes() == bytes(page.body)
        assert (directory / "rss" / name).read_bytes() == bytes(page.rss)
        assert NEW.encode() in (directory / name).read_bytes()
        file = (directory / name).stat()
        assert fetch(f"/feeds/books/archives/{number}/")["ETag"] == base.file_etag(
            int(file.st_mtime), file.st_size)  # nginx's for the file: the same validators
    assert (pages_dir / "feeds/books/pages/1").read_bytes() == bytes(
        ArchivePage.objects.get(feed__slug="books", number=1).multipart)


def test_documents_rendered_per_request_take_a_new_last_modified(moved, settings):
    before = fetch("/feeds/books/")

    rerender()

    assert parsedate_to_datetime(fetch("/feeds/books/")["Last-Modified"]) > \
        parsedate_to_datetime(before["Last-Modified"])


def test_a_second_run_changes_nothing(moved):
    rerender()
    etags = {url: fetch(url)["ETag"] for url in urls(moved)}
    dates = Feed.objects.values_list("subscription_modified", "description_modified").get()

    out = rerender()

    assert "0 sealed pages and 0 snapshot pages rendered again" in out
    assert "4 already used it" in out
    assert "the documents of 0 feed(s) take a new Last-Modified" in out
    assert {url: fetch(url)["ETag"] for url in urls(moved)} == etags
    # Nor do the feed's dates move (and its WebSub subscribers hear nothing) again.
    assert Feed.objects.values_list("subscription_modified",
                                    "description_modified").get() == dates


def test_a_dry_run_stores_nothing(moved):
    bodies = list(ArchivePage.objects.values_list("body", "rss", "multipart", "modified"))

    assert "2 sealed pages and 2 snapshot pages to render again" in rerender("--dry-run")
    assert list(ArchivePage.objects.values_list("body", "rss", "multipart", "modified")) \
        == bodies


def test_a_page_this_release_does_not_reproduce_is_left_as_it_is(moved):
    page = ArchivePage.objects.get(feed__slug="books", number=1)
    tampered = bytes(page.body).replace(b"Record 3", b"Record three")
    ArchivePage.objects.filter(pk=page.pk).update(body=tampered)
    snapshot_page = SnapshotPage.objects.get(snapshot=moved, number=1)
    SnapshotPage.objects.filter(pk=snapshot_page.pk).update(
        body=bytes(snapshot_page.body).replace(b"Record 3", b"Record three"))

    with pytest.raises(CommandError) as failure:
        rerender()

    assert "2 documents left as they were" in str(failure.value)
    assert "books page 1 (Atom)" in str(failure.value)
    assert f"books snapshot page {snapshot_page.pk}" in str(failure.value)
    assert bytes(ArchivePage.objects.get(pk=page.pk).body) == tampered
    assert NEW.encode() in bytes(ArchivePage.objects.get(feed__slug="books", number=2).body)


def seal_pages_3_and_4() -> None:
    """Entries 9 to 12, which fill pages 3 and 4: sealed, page 2 gains next-archive."""
    feed = Feed.objects.get(slug="books")
    for n in range(7, 11):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)


def test_a_page_linked_by_a_sealer_that_had_the_new_base_url_is_rendered_again(moved):
    # A sealer of a release that recorded no base URL (this one refuses: test_wrong_...)
    Feed.objects.update(base_url=NEW)
    seal_pages_3_and_4()  # with NEW: page 2 has OLD links and a NEW next-archive link
    Feed.objects.update(base_url=OLD)
    assert NEW.encode() in bytes(ArchivePage.objects.get(feed__slug="books", number=2).body)

    out = rerender()

    assert "2 sealed pages and 2 snapshot pages rendered again" in out
    assert "2 already used it" in out  # pages 3 and 4
    for page in ArchivePage.objects.filter(feed__slug="books"):
        for body in (page.body, page.rss, page.multipart):
            assert OLD.encode() not in bytes(body), page


def test_a_page_that_gains_next_archive_while_it_is_rendered_is_rendered_again(
        moved, monkeypatch):
    store = rerendering._Pages.store
    calls = []

    def sealed_meanwhile(pages, rendered):
        if not calls:
            seal_pages_3_and_4()  # between reading page 2 and storing it
        calls.append([page.number for page in rendered])
        return store(pages, rendered)

    monkeypatch.setattr(rerendering._Pages, "store", sealed_meanwhile)

    rerender()

    assert calls == [[1, 2], [2]]
    page = ArchivePage.objects.get(feed__slug="books", number=2)
    assert page.has_next
    assert f'<link rel="next-archive" href="{NEW}/feeds/books/archives/3/"/>'.encode() \
        in bytes(page.body)
    assert OLD.encode() not in bytes(page.body)


def test_an_unknown_feed_is_refused(db):
    with pytest.raises(CommandError, match="No feed 'nope'"):
        rerender("--feed", "nope")


def test_a_page_sealed_before_deletions_had_a_content_type_is_rendered_as_it_was(
        db, settings, settled, pages_dir):
    """Pages sealed before DELETE entities carried a Content-Type have none there; such a
    page still reproduces, and only its links change."""
    settings.FEEDPUB_BASE_URL = OLD
    feed = FeedFactory(slug="books", page_size=3)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    publishing.delete_record(feed=feed, key="k1")
    publishing.put_record(feed=feed, key="k2", data=record_data(2))
    seal_feed(feed)
    typed_line = b"Content-Type: application/json\r\n"
    sealed = [part.replace(typed_line, b"") if b"http-equiv=DELETE" in part else part
              for part in linkedpages.split(bytes(ArchivePage.objects.get().multipart))]
    assert sum(typed_line not in part for part in sealed) == 1  # the deletion's
    ArchivePage.objects.update(multipart=linkedpages.render(sealed))
    settings.FEEDPUB_BASE_URL = NEW

    report = rerendering.rerender()

    assert report.not_reproduced == []
    assert report.pages == 1
    moved = linkedpages.split(bytes(ArchivePage.objects.get().multipart))
    assert moved == [part.replace(OLD.encode(), NEW.encode()) for part in sealed]


def test_a_pass_killed_after_storing_pages_has_moved_the_feeds_dates(moved, monkeypatch):
    """The feed's dates move before its first pages are stored: a second pass, which finds
    the feed recorded under the new base URL, need not (and does not) move them."""
    before = Feed.objects.values_list("subscription_modified", flat=True).get()

    def killed(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(rerendering._Pages, "snapshot_pages", killed)
    with pytest.raises(KeyboardInterrupt):
        rerendering.rerender()

    assert all(NEW.encode() in bytes(body)
               for body in ArchivePage.objects.values_list("body", flat=True))
    assert Feed.objects.values_list("subscription_modified", flat=True).get() > before


def test_a_rerun_after_a_killed_pass_exports_the_pages_that_pass_rendered(
        moved, monkeypatch, pages_dir):
    """The docs say to run the command again after an interruption: the rerun finds the
    killed pass's pages current, and still exports them."""
    def killed(self):
        raise KeyboardInterrupt  # after storing the sealed pages, before exporting them

    with monkeypatch.context() as patched:
        patched.setattr(rerendering._Pages, "snapshot_pages", killed)
        with pytest.raises(KeyboardInterrupt):
            rerender()
    index = pages_dir / "feeds/books/archives/1/index.xml"
    assert OLD.encode() in index.read_bytes()  # not exported yet

    out = rerender()

    assert "0 sealed pages and 2 snapshot pages rendered again" in out
    assert "; 2 pages exported" in out
    assert not export.pending("books", settled=False).exists()
    for number, name in ((1, "index.xml"), (2, "open.xml")):
        page = ArchivePage.objects.get(feed__slug="books", number=number)
        directory = pages_dir / f"feeds/books/archives/{number}"
        assert (directory / name).read_bytes() == bytes(page.body)
        assert NEW.encode() in (directory / name).read_bytes()
        assert (directory / "rss" / name).read_bytes() == bytes(page.rss)
    assert NEW.encode() in (pages_dir / "feeds/books/pages/1").read_bytes()


def test_an_incremental_oai_harvest_after_the_move_gets_every_record_at_its_new_url(
        moved, client, settings):
    """The records' URLs in OAI-PMH (dc:identifier, the feedpub format's url) changed with
    the move: their datestamps move with it, so that a harvester that harvests from its
    last responseDate gets them again; their `updated` stays their last change's."""
    hour = timedelta(hours=1)  # changes an hour old: a harvester has them all
    Record.objects.update(updated=F("updated") - hour, datestamp=F("datestamp") - hour)
    updated = dict(Record.objects.values_list("key", "updated"))
    settings.FEEDPUB_BASE_URL = OLD
    harvested = ask(client, verb="ListRecords", metadataPrefix="oai_dc")
    assert len(harvested.findall(".//o:record", NS)) == 6
    since = response_date(harvested)
    assert not ask(client, verb="ListRecords", metadataPrefix="oai_dc", from_=since).findall(
        ".//o:record", NS)  # caught up

    settings.FEEDPUB_BASE_URL = NEW
    rerender()

    settings.FEEDPUB_OAI_PAGE_SIZE = 4  # resumed by a token, too
    for prefix, url in (("oai_dc", "dc:identifier"), ("feedpub", "fp:url")):
        documents, records = walk(client, "ListRecords", metadataPrefix=prefix, from_=since)
        assert len(documents) == 2
        keys = [record.findtext(".//o:identifier", namespaces=NS).rsplit("/", 1)[1]
                for record in records]
        assert sorted(keys) == ["k1", "k2", "k3", "k4", "k5", "k6"]
        for record in records:
            assert record.findtext(".//o:datestamp", namespaces=NS) >= since
            if record.find("o:header", NS).get("status") == "deleted":
                continue
            assert record.findtext(f".//{url}", namespaces=NS).startswith(NEW + "/feeds/")
            if prefix == "feedpub":  # a move is not a change of the record
                key = record.findtext(".//fp:key", namespaces=NS)
                assert record.findtext(".//fp:updated", namespaces=NS) == \
                    updated[key].isoformat().replace("+00:00", "Z")
    # Selected by the new datestamps: nothing before the move, ...
    assert not ask(client, verb="ListIdentifiers", metadataPrefix="oai_dc",
                   until=since).findall(".//o:header", NS)
    # ... and the log and the API keep each record's updated as its entry's.
    assert dict(Record.objects.values_list("key", "updated")) == updated
    answer = client.get("/api/feeds/books/records/k1", HTTP_ACCEPT="application/json")
    assert answer.json()["updated"].replace("Z", "+00:00") == updated["k1"].isoformat()

    # Once only: a second pass moves nothing.
    stamps = dict(Record.objects.values_list("key", "datestamp"))
    rerender()
    assert dict(Record.objects.values_list("key", "datestamp")) == stamps
