from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from lxml import etree, isoschematron

from archives.db.heads import heads
from archives.documents import base
from archives.documents.base import final_pages, gzipped_bodies, subscription_bodies
from archives.documents.feeds import sealed_pages_by_date
from archives.log import publishing, sealing
from archives.log.sealing import seal_feed
from archives.models import Feed

from .factories import FeedFactory, record_data

SCHEMA_DIR = Path(__file__).parent / "schema"

# Tests marked `postgres`: skipped on SQLite and counted at the end, required where
# FEEDPUB_REQUIRE_POSTGRES is set.
pytest_plugins = ["tests.postgres_only"]


@pytest.fixture(autouse=True)
def _sealer_not_backfilled(monkeypatch):
    # A sealer remembers, per process, that no page lacks a stored format: not across tests.
    monkeypatch.setattr(sealing, "_backfilled", False)


@pytest.fixture(autouse=True)
def _empty_page_cache():
    # Each test's database starts empty, so pages cached by an earlier test are stale.
    for cache in (final_pages, subscription_bodies, gzipped_bodies, sealed_pages_by_date):
        cache.clear()
    yield
    for cache in (final_pages, subscription_bodies, gzipped_bodies, sealed_pages_by_date):
        cache.clear()
    # A test that polled outside a transaction started the heads' listener: its
    # connection would keep the test database from being dropped, its heads are stale.
    heads.stop()


@pytest.fixture(scope="session", autouse=True)
def _no_listener_outlives_the_test_database(django_db_setup):
    """A request still being served after its test ended (the session's live server) may
    start the heads' listener again: stop it before the test database is dropped."""
    yield
    heads.stop()


@pytest.fixture(autouse=True)
def pages_dir(settings, tmp_path_factory):
    """Each test exports sealed pages (archives/storage/export.py) to a directory of its own, never
    to the checkout's var/pages."""
    directory = tmp_path_factory.mktemp("pages")
    settings.STORAGES = {**settings.STORAGES, "feedpub_pages": {
        "BACKEND": "archives.storage.export.AtomicFileSystemStorage",
        "OPTIONS": {"location": directory}}}
    return directory


@pytest.fixture
def fresh_throttles(db):
    """API request counts start at zero: they live in the shared cache's table, which
    transactional tests keep (`pytestmark = pytest.mark.usefixtures("fresh_throttles")`)."""
    from django.core.cache import cache as shared

    shared.clear()
    yield
    shared.clear()


@pytest.fixture
def settled(monkeypatch):
    """Documents read as if a minute had passed since their last change, so that they
    carry their Last-Modified (archives/documents/base.py sends none for the first seconds)."""
    monkeypatch.setattr(base, "now", lambda: datetime.now(tz=UTC) + timedelta(minutes=1))


@pytest.fixture
def feed(db):
    return FeedFactory(slug="books", title="Books", page_size=3)


@pytest.fixture
def sealed_feed(feed):
    """7 entries: pages 1 and 2 sealed, entry 7 (a deletion) the only one after them."""
    for n in range(1, 5):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="k1", data=record_data(1, title="Renamed"))
    publishing.put_record(feed=feed, key="k5", data=record_data(5))
    publishing.delete_record(feed=feed, key="k2")
    seal_feed(feed)
    return Feed.objects.get(pk=feed.pk)


@pytest.fixture(scope="session")
def atom_validators():
    """RFC 4287 RELAX NG grammar and the Schematron rules (tests/schema, from the specs)."""
    relaxng = etree.RelaxNG(etree.parse(str(SCHEMA_DIR / "atom.rng")))
    schematron = isoschematron.Schematron(etree.parse(str(SCHEMA_DIR / "atom-rules.sch")))

    def validate(body: bytes) -> etree._Element:
        document = etree.fromstring(body)
        relaxng.assertValid(document)
        schematron.assertValid(document)
        return document

    return validate
