"""Progress bars of the commands people run: a tqdm bar on stderr when stderr is a terminal
or --progress asks for one, never on stdout, and never when stderr is piped."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys

import feedparser
import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from feedpub_consumer.progress import counted, progress_bar

from archives.log import publishing
from archives.models import Feed

from .broken_feeds import FeedServer, LinkedFeed
from .broken_linked_feeds import LinkedPagesFeed
from .factories import record_data


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a console's stderr does."""

    def isatty(self) -> bool:
        return True


def run(*args, progress: str | None = None, stderr=None) -> tuple[str, str]:
    """stdout and stderr of a command that may exit with a status (harvest, checkfeed)."""
    out, errors = io.StringIO(), stderr if stderr is not None else io.StringIO()
    with contextlib.suppress(SystemExit):
        call_command(*args, *([progress] if progress else []), stdout=out, stderr=errors)
    return out.getvalue(), errors.getvalue()


def bar_lines(stderr: str) -> list[str]:
    """What a bar drew: every \\r-rewritten line (the other lines have none)."""
    return [line for line in re.split(r"[\r\n]", stderr) if "|" in line or " [" in line]


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def write(feed, count, start=0):
    for n in range(start, start + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))


# harvest and checkfeed ----------------------------------------------------------------


def test_harvest_draws_its_bar_on_stderr_and_leaves_stdout_as_it_was(server):
    feed = LinkedFeed(server, pages=3)
    plain, _ = run("harvest", feed.subscription, progress="--no-progress")
    out, errors = run("harvest", feed.subscription, progress="--progress")

    assert out == plain
    assert len(out.splitlines()) == 7  # the live records, one JSON object a line
    assert "\r" in errors
    assert re.search(r"harvest: 4 pages \[.*MB\]", errors)  # 3 archives and the subscription


def test_harvest_of_linked_pages_counts_its_pages(server):
    feed = LinkedPagesFeed(server, pages=3)
    plain, _ = run("harvest", feed.latest, "--from-page-1", progress="--no-progress")
    out, errors = run("harvest", feed.latest, "--from-page-1", progress="--progress")

    assert out == plain
    assert re.search(r"harvest: 3 pages \[", errors)


def test_harvest_warnings_go_around_the_bar(server):
    feed = LinkedFeed(server, pages=2)
    del server.documents["/archives/1"]
    _, errors = run("harvest", feed.subscription, progress="--progress")

    warning = next(line for line in errors.split("\n") if "warning: missing" in line)
    assert warning.rsplit("\r", 1)[-1].startswith("warning: missing archive page")


def test_checkfeed_counts_documents_and_entries_and_prints_the_same_report(server):
    feed = LinkedFeed(server, pages=3)
    del server.documents["/archives/1"]  # a problem, so the report has a line
    plain, _ = run("checkfeed", feed.subscription, progress="--no-progress")
    out, errors = run("checkfeed", feed.subscription, progress="--progress")

    assert out == plain != ""
    assert re.search(r"checkfeed: 3 documents \[.*, 5 entries\]", errors)


def test_checkfeed_counts_linked_pages_too(server):
    feed = LinkedPagesFeed(server, pages=3)
    _, errors = run("checkfeed", feed.latest, "--progress")
    assert re.search(r"checkfeed: 3 documents \[.*, 6 entries\]", errors)


def test_no_bar_when_stderr_is_not_a_terminal(server):
    feed = LinkedFeed(server, pages=3)
    for command in ("harvest", "checkfeed"):
        _, errors = run(command, feed.subscription)
        assert "\r" not in errors
        assert bar_lines(errors) == []
        assert f"{command}:" not in errors


def test_a_terminal_gets_a_bar_without_asking(server):
    feed = LinkedFeed(server, pages=3)
    _, errors = run("harvest", feed.subscription, stderr=Terminal())
    assert re.search(r"harvest: 4 pages \[", errors)
    _, errors = run("harvest", feed.subscription, progress="--no-progress", stderr=Terminal())
    assert bar_lines(errors) == []


# Commands on our own feeds ------------------------------------------------------------


def test_seal_archives_shows_pages_sealed_of_the_backlog(feed):
    write(feed, 7)  # two full pages
    plain, _ = run("seal_archives", "--dry-run", progress="--no-progress")
    dry, errors = run("seal_archives", "--dry-run", progress="--progress")
    assert dry == plain
    assert re.search(r"sealing:   0%\|.*\| 0/2 \[", errors)  # a dry run seals nothing

    out, errors = run("seal_archives", progress="--progress")
    assert out == plain.replace("would seal", "sealed")
    assert re.search(r"sealing: 100%\|#+\| 2/2 \[", errors)
    _, errors = run("seal_archives")
    assert errors == ""


