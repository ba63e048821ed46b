"""Sealed pages exported as files (archives/storage/export.py) to the local `feedpub_pages` storage:
which files, their bytes and times, when they are written and replaced, what a crash
leaves, and `export_pages [--verify]`."""

from __future__ import annotations

import gzip
import os
import tempfile
import threading
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.urls import set_script_prefix

from archives.documents import base
from archives.log import publishing
from archives.log.sealing import freeze_linked_pages, seal_all, seal_feed
from archives.models import ArchivePage, Feed
from archives.storage import export

from .factories import FeedFactory, record_data

PAGE_1 = "feeds/books/archives/1/"
PAGE_2 = "feeds/books/archives/2/"


def add(feed: Feed, count: int) -> None:
    feed.refresh_from_db()
    for n in range(feed.last_seq, feed.last_seq + count):
        publishing.put_record(feed=feed, key=f"x{n}", data=record_data(n))
    seal_feed(Feed.objects.get(pk=feed.pk))


def files(directory) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file()}


def test_nothing_is_exported_before_a_page_is_settled(sealed_feed, pages_dir):
    assert export.export_pending() == 0
    assert files(pages_dir) == set()


def test_a_sealed_page_is_exported_with_its_twins_and_gzip(sealed_feed, pages_dir, settled,
                                                           client):
    assert export.export_pending() == 2
    assert files(pages_dir) == {
        PAGE_1 + "index.xml", PAGE_1 + "index.xml.gz",
        PAGE_1 + "rss/index.xml", PAGE_1 + "rss/index.xml.gz",
        "feeds/books/pages/1",  # linked pages: final ones only
        PAGE_2 + "open.xml", PAGE_2 + "open.xml.gz",
        PAGE_2 + "rss/open.xml", PAGE_2 + "rss/open.xml.gz",
    }
    for number, name in ((1, "index.xml"), (2, "open.xml")):
        page = ArchivePage.objects.get(feed=sealed_feed, number=number)
        directory = pages_dir / f"feeds/books/archives/{number}"
        atom, rss = directory / name, directory / "rss" / name
        assert atom.read_bytes() == bytes(page.body)
        assert rss.read_bytes() == bytes(page.rss)
        assert gzip.decompress((directory / (name + ".gz")).read_bytes()) == bytes(page.body)
        second = base.visible_second(page.modified)
        assert {int(os.stat(path).st_mtime) for path in (atom, rss)} == {second}
        # What Django sends for the URL names the same file.
        response = client.get(f"/feeds/books/archives/{number}/")
        assert response["ETag"] == f'"{second:x}-{atom.stat().st_size:x}"'
        zipped = client.get(f"/feeds/books/archives/{number}/", HTTP_ACCEPT_ENCODING="gzip")
        assert zipped.content == (directory / (name + ".gz")).read_bytes()
        assert zipped["ETag"] == f'"{second:x}-{len(zipped.content):x}"'
    assert (pages_dir / "feeds/books/pages/1").read_bytes() == bytes(
        ArchivePage.objects.get(feed=sealed_feed, number=1).multipart)
    assert export.export_pending() == 0  # recorded: nothing left to do


def test_the_final_version_replaces_the_open_one(sealed_feed, pages_dir, settled):
    export.export_pending()
    add(sealed_feed, 2)  # page 3 sealed: page 2 gains next-archive
    # Removed as the seal commits, so that readers go to Django meanwhile.
    assert not (pages_dir / PAGE_2 / "open.xml").exists()
    assert not (pages_dir / PAGE_2 / "rss/open.xml.gz").exists()
    assert export.export_pending() == 2  # page 2, final; page 3, open
    assert (pages_dir / PAGE_2 / "index.xml").read_bytes() == bytes(
        ArchivePage.objects.get(feed=sealed_feed, number=2).body)
    assert not any(name.startswith(PAGE_2) and "open" in name for name in files(pages_dir))
    assert (pages_dir / "feeds/books/archives/3/open.xml").exists()


