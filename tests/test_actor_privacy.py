"""Who changed what is never published: the user, token name and note an entry keeps appear
in no public document (Atom and RSS, archive pages, complete and paged feeds, linked pages,
snapshots, the pages for people, the records' own URLs, OAI-PMH in every metadata format,
exported pages, WebSub deliveries), and every public document, sealed pages included, is
byte for byte the same whatever the actors of its entries."""

from __future__ import annotations

import gzip
import json
import re
from datetime import date
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, transaction
from django.urls import Resolver404, resolve
from rest_framework.test import APIClient

from archives.documents import kinds
from archives.documents.base import final_pages, gzipped_bodies, subscription_bodies
from archives.documents.feeds import sealed_pages_by_date
from archives.log import publishing
from archives.log.access import Actor
from archives.log.sealing import seal_feed
from archives.models import ApiToken, ArchivePage, Entry, Feed, FeedRole, Snapshot, SnapshotPage
from archives.oai.metadata import FORMATS
from archives.push.worker import Worker
from archives.storage import export
from archives.storage.snapshots import take_snapshot

from .callback_server import CallbackServer
from .factories import record_data

# What an actor leaves in the log, distinctive enough that no document holds it by chance.
USERNAME = "zq-keeper-7731"
TOKEN_NAME = "zq-nightly-sync-5518"
NOTE = "zq-why-9046: fixed the publication year"
SECRETS = (USERNAME, TOKEN_NAME, NOTE, "zq-")
SLUG = "books"
ACCEPTS = ("*/*", "text/html", "application/json")


@pytest.fixture(autouse=True)
def _setup(db, settings):
    settings.FEEDPUB_SEAL_ON_WRITE = False  # sealed when the test says
    settings.FEEDPUB_EXPORT_PAGES = True
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True  # the callback is local
    cache.clear()  # the API's and the hub's request counts
    yield
    cache.clear()


@pytest.fixture
def keeper(db):
    """A producer of the feed (in `producers` too, so that the API writes whatever the
    API's own checks are), with a named token."""
    feed = publishing.create_feed(slug=SLUG, title="Books", page_size=3,
                                  record_schema={"type": "object"})
    user = User.objects.create_user(USERNAME, is_staff=True)
    user.groups.add(Group.objects.get(name="producers"))
    FeedRole.objects.create(feed=feed, user=user, role=FeedRole.Role.MAINTAINER)
    token, _secret = ApiToken.issue(user=user, name=TOKEN_NAME)
    return feed, user, token


def write_by_every_door(feed: Feed, user, token: ApiToken, tmp_path: Path) -> None:
    """Changes by the API (PUT, PATCH, DELETE, a batch, each with a note), the write path
    with each door's actor, and an import as the user with a note."""
    api = APIClient()
    api.force_authenticate(user, token=token)
    note = {"X-Change-Note": NOTE}
    records = f"/api/feeds/{SLUG}/records/"
    assert api.put(records + "k1", record_data(1), format="json",
                   headers=note).status_code == 201
    assert api.put(records + "k2", record_data(2), format="json",
                   headers=note).status_code == 201
    assert api.patch(records + "k1", {"summary": "Changed"}, format="json",
                     headers=note).status_code == 200
    assert api.post(f"/api/feeds/{SLUG}/batch", {"operations": [
        {"op": "put", "key": "k3", "record": record_data(3)},
        {"op": "delete", "key": "k2"}]}, format="json", headers=note).status_code == 200
    for via in ("api", "batch", "admin"):
        publishing.put_record(feed=feed, key=f"by-{via}", data=record_data(4),
                              actor=Actor(via=via, user=user, token=token, note=NOTE))
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": "by-api", "record": record_data(5)},
        {"op": "delete", "key": "by-batch"}],
        actor=Actor(via="batch", user=user, token=token, note=NOTE))
    assert api.delete(records + "by-admin", headers=note).status_code == 204
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"key": f"imported-{n}", **record_data(n)}) + "\n"
                            for n in range(6, 9)))
    call_command("import_records", SLUG, str(path), "--user", USERNAME, "--note", NOTE,
                 stdout=StringIO(), stderr=StringIO())
    publishing.put_record(feed=feed, key="imported-6", data=record_data(9),
                          actor=Actor(via="command", note=NOTE))


