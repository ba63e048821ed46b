"""The development check of FEEDPUB_BASE_URL (archives/serving/basecheck.py): a request for
another address than the documents' links would lead to is answered 421, saying what to set;
another loopback name for the same server is redirected."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed, Record, Snapshot

from .factories import FeedFactory, record_data, token_for

OLD, NEW = "http://127.0.0.1:8000", "http://127.0.0.1:8001"



def test_development_refuses_a_host_other_than_the_base_urls(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    FeedFactory(slug="books")

    response = Client().get("/feeds/books/?x=1", HTTP_HOST="127.0.0.1:8001")

    assert response.status_code == 421
    text = response.content.decode()
    assert f"open {OLD}/feeds/books/?x=1" in text
    assert f"FEEDPUB_BASE_URL={NEW} .venv/bin/python manage.py runserver 127.0.0.1:8001" in text
    assert f"FEEDPUB_BASE_URL={NEW} .venv/bin/python manage.py rerender_documents" in text
    assert Client().get("/feeds/books/", HTTP_HOST="127.0.0.1:8000").status_code == 200
    assert Client().get("/healthz", HTTP_HOST="127.0.0.1:8001").status_code == 200


def test_a_default_port_is_the_same_origin_and_a_scheme_is_not(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, "http://feeds.example.org"
    settings.ALLOWED_HOSTS = ["feeds.example.org"]
    FeedFactory(slug="books")

    assert Client().get("/feeds/books/", HTTP_HOST="feeds.example.org:80").status_code == 200
    assert Client().get("/feeds/books/", HTTP_HOST="FEEDS.example.org").status_code == 200
    assert Client().get("/feeds/books/", HTTP_HOST="feeds.example.org",
                        secure=True).status_code == 421


def test_with_debug_off_any_allowed_host_is_served(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = False, OLD
    FeedFactory(slug="books")

    assert Client().get("/feeds/books/", HTTP_HOST="127.0.0.1:8001").status_code == 200


def test_development_redirects_another_loopback_name_for_the_same_port(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    FeedFactory(slug="books")

    for host in ("localhost:8000", "[::1]:8000"):
        response = Client().get("/feeds/books/?x=1", HTTP_HOST=host)
        assert response.status_code == 302
        assert response["Location"] == f"{OLD}/feeds/books/?x=1"
    assert Client().get("/feeds/books/", HTTP_HOST="localhost:8001").status_code == 421
    assert Client().post("/feeds/books/", HTTP_HOST="localhost:8000").status_code == 421


def test_development_refuses_a_port_out_of_range_without_an_error(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

    for host in ("localhost:99999", "127.0.0.1:99999"):
        assert Client().get("/feeds/books/", HTTP_HOST=host).status_code == 421, host


# The recorded base URL (archives/db/address.py): a process configured with another one
# refuses to write or seal, whatever the host of any request.

@pytest.fixture
def sealed_under_old(db, settings, tmp_path):
    """A feed written and sealed by a process with OLD; the next process has NEW (a second
    terminal without the setting, say)."""
    settings.FEEDPUB_BASE_URL = OLD
    feed = FeedFactory(slug="books", page_size=2)
    for n in range(1, 4):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)
    settings.FEEDPUB_BASE_URL = NEW
    return Feed.objects.get(pk=feed.pk)


def refused(text: str) -> None:
    assert f"FEEDPUB_BASE_URL={NEW}" in text
    assert f"sealed under {OLD}" in text
    assert "rerender_documents" in text


def test_a_command_with_another_base_url_writes_nothing(sealed_under_old, tmp_path):
    file = tmp_path / "more.jsonl"
    file.write_text('{"key": "k9", "title": "Nine"}\n')

    with pytest.raises(CommandError) as failure:
        call_command("import_records", "books", str(file), stdout=StringIO())

    refused(str(failure.value))
    assert Feed.objects.get(pk=sealed_under_old.pk).last_seq == 3
    assert not Record.objects.filter(key="k9").exists()


def test_the_api_with_another_base_url_answers_503_naming_both(sealed_under_old):
    user = User.objects.create_user("producer")
    user.user_permissions.set(Permission.objects.filter(
        codename__in=["add_record", "change_record", "delete_record"]))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")

    response = client.put("/api/feeds/books/records/k9", {"title": "Nine"}, format="json",
                          HTTP_HOST="127.0.0.1:8001")

    assert response.status_code == 503
    refused(response.json()["detail"])
    assert Feed.objects.get(pk=sealed_under_old.pk).last_seq == 3


def test_the_sealer_and_a_snapshot_with_another_base_url_refuse(sealed_under_old):
    with override_settings(FEEDPUB_BASE_URL=OLD, FEEDPUB_SEAL_ON_WRITE=False):
        publishing.put_record(feed=sealed_under_old, key="k4", data=record_data(4))
    with pytest.raises(CommandError) as failure:
        call_command("seal_archives", stdout=StringIO(), stderr=StringIO())
    refused(str(failure.value))
    assert Feed.objects.get(pk=sealed_under_old.pk).sealed_pages == 1

    with pytest.raises(CommandError) as failure:
        call_command("snapshot", "--feed", "books", "--no-progress", stdout=StringIO(),
                     stderr=StringIO())
    refused(str(failure.value))
    assert not Snapshot.objects.exists()


def test_a_fresh_database_records_the_first_base_url_for_every_feed(db, settings):
    settings.FEEDPUB_BASE_URL = OLD
    publishing.put_record(feed=FeedFactory(slug="books"), key="k1", data=record_data(1))
    assert Feed.objects.get(slug="books").base_url == OLD

    settings.FEEDPUB_BASE_URL = NEW  # a feed never written: still one service, one address
    with pytest.raises(CommandError) as failure:
        publishing.put_record(feed=FeedFactory(slug="music"), key="k1", data=record_data(1))
    refused(str(failure.value))
    assert Feed.objects.get(slug="music").base_url == ""


def test_rerender_documents_moves_the_recorded_base_url(sealed_under_old):
    call_command("rerender_documents", "--no-progress", stdout=StringIO(), stderr=StringIO())

    assert Feed.objects.get(pk=sealed_under_old.pk).base_url == NEW
    publishing.put_record(feed=sealed_under_old, key="k9", data=record_data(9))
    with override_settings(FEEDPUB_BASE_URL=OLD), pytest.raises(CommandError) as failure:
        publishing.put_record(feed=sealed_under_old, key="k10", data=record_data(10))
    assert f"FEEDPUB_BASE_URL={OLD}" in str(failure.value)
    assert f"sealed under {NEW}" in str(failure.value)


def test_the_check_adds_no_query_to_a_write(sealed_under_old):
    Feed.objects.update(base_url=NEW)  # (moved)
    with CaptureQueriesContext(connection) as queries:
        publishing.put_record(feed=sealed_under_old, key="k1", data=record_data(1, title="x"))
    # The feed row's read (its lock) and its update, as before: the check reads that row.
    assert [query["sql"].split()[0] for query in queries.captured_queries
            if 'FROM "archives_feed"' in query["sql"] or 'UPDATE "archives_feed"'
            in query["sql"]] == ["SELECT", "UPDATE"]


# Settings from the checkout's .env (feedpub/envfile.py), for every process.

ROOT = Path(__file__).resolve().parent.parent
PRINT_SETTINGS = ("from archives.conf import settings; "
                  "print(settings.FEEDPUB_BASE_URL, settings.FEEDPUB_PAGE_SIZE)")


def environment(**more: str) -> dict[str, str]:
    """This test run's environment without what the tests set, as a new terminal has it."""
    unset = ("PYTEST_VERSION", "FEEDPUB_DOTENV", "FEEDPUB_BASE_URL", "FEEDPUB_PAGE_SIZE",
             "WEB_CONCURRENCY")
    return {**{name: value for name, value in os.environ.items() if name not in unset},
            **more}


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,  # noqa: S603
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_every_command_reads_the_dotenv_file_under_the_environment(tmp_path):
    dotenv = tmp_path / "settings.env"
    dotenv.write_text(f"FEEDPUB_BASE_URL={NEW}\nFEEDPUB_PAGE_SIZE=7\nWEB_CONCURRENCY=3\n")

    shell = [sys.executable, "manage.py", "shell", "--no-imports", "-c", PRINT_SETTINGS]
    assert run(shell, ROOT, environment(FEEDPUB_DOTENV=str(dotenv))) == f"{NEW} 7"
    assert run(shell, ROOT, environment(FEEDPUB_DOTENV=str(dotenv), FEEDPUB_PAGE_SIZE="9")) \
        == f"{NEW} 9"  # the environment wins
    gunicorn = [sys.executable, "-c", "import runpy; "
                "print(runpy.run_path('deploy/gunicorn.conf.py')['workers'])"]
    assert run(gunicorn, ROOT, environment(FEEDPUB_DOTENV=str(dotenv))) == "3"

    missing = subprocess.run(shell, cwd=ROOT, env=environment(FEEDPUB_DOTENV=str(  # noqa: S603
        tmp_path / "nope.env")), capture_output=True, text=True, check=False, timeout=120)
    assert missing.returncode != 0
    assert f"FEEDPUB_DOTENV={tmp_path / 'nope.env'}: no such file" in missing.stderr


