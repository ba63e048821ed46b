"""The consumer tools as a consumer installs them: `feedpub-harvest` and `feedpub-checkfeed`,
run as processes from elsewhere, with no Django settings and no database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from archives.models import Record

BIN = Path(sys.executable).parent
CONSUMER_MODULES = sorted(path.stem for path in
                          (Path(__file__).parents[1] / "consumer" / "feedpub_consumer").glob("*.py")
                          if path.stem != "__init__")


def run(tmp_path, *args, timeout=120):
    """A console script run from an empty directory, in an environment without Django's."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    return subprocess.run(  # noqa: S603 (our own arguments)
        [str(BIN / args[0]), *args[1:]], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("script", ["feedpub-harvest", "feedpub-checkfeed"])
def test_each_console_script_explains_itself_without_django(script, tmp_path):
    answer = run(tmp_path, script, "--help")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(f"usage: {script} ")
    assert "--max-requests" in answer.stdout
    assert answer.stderr == ""


def test_the_consumer_modules_load_nothing_of_django_or_the_server(tmp_path):
    script = ("import sys\n"
              f"for name in {CONSUMER_MODULES!r}:\n"
              "    __import__('feedpub_consumer.' + name)\n"
              "print('\\n'.join(sorted(sys.modules)))\n")
    env = {name: value for name, value in os.environ.items()
           if name != "DJANGO_SETTINGS_MODULE"}
    answer = subprocess.run(  # noqa: S603 (our own arguments)
        [sys.executable, "-c", script], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=True)
    loaded = answer.stdout.split()
    assert "feedpub_consumer.cli" in loaded
    assert [name for name in loaded if name.split(".")[0] in ("django", "rest_framework")] == []
    assert [name for name in loaded if name.split(".")[0] in ("archives", "feedpub")] == []


@pytest.fixture
def demo_feed(live_server, settings, transactional_db):
    """The README's demo feed (a few pages of it), served by the live server."""
    settings.FEEDPUB_BASE_URL = live_server.url  # before any page is sealed
    call_command("demo_feed", "--records", "30", "--changes", "80", "--page-size", "10",
                 stdout=StringIO())
    return f"{live_server.url}/feeds/demo/"


def test_feedpub_harvest_rebuilds_the_demo_feed_and_a_second_run_is_incremental(demo_feed,
                                                                             tmp_path):
    answer = run(tmp_path, "feedpub-harvest", demo_feed, "--state", "state.sqlite",
                 "--output", "records.jsonl", "--summary-json")
    assert answer.returncode == 0, answer.stderr
    records = [json.loads(line) for line in
               (tmp_path / "records.jsonl").read_text().splitlines()]
    live = Record.objects.filter(feed__slug="demo", deleted_at__isnull=True)
    assert sorted(record["id"] for record in records) == sorted(r.atom_id for r in live)
    assert json.loads(answer.stderr)["live_records"] == live.count()
    # Whole records, as the README's command gives them: each one's JSON was fetched.
    assert ({record["id"]: (record["key"], record["metadata"]) for record in records}
            == {r.atom_id: (r.key, r.metadata) for r in live})

    again = run(tmp_path, "feedpub-harvest", demo_feed, "--state", "state.sqlite",
                "--output", "again.jsonl", "--summary-json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stderr)["requests"] == 1  # one conditional request: nothing new
    assert (tmp_path / "again.jsonl").read_text() == (tmp_path / "records.jsonl").read_text()


def test_feedpub_harvest_without_fetching_records_reads_the_atom_pages_only(demo_feed,
                                                                           tmp_path):
    answer = run(tmp_path, "feedpub-harvest", demo_feed, "--no-fetch-records",
                 "--output", "records.jsonl", "--summary-json")
    assert answer.returncode == 0, answer.stderr
    records = [json.loads(line) for line in
               (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records
    assert {(record["key"], record["metadata"]) for record in records} == {(None, None)}
    assert json.loads(answer.stderr)["requests"] == json.loads(answer.stderr)["pages_fetched"]


@pytest.mark.parametrize("path", ["", "rss/", "pages/latest"])
def test_feedpub_checkfeed_finds_the_demo_feed_clean_in_every_format(demo_feed, tmp_path,
                                                                      path):
    answer = run(tmp_path, "feedpub-checkfeed", demo_feed + path, "--sample", "2")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert answer.stdout == ""
    assert answer.stderr.splitlines()[-1].startswith("0 problems in ")


def test_feedpub_checkfeed_reports_an_unreachable_feed_as_could_not_run(tmp_path):
    answer = run(tmp_path, "feedpub-checkfeed", "http://127.0.0.1:9/feeds/none/",
                 "--timeout", "2")
    assert answer.returncode == 2
    assert answer.stderr.startswith("checkfeed could not run: ")