def clear_caches() -> None:
    for kept in (final_pages, subscription_bodies, gzipped_bodies, sealed_pages_by_date):
        kept.clear()
    cache.clear()


def seal_and_snapshot(feed: Feed) -> None:
    seal_feed(feed)
    take_snapshot(feed)


def numbered(client, pattern: str) -> list[str]:
    """The paths `pattern` makes for 1, 2, ... up to the first that is not there."""
    paths = []
    for number in range(1, 100):
        path = pattern.format(number)
        if client.get(path).status_code != 200:
            return paths
        paths.append(path)
    raise AssertionError(f"{pattern}: over 99 documents")


def public_paths(client, feed: Feed) -> list[str]:
    """The path of every public document of the feed and the site."""
    base = f"/feeds/{SLUG}"
    snapshot = Snapshot.objects.filter(feed=feed, complete=True).latest("created")
    snapshot_base = f"{base}/snapshots/{snapshot.uuid}"
    today = date.today()  # noqa: DTZ011 (the date routes of pages sealed today)
    return [
        "/", f"{base}/", f"{base}/rss/", f"{base}/complete/", f"{base}/paged/",
        f"{base}/pages/latest", f"{base}/snapshots/latest", f"{snapshot_base}/",
        f"{base}/schema", f"{base}/schema/1", f"{base}/search?q=Record",
        f"{base}/activity.svg", f"{base}/archives/{today:%Y/%m}/",
        f"{base}/archives/{today:%Y/%m/%d}/",
        *numbered(client, base + "/archives/{}/"), *numbered(client, base + "/archives/{}/rss/"),
        *numbered(client, base + "/pages/{}"), *numbered(client, base + "/paged/{}/"),
        *numbered(client, snapshot_base + "/pages/{}"),
        *(f"{base}/records/{key}" for key in feed.records.values_list("key", flat=True)),
    ]


def oai_paths(client) -> list[str]:
    paths = ["/oai?verb=Identify", "/oai?verb=ListSets", "/oai?verb=ListMetadataFormats"]
    for prefix in FORMATS:
        listed = client.get(f"/oai?verb=ListIdentifiers&metadataPrefix={prefix}").content
        identifiers = re.findall(rb"<identifier>([^<]+)</identifier>", listed)
        assert identifiers
        paths += [f"/oai?verb=ListIdentifiers&metadataPrefix={prefix}",
                  f"/oai?verb=ListRecords&metadataPrefix={prefix}",
                  *(f"/oai?verb=GetRecord&metadataPrefix={prefix}&identifier="
                    f"{identifier.decode()}" for identifier in identifiers)]
    return paths


def rendered(client, feed: Feed) -> dict[str, bytes]:
    """Every public document's bytes (each path in each format it answers), and the bytes
    stored for sealed pages and snapshot pages, by where they are."""
    feed.refresh_from_db()
    snapshot = Snapshot.objects.filter(feed=feed, complete=True).latest("created")
    documents = {}
    for path in public_paths(client, feed) + oai_paths(client):
        for accept in ACCEPTS:
            response = client.get(path, headers={"Accept": accept}, follow=True)
            body = content(response)
            # OAI-PMH answers say when they were made; a snapshot is named by a new id.
            body = re.sub(rb"<responseDate>[^<]*</responseDate>", b"", body)
            documents[f"{path} ({accept}) {response.status_code}"] = body
    for page in ArchivePage.objects.filter(feed=feed):
        for name in ("body", "rss", "multipart"):
            documents[f"sealed page {page.number} {name}"] = bytes(getattr(page, name))
    for page in SnapshotPage.objects.filter(snapshot=snapshot):
        documents[f"snapshot page {page.number}"] = bytes(page.body)
    return {where.replace(str(snapshot.uuid), "SNAPSHOT"):
            body.replace(str(snapshot.uuid).encode(), b"SNAPSHOT")
            for where, body in documents.items()}


def content(response) -> bytes:
    if response.streaming:  # (long-polled documents stream)
        return b"".join(response.streaming_content)
    return response.content


