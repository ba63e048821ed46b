from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from lxml import etree, isoschematron

from archives.pagecache import frozen_pages

from .factories import FeedFactory

SCHEMA_DIR = Path(__file__).parent / "schema"


def pytest_collection_modifyitems(config, items):
    """Tests marked `postgres` need real row locks and concurrency: skip them on SQLite."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _empty_page_cache():
    # Each test's database starts empty, so pages cached by an earlier test are stale.
    frozen_pages.clear()
    yield
    frozen_pages.clear()


@pytest.fixture
def feed(db):
    return FeedFactory(slug="books", title="Books", page_size=3)


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