def test_the_checkouts_dotenv_is_read_except_by_a_test_run(tmp_path):
    """A copy of the settings in a checkout of its own: its .env is read by default, but
    not by a test run (PYTEST_VERSION) or whatever it starts, unless FEEDPUB_DOTENV says."""
    shutil.copytree(ROOT / "feedpub", tmp_path / "feedpub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / ".env").write_text(f"FEEDPUB_BASE_URL={NEW}\n")
    python = [sys.executable, "-c", "import feedpub.settings as settings; "
              "print(settings.FEEDPUB_BASE_URL, getattr(settings, 'FEEDPUB_PAGE_SIZE', None))"]
    own = {"PYTHONPATH": str(tmp_path)}

    # The project leaves FEEDPUB_PAGE_SIZE, which the environment does not give, to the app.
    assert run(python, tmp_path, environment(**own)) == f"{NEW} None"
    assert run(python, tmp_path, environment(PYTEST_VERSION="9", **own)) == f"{OLD} None"
    assert run(python, tmp_path, environment(PYTEST_VERSION="9", **own,
                                             FEEDPUB_DOTENV=str(tmp_path / ".env"))) \
        == f"{NEW} None"
    assert run(python, tmp_path, environment(FEEDPUB_DOTENV="", **own)) == f"{OLD} None"


def test_the_migration_records_the_base_url_a_feed_was_sealed_under(sealed_under_old):
    """A database sealed before addresses were recorded: each feed with sealed pages takes
    the base URL of its newest page's self link."""
    from importlib import import_module

    from django.apps import apps

    migration = import_module("archives.migrations.0016_base_url_and_oai_datestamp")
    Feed.objects.update(base_url="")
    FeedFactory(slug="empty")

    migration.record_base_urls(apps, None)

    assert dict(Feed.objects.values_list("slug", "base_url")) == {"books": OLD, "empty": ""}


def test_the_admin_with_another_base_url_answers_503_naming_both(sealed_under_old,
                                                                   admin_client):
    with override_settings(FEEDPUB_BASE_URL=OLD, FEEDPUB_SEAL_ON_WRITE=False):
        publishing.put_record(feed=sealed_under_old, key="k4", data=record_data(4))

    response = admin_client.post("/admin/archives/feed/", {
        "action": "seal_now", "_selected_action": [sealed_under_old.pk]},
        HTTP_HOST="127.0.0.1:8001")

    assert response.status_code == 503
    refused(response.content.decode())
    assert Feed.objects.get(pk=sealed_under_old.pk).sealed_pages == 1