def test_seal_archives_watch_keeps_one_status_line(feed, monkeypatch):
    from archives.management.commands import seal_archives

    passes = iter(range(2))

    def sleep(seconds):
        if (done := next(passes, None)) is None:
            raise KeyboardInterrupt
        write(feed, 3, start=10 + 3 * done)  # one more full page for the next pass

    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    write(feed, 7)
    out, errors = io.StringIO(), Terminal()
    with pytest.raises(KeyboardInterrupt):
        call_command("seal_archives", "--watch", "1", stdout=out, stderr=errors)

    assert out.getvalue().count("sealed books page") == 4
    assert "\n" not in errors.getvalue().rstrip("\n")  # rewritten in place, never scrolled
    last = errors.getvalue().rstrip("\n").rsplit("\r", 1)[-1]
    assert re.match(r"seal_archives: 4 pages sealed, backlog 0 pages, last seal "
                    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[", last)


def test_seal_archives_watch_is_silent_on_a_piped_stderr(feed, monkeypatch):
    from archives.management.commands import seal_archives

    def sleep(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(seal_archives.time, "sleep", sleep)
    write(feed, 3)
    errors = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        call_command("seal_archives", "--watch", "1", stdout=io.StringIO(), stderr=errors)
    assert errors.getvalue() == ""


def test_snapshot_counts_records_written(feed):
    write(feed, 5)
    publishing.delete_record(feed=feed, key="k0")
    out, errors = run("snapshot", progress="--progress")
    plain, quiet = run("snapshot", progress="--no-progress")

    uuid = re.compile(r"snapshot [0-9a-f-]{36}")
    assert uuid.sub("snapshot U", out) == uuid.sub("snapshot U", plain)
    assert "4 records" in out
    assert re.search(r"books: 100%\|#+\| 4/4 \[", errors)
    assert quiet == ""


def test_demo_feed_counts_records_written(db):
    out, errors = run("demo_feed", "--slug", "one", "--records", "5", "--changes", "7",
                      "--page-size", "4", progress="--progress")
    plain, quiet = run("demo_feed", "--slug", "two", "--records", "5", "--changes", "7",
                       "--page-size", "4", progress="--no-progress")

    assert out.replace("'one'", "'two'") == plain
    assert re.search(r"one: 100%\|#+\| 12/12 \[", errors)
    assert quiet == ""


# demo_feed's description ----------------------------------------------------------------


def test_demo_feeds_can_look_different(db, client):
    run("demo_feed", "--records", "2", "--changes", "0")
    run("demo_feed", "--slug", "geo", "--title", "Geology demo", "--language", "de-CH",
        "--records", "2", "--changes", "0")

    default = feedparser.parse(client.get("/feeds/demo/").content)
    geology = feedparser.parse(client.get("/feeds/geo/").content)
    assert default.feed.title == "Demo research data catalogue"
    assert geology.feed.title == "Geology demo"
    assert geology.feed.language == "de-CH"
    assert Feed.objects.get(slug="demo").language != "de-CH"


@pytest.mark.parametrize("tag", ["en_GB", "e", "en-", "en GB", "englishes"])
def test_demo_feed_refuses_a_language_that_is_no_bcp47_tag(db, tag):
    with pytest.raises(CommandError, match=r"--language .*BCP 47"):
        call_command("demo_feed", "--language", tag, stdout=io.StringIO())
    assert not Feed.objects.exists()


def test_demo_feed_refuses_a_title_too_long(db):
    with pytest.raises(CommandError, match=r"--title: .*at most 300 characters"):
        call_command("demo_feed", "--title", "x" * 301, stdout=io.StringIO())
    assert not Feed.objects.exists()


# The bar itself ------------------------------------------------------------------------


def test_log_records_go_around_a_bar(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setattr(logging.root, "handlers", [logging.StreamHandler(screen)])
    with progress_bar(OutputWrapper(screen), None, desc="work", total=2) as bar:
        bar.update()
        logging.getLogger("archives").warning("something happened")
        bar.update()

    before, after = screen.getvalue().split("something happened\n")
    assert before.endswith("\r")  # the bar was wiped first, so the message has its line
    assert "work:  50%" in after  # and drawn again below it
    assert isinstance(logging.root.handlers[0], logging.StreamHandler)


def test_counts_agree_with_their_number():
    assert [counted(n, "batch", "batches") for n in (0, 1, 2)] == [
        "0 batches", "1 batch", "2 batches"]
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(3, "record") == "3 records"
