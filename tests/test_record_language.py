"""A record's own language (BCP 47, optional): where a producer sets it and where every
reader finds it. A record without one shows its feed's, as before records had one."""

from __future__ import annotations

import json
from email import message_from_bytes
from email.policy import HTTP

import pytest
from feedpub_consumer.harvesting import harvest
from lxml import etree

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Record

from .factories import FeedFactory
from .feeds_live import make_live_feed
from .oai import ask

ATOM = "{http://www.w3.org/2005/Atom}"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
DC = "{http://purl.org/dc/elements/1.1/}"
FEEDPUB = "{urn:feedpub:oai-record:1}"


@pytest.fixture
def feed(db):
    """A feed in English with a German record and one that says nothing of its language."""
    feed = FeedFactory(slug="books", language="en", page_size=2)
    publishing.put_record(feed=feed, key="faust", data={
        "title": "Faust. Eine Tragödie", "language": "de",
        "metadata": {"creator": "Goethe"}})
    publishing.put_record(feed=feed, key="emma", data={"title": "Emma"})
    return feed


def entry_languages(body: bytes) -> dict[str, str | None]:
    """Each entry's own xml:lang, by title (None: it has none, the feed's is its)."""
    root = etree.fromstring(body)
    return {entry.findtext(f"{ATOM}title"): entry.get(XML_LANG)
            for entry in root.iter(f"{ATOM}entry")}


def test_an_entry_carries_its_records_language_and_one_without_none(client, feed):
    subscription = client.get("/feeds/books/", HTTP_ACCEPT="application/atom+xml")
    assert etree.fromstring(subscription.content).get(XML_LANG) == "en"
    assert entry_languages(subscription.content) == {"Faust. Eine Tragödie": "de", "Emma": None}


def test_sealed_pages_and_the_complete_feed_carry_it_too(client, feed):
    seal_feed(feed)
    archive = client.get("/feeds/books/archives/1/")
    assert archive.status_code == 200
    assert entry_languages(archive.content) == {"Faust. Eine Tragödie": "de", "Emma": None}
    complete = b"".join(client.get("/feeds/books/complete/").streaming_content)
    assert entry_languages(complete) == {"Faust. Eine Tragödie": "de", "Emma": None}


def test_the_records_own_url_and_json_say_it(client, feed):
    entry = etree.fromstring(client.get("/feeds/books/records/faust",
                                        HTTP_ACCEPT="application/atom+xml").content)
    assert entry.get(XML_LANG) == "de"
    assert etree.fromstring(client.get("/feeds/books/records/emma", HTTP_ACCEPT=(
        "application/atom+xml")).content).get(XML_LANG) == "en"
    shown = client.get("/api/feeds/books/records/faust").json()
    assert shown["language"] == "de"
    # No language of its own: no key, so that its JSON is what it was before records had one.
    assert "language" not in client.get("/api/feeds/books/records/emma").json()


def test_the_page_for_people_is_in_the_records_language(client, feed):
    page = client.get("/feeds/books/records/faust", HTTP_ACCEPT="text/html")
    assert b'<html lang="de">' in page.content
    page = client.get("/feeds/books/records/emma", HTTP_ACCEPT="text/html")
    assert b'<html lang="en">' in page.content


def test_a_linked_page_entity_carries_it(client, feed):
    seal_feed(feed)
    page = client.get("/feeds/books/pages/1")
    assert page.status_code == 200
    message = message_from_bytes(
        f"Content-Type: {page['Content-Type']}\r\n\r\n".encode() + page.content, policy=HTTP)
    bodies = {json.loads(part.get_content())["key"]: json.loads(part.get_content())
              for part in message.iter_parts() if part.get_content()}
    assert bodies["faust"]["language"] == "de"
    assert "language" not in bodies["emma"]


def test_oai_pmh_gives_it_as_dc_language_and_in_the_feedpub_format(client, feed):
    def record(prefix: str) -> etree._Element:
        # (each answer checked against OAI-PMH's schema and its format's, tests/oai.py)
        root = ask(client, verb="GetRecord", metadataPrefix=prefix,
                   identifier=f"oai:feedpub.localhost:{feed.uuid}/faust")
        return root.find(".//{http://www.openarchives.org/OAI/2.0/}metadata")[0]

    assert [element.text for element in record("oai_dc").iter(f"{DC}language")] == ["de"]
    assert record("feedpub").findtext(f"{FEEDPUB}language") == "de"


def test_a_put_that_changes_only_the_language_is_an_update(feed):
    entry = publishing.put_record(feed=feed, key="emma", data={"title": "Emma",
                                                               "language": "en-GB"})
    assert entry is not None
    assert (entry.kind, entry.language) == ("update", "en-GB")
    assert publishing.put_record(feed=feed, key="emma", data={
        "title": "Emma", "language": "en-GB"}) is None  # the same again: nothing appended


@pytest.mark.parametrize("language", ["e", "de_DE", "en-", "en--GB", "-en", 7, "x" * 36])
def test_a_language_that_is_no_tag_is_refused_naming_the_field(admin_client, feed, language):
    answer = admin_client.put("/api/feeds/books/records/emma",
                              {"title": "Emma", "language": language},
                              content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["errors"]["language"] == [
        "Enter a language tag (BCP 47) such as en, de or pt-BR. Leave it empty for the feed's "
        "language."]
    assert not Record.objects.filter(key="emma", language__gt="").exists()


def test_an_empty_language_is_the_feeds(admin_client, feed):
    answer = admin_client.patch("/api/feeds/books/records/faust", {"language": ""},
                                content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert "language" not in answer.json()


def test_the_harvester_gives_each_record_its_language(live_server, settings,
                                                      transactional_db, tmp_path):
    feed, url = make_live_feed(live_server, settings)
    publishing.put_record(feed=feed, key="faust", data={"title": "Faust", "language": "de"})
    publishing.put_record(feed=feed, key="emma", data={"title": "Emma"})
    for found in (harvest(url, fetch_records=True),
                  harvest(f"{live_server.url}/feeds/live/pages/latest"),
                  harvest(f"{live_server.url}/oai", metadata_prefix="feedpub")):
        assert {record["title"]: record["language"] for record in found.records} == \
            {"Faust": "de", "Emma": ""}, found.warnings