def test_a_sealer_that_fails_to_export_loses_nothing(sealed_feed, pages_dir, settled,
                                                     monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export.AtomicFileSystemStorage, "_save", broken)
    monkeypatch.setattr(export.AtomicFileSystemStorage, "delete", broken)
    add(sealed_feed, 2)  # sealing goes on whatever the storage does
    seal_all()
    assert ArchivePage.objects.filter(feed=sealed_feed).count() == 3
    assert files(pages_dir) == set()
    monkeypatch.undo()  # (and `settled`'s clock: put it back)
    monkeypatch.setattr(base, "now", lambda: base.change_stamp()
                        + timedelta(minutes=1))
    seal_all()  # the next pass
    assert PAGE_2 + "index.xml" in files(pages_dir)
    assert not ArchivePage.objects.filter(exported__isnull=True).exists()


def test_a_page_changed_while_exporting_stays_pending(sealed_feed, pages_dir, settled,
                                                      monkeypatch):
    write = export.write

    def sealed_meanwhile(page, into=None):
        write(page, into)
        if page.number == 2:
            add(sealed_feed, 2)

    monkeypatch.setattr(export, "write", sealed_meanwhile)
    export.export_pending()
    assert ArchivePage.objects.get(feed=sealed_feed, number=1).exported is not None
    assert ArchivePage.objects.get(feed=sealed_feed, number=2).exported is None
    monkeypatch.setattr(export, "write", write)
    assert export.export_pending() >= 1
    assert (pages_dir / PAGE_2 / "index.xml").exists()


def test_a_write_replaces_a_file_whole_or_not_at_all(pages_dir):
    storage = export.storage()
    storage.save("a/b.xml", ContentFile(b"old"))

    class Interrupted(ContentFile):
        def chunks(self, chunk_size=None):
            yield b"half of the new"
            raise OSError("killed")

    with pytest.raises(OSError, match="killed"):
        storage.save("a/b.xml", Interrupted(b""))
    assert (pages_dir / "a/b.xml").read_bytes() == b"old"
    storage.save("a/b.xml", ContentFile(b"new"))
    assert (pages_dir / "a/b.xml").read_bytes() == b"new"
    assert files(pages_dir) == {"a/b.xml"}  # no temporary file left, no renamed copy
    assert (pages_dir / "a/b.xml").stat().st_mode & 0o777 == 0o644


def test_export_pages_writes_what_is_pending(sealed_feed, pages_dir, settled):
    out = StringIO()
    call_command("export_pages", "--dry-run", stdout=out)
    assert out.getvalue() == "2 pages to export\n"
    call_command("export_pages", stdout=out)
    assert "exported 2 pages" in out.getvalue()
    assert len(files(pages_dir)) == 9


def test_export_pages_verify_repairs_missing_and_stale_files(sealed_feed, pages_dir, settled):
    other = FeedFactory(slug="other", page_size=2)
    add(other, 4)
    export.export_pending()
    (pages_dir / PAGE_1 / "index.xml").unlink()
    (pages_dir / PAGE_1 / "rss/index.xml.gz").write_bytes(b"not what the database says")
    os.utime(pages_dir / PAGE_2 / "open.xml", (1, 1))  # a time nginx would send wrongly
    (pages_dir / PAGE_1 / "open.xml").write_bytes(b"superseded")
    (pages_dir / "feeds/other/archives/1/index.xml").unlink()
    before = files(pages_dir)

    out = StringIO()
    call_command("export_pages", "--verify", "--feed", "books", "--dry-run", stdout=out)
    assert files(pages_dir) == before
    call_command("export_pages", "--verify", "--feed", "books", stdout=out)
    report = out.getvalue()
    for name in (PAGE_1 + "index.xml", PAGE_1 + "rss/index.xml.gz", PAGE_2 + "open.xml"):
        assert f"wrote {name} (missing or stale)" in report
    assert f"removed {PAGE_1}open.xml (superseded)" in report
    assert "2 pages verified: 3 files written, 1 superseded" in report
    page_1 = ArchivePage.objects.get(feed=sealed_feed, number=1)
    assert (pages_dir / PAGE_1 / "index.xml").read_bytes() == bytes(page_1.body)
    assert int((pages_dir / PAGE_2 / "open.xml").stat().st_mtime) == base.visible_second(
        ArchivePage.objects.get(feed=sealed_feed, number=2).modified)
    assert not (pages_dir / "feeds/other/archives/1/index.xml").exists()  # --feed books

    out = StringIO()
    call_command("export_pages", "--verify", stdout=out)
    assert "4 pages verified: 1 file written, 0 superseded" in out.getvalue()