def leaks(body: bytes) -> list[str]:
    return [secret for secret in SECRETS if secret.encode() in body]


def test_the_actors_are_kept_and_shown_to_the_feeds_producers(client, keeper, tmp_path):
    # (So that their absence from every document below means something.)
    feed, user, token = keeper
    write_by_every_door(feed, user, token, tmp_path)

    assert Entry.objects.filter(username=USERNAME, token_name=TOKEN_NAME, note=NOTE).exists()
    assert Entry.objects.filter(via="import", username=USERNAME, note=NOTE).count() == 3
    reader = APIClient()
    reader.force_authenticate(user)
    history = reader.get(f"/api/feeds/{SLUG}/records/by-api/history").content.decode()
    assert all(secret in history for secret in SECRETS)


def test_no_public_document_names_who_changed_what(client, keeper, tmp_path, settled,
                                                   pages_dir):
    feed, user, token = keeper
    topics = [kind.url(SLUG) for kind in kinds.topics()]
    with CallbackServer() as callback:
        worker = Worker()
        try:
            for topic in topics:
                assert client.post("/websub/", {"hub.mode": "subscribe", "hub.topic": topic,
                                                "hub.callback": f"{callback.url}/cb"},
                                   ).status_code == 202
            worker.run_round()  # verified
            write_by_every_door(feed, user, token, tmp_path)
            seal_and_snapshot(feed)
            assert worker.run_round().delivered == len(topics)
        finally:
            worker.close()
        deliveries = callback.deliveries()
    assert export.export_pending(limit=None) > 0

    documents = rendered(client, feed)

    snapshot = str(Snapshot.objects.get(complete=True).uuid)
    covered = set()
    for where in documents:
        try:
            covered.add(resolve(where.split(" ")[0].split("?")[0].replace(
                "SNAPSHOT", snapshot)).url_name)
        except Resolver404:
            continue
    assert {kind.name for kind in kinds.KINDS} <= covered
    assert {where: leaks(body) for where, body in documents.items() if leaks(body)} == {}
    assert len(deliveries) == len(topics)
    assert [leaks(delivery.body) for delivery in deliveries] == [[]] * len(topics)
    exported = [path for path in Path(pages_dir).rglob("*") if path.is_file()]
    assert exported
    for path in exported:
        body = path.read_bytes()
        assert leaks(gzip.decompress(body) if path.suffix == ".gz" else body) == [], path


class _Undo(Exception):
    """Raised to roll back what a block wrote (its savepoint)."""


def sealed_and_rendered(client, feed: Feed) -> dict[str, bytes]:
    """The documents of the feed as written so far, then sealed and snapshotted; all of it
    undone afterwards."""
    try:
        with transaction.atomic():
            clear_caches()
            before = {f"open: {where}": body for where, body in
                      rendered_open(client, feed).items()}
            seal_and_snapshot(feed)
            documents = before | rendered(client, feed)
            raise _Undo
    except _Undo:
        pass
    clear_caches()
    return documents


def rendered_open(client, feed: Feed) -> dict[str, bytes]:
    """What is served before any page is sealed (the subscription document holds every
    entry), without the snapshot and page routes that need one."""
    base = f"/feeds/{SLUG}"
    return {f"{path} ({accept})": content(client.get(path, headers={"Accept": accept}))
            for path in (f"{base}/", f"{base}/rss/", f"{base}/complete/",
                         f"{base}/pages/latest", f"{base}/records/k1")
            for accept in ACCEPTS}


def test_public_documents_are_the_same_bytes_whatever_the_actors(client, keeper, tmp_path):
    feed, user, token = keeper
    write_by_every_door(feed, user, token, tmp_path)
    with_actors = sealed_and_rendered(client, feed)

    with connection.cursor() as cursor:
        cursor.execute("UPDATE archives_entry SET user_id = NULL, username = '', "
                       "token_name = '', via = '', note = ''")
    assert not Entry.objects.exclude(via="").exists()
    without_actors = sealed_and_rendered(client, feed)

    assert len(with_actors) > 100
    assert list(without_actors) == list(with_actors)
    assert [where for where in with_actors
            if with_actors[where] != without_actors[where]] == []