def test_nothing_is_exported_when_export_is_off(sealed_feed, pages_dir, settled, settings):
    settings.FEEDPUB_EXPORT_PAGES = False
    seal_all()
    assert files(pages_dir) == set()
    with pytest.raises(CommandError, match="FEEDPUB_EXPORT_PAGES is off"):
        call_command("export_pages")


def test_export_pages_names_an_unknown_feed(db):
    with pytest.raises(CommandError, match="No feed 'nope'"):
        call_command("export_pages", "--feed", "nope")


def linking_page_2_after_reading(monkeypatch, feed: Feed) -> None:
    """Page 2 gains its next-archive link (seal-on-write, another sealer) once an export
    has read it open, before it writes it: sealing's removal of its open files comes
    first."""
    read = export.SealedState.read

    def read_then_seal(pages):
        states = read(pages)
        if any(state.number == 2 and not state.has_next for state in states):
            monkeypatch.setattr(export.SealedState, "read", read)  # once
            add(feed, 2)
        return states

    monkeypatch.setattr(export.SealedState, "read", staticmethod(read_then_seal))


def test_an_open_page_linked_while_exporting_leaves_no_open_file(sealed_feed, pages_dir,
                                                                  settled, monkeypatch):
    linking_page_2_after_reading(monkeypatch, sealed_feed)
    export.export_pending()
    assert ArchivePage.objects.get(feed=sealed_feed, number=2).has_next
    # Never the open copy, which lacks the link: Django answers until the final is written.
    assert not (pages_dir / PAGE_2 / "open.xml").exists()
    assert not (pages_dir / PAGE_2 / "rss/open.xml.gz").exists()
    assert ArchivePage.objects.get(feed=sealed_feed, number=2).exported is None
    export.export_pending()
    assert (pages_dir / PAGE_2 / "index.xml").read_bytes() == bytes(
        ArchivePage.objects.get(feed=sealed_feed, number=2).body)


def test_verify_leaves_no_open_file_of_a_page_linked_meanwhile(sealed_feed, pages_dir,
                                                               settled, monkeypatch):
    export.export_pending()
    linking_page_2_after_reading(monkeypatch, sealed_feed)
    export.verify()  # finds the open files gone (sealing removed them) and writes them
    assert not (pages_dir / PAGE_2 / "open.xml").exists()
    assert not (pages_dir / PAGE_2 / "rss/open.xml").exists()
    assert export.export_pending() == 2  # page 2 final, page 3 open
    assert (pages_dir / PAGE_2 / "index.xml").exists()


def test_a_final_page_exported_again_removes_an_open_copy_left_behind(sealed_feed, pages_dir,
                                                                      settled):
    """(An export of the open version that died between its write and its check.)"""
    export.export_pending()
    add(sealed_feed, 2)
    ArchivePage.objects.filter(feed=sealed_feed, number=2).update(exported=None)
    (pages_dir / PAGE_2 / "open.xml").write_bytes(b"the open version")
    export.export_pending()
    assert not (pages_dir / PAGE_2 / "open.xml").exists()


def test_export_names_files_by_url_path_without_the_script_prefix(sealed_feed, pages_dir,
                                                                  settled):
    set_script_prefix("/mounted/")  # as a request under a SCRIPT_NAME leaves it
    try:
        export.export_pending()
    finally:
        set_script_prefix("/")
    assert PAGE_1 + "index.xml" in files(pages_dir)
    assert "feeds/books/pages/1" in files(pages_dir)


def test_directories_are_readable_by_nginx_whatever_the_umask(sealed_feed, pages_dir,
                                                              settled):
    old = os.umask(0o077)
    try:
        export.export_pending()
    finally:
        os.umask(old)
    directories = [path for path in pages_dir.rglob("*") if path.is_dir()]
    assert directories
    assert {path.stat().st_mode & 0o777 for path in directories} == {0o755}


def test_a_temporary_file_of_another_writer_is_left_alone(pages_dir):
    """Another container's writer may have the same process id (1) and thread id."""
    storage = export.storage()
    storage.save("a/b.xml", ContentFile(b"old"))
    theirs = pages_dir / "a" / f".b.xml.{os.getpid()}.{threading.get_ident()}"
    theirs.write_bytes(b"another writer's, half written")
    storage.save("a/b.xml", ContentFile(b"new"))
    assert (pages_dir / "a/b.xml").read_bytes() == b"new"
    assert theirs.read_bytes() == b"another writer's, half written"


def test_a_linked_page_stored_late_is_exported(sealed_feed, pages_dir, settled):
    """A page exported before its linked page was stored (migration 0004's backfill)."""
    ArchivePage.objects.filter(feed=sealed_feed, number=1).update(multipart=None)
    export.export_pending()
    assert "feeds/books/pages/1" not in files(pages_dir)
    freeze_linked_pages()
    assert export.export_pending() == 1
    assert (pages_dir / "feeds/books/pages/1").read_bytes() == bytes(
        ArchivePage.objects.get(feed=sealed_feed, number=1).multipart)


def test_a_linked_page_stored_while_exporting_stays_pending(sealed_feed, pages_dir, settled,
                                                            monkeypatch):
    ArchivePage.objects.filter(feed=sealed_feed, number=1).update(multipart=None)
    write = export.write

    def stored_meanwhile(page, into=None):
        write(page, into)
        if page.number == 1:
            freeze_linked_pages()

    monkeypatch.setattr(export, "write", stored_meanwhile)
    export.export_pending()
    monkeypatch.setattr(export, "write", write)
    assert export.export_pending() == 1
    assert "feeds/books/pages/1" in files(pages_dir)


def killed_writers_temporary(directory) -> Path:
    """What a writer killed half-way through a file leaves: tempfile's hidden name, part
    of the bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=".index.xml.", dir=directory)
    os.write(handle, b"<feed half written")
    os.close(handle)
    return Path(name)


def later(monkeypatch, seconds: float) -> None:
    now = time.time() + seconds
    monkeypatch.setattr(export.time, "time", lambda: now)


def test_files_are_written_through_the_temporary_directory(pages_dir, monkeypatch):
    made = []
    real = tempfile.mkstemp
    monkeypatch.setattr(export.tempfile, "mkstemp",
                        lambda **kwargs: made.append(kwargs["dir"]) or real(**kwargs))
    export.storage().save("feeds/a/archives/1/index.xml", ContentFile(b"<feed/>"))
    assert set(made) == {str(pages_dir / export.TEMPORARY_DIR)}
    assert files(pages_dir) == {"feeds/a/archives/1/index.xml"}


def test_the_next_export_pass_removes_a_killed_writers_temporary(sealed_feed, pages_dir,
                                                                 settled, monkeypatch):
    stale = killed_writers_temporary(pages_dir / export.TEMPORARY_DIR)
    later(monkeypatch, export.STALE_TEMPORARY + 1)
    export.export_pending()
    assert not stale.exists()
    assert not [path for path in files(pages_dir) if "/." in f"/{path}"]


def test_an_export_pass_leaves_a_live_writers_temporary_alone(sealed_feed, pages_dir,
                                                               settled, monkeypatch):
    live = killed_writers_temporary(pages_dir / export.TEMPORARY_DIR)
    later(monkeypatch, export.STALE_TEMPORARY - 60)  # younger than a dead writer's
    export.export_pending()
    assert live.read_bytes() == b"<feed half written"


def test_verify_removes_killed_writers_temporaries_anywhere(sealed_feed, pages_dir, settled,
                                                            monkeypatch):
    export.export_pending()
    beside = killed_writers_temporary(pages_dir / PAGE_2)  # where they were once made
    inside = killed_writers_temporary(pages_dir / export.TEMPORARY_DIR)
    later(monkeypatch, export.STALE_TEMPORARY + 1)

    dry = StringIO()
    call_command("export_pages", "--verify", "--dry-run", stdout=dry)
    assert beside.exists()
    assert inside.exists()
    out = StringIO()
    call_command("export_pages", "--verify", stdout=out)

    assert not beside.exists()
    assert not inside.exists()
    for report, verb in ((dry, "would remove"), (out, "removed")):
        assert f"{verb} {beside.relative_to(pages_dir)} (left by a writer that died)" \
            in report.getvalue()
