from __future__ import annotations

import json
from datetime import UTC, datetime

import feedparser
import pytest
from django.core.exceptions import ValidationError
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from feedpub_consumer.http import parse_links
from lxml import etree

from archives import conf
from archives.documents import atom, urls
from archives.log import publishing
from archives.log.sealing import seal_feed

from .factories import FeedFactory, record_data
from .walking import NS, walk

BASE = "http://127.0.0.1:8000"


def links_of(root):
    """The document's links to documents (its page for people, text/html, aside)."""
    return {link.get("rel"): link.get("href") for link in root.findall("a:link", NS)
            if link.get("type") != "text/html"}


def header_links(response):
    """The Link header's links to documents, as links_of reads the body's."""
    return {link.rel: link.href for link in parse_links(response["Link"], BASE)
            if link.attribute("type") != "text/html"}


def test_an_empty_subscription_document_is_valid_and_dated_by_the_feed(
        client, feed, atom_validators):
    response = client.get("/feeds/books/")

    root = atom_validators(response.content)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/atom+xml; charset=utf-8"
    assert root.findall("a:entry", NS) == []
    assert root.findtext("a:updated", namespaces=NS) == atom.rfc3339(feed.created)
    assert "prev-archive" not in links_of(root)


def test_the_subscription_document_holds_the_unsealed_entries_newest_first(
        client, sealed_feed, atom_validators):
    for n in range(8, 10):
        publishing.put_record(feed=sealed_feed, key=f"k{n}", data=record_data(n))
    root = atom_validators(client.get("/feeds/books/").content)

    updated = [e.findtext("a:updated", namespaces=NS) for e in root.findall("a:entry", NS)]
    assert len(updated) == 3
    assert updated == sorted(updated, reverse=True)
    assert root.findtext("a:updated", namespaces=NS) == updated[0]
    assert links_of(root) == {
        "self": f"{BASE}/feeds/books/",
        "current": f"{BASE}/feeds/books/",
        "prev-archive": f"{BASE}/feeds/books/archives/2/",
        "hub": f"{BASE}/websub/",  # WebSub
    }


def test_archive_documents_carry_fh_archive_and_their_links(client, sealed_feed, atom_validators):
    first = atom_validators(client.get("/feeds/books/archives/1/").content)
    second = atom_validators(client.get("/feeds/books/archives/2/").content)

    assert first.find("fh:archive", NS) is not None
    assert second.find("fh:archive", NS) is not None
    assert links_of(first) == {
        "self": f"{BASE}/feeds/books/archives/1/",
        "current": f"{BASE}/feeds/books/",
        "next-archive": f"{BASE}/feeds/books/archives/2/",
    }
    assert links_of(second) == {
        "self": f"{BASE}/feeds/books/archives/2/",
        "current": f"{BASE}/feeds/books/",
        "prev-archive": f"{BASE}/feeds/books/archives/1/",
    }
    entries = second.findall("a:entry", NS)
    assert second.findtext("a:updated", namespaces=NS) == \
        max(e.findtext("a:updated", namespaces=NS) for e in entries)


def test_entries_follow_atom_pmh(client, sealed_feed, atom_validators):
    walked = walk(client, f"{BASE}/feeds/books/")
    entries = [e for d in walked.documents for e in d.entries()]
    deletion = next(e for e in entries if e["deletion"])
    active = [e for e in entries if not e["deletion"]]

    raw = walked.documents[0].root.find("a:entry", NS)
    assert raw.find("a:content", NS).text is None
    assert raw.findtext("a:summary", namespaces=NS) == "The record k2 was deleted."
    assert deletion["id"] == publishing.Record.objects.get(key="k2").atom_id
    for entry in active:
        assert entry["alternates"][0].startswith(f"{BASE}/feeds/books/records/k")
    for document in walked.documents:
        for entry in document.root.findall("a:entry", NS):
            alternate = entry.find("a:link[@rel='alternate']", NS)
            if alternate is not None:
                assert entry.find("a:content", NS) is None
                assert alternate.get("type") == "application/atom+xml"


def test_feedparser_reads_every_entry_and_link(client, sealed_feed):
    for url, count in [("/feeds/books/", 1), ("/feeds/books/archives/1/", 3),
                       ("/feeds/books/archives/2/", 3)]:
        parsed = feedparser.parse(client.get(url).content)
        assert not parsed.bozo, parsed.get("bozo_exception")
        assert len(parsed.entries) == count
        rels = {link["rel"] for link in parsed.feed.links}
        assert {"self", "current"} <= rels
        for entry in parsed.entries:
            assert entry.id.startswith("urn:uuid:")
            assert entry.updated_parsed


def test_record_strings_come_out_byte_for_byte(client, feed):
    title = "Tom & Jerry <3 \"quotes\" 'apos' ü 𝄞 \t tab"
    summary = "line one\nline two\r\n]]> not CDATA"
    publishing.put_record(feed=feed, key="odd", data=record_data(1, title=title, summary=summary))

    root = etree.fromstring(client.get("/feeds/books/").content)
    entry = root.find("a:entry", NS)
    assert entry.findtext("a:title", namespaces=NS) == title
    # XML normalises a bare CR in text to LF; a CR survives only as a character reference.
    assert entry.findtext("a:summary", namespaces=NS) == summary


def test_link_headers_repeat_the_document_links(client, sealed_feed):
    for url in ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/archives/2/"]:
        response = client.get(url)
        assert header_links(response) == links_of(etree.fromstring(response.content))


def test_only_a_page_with_its_next_archive_link_is_immutable(client, sealed_feed, settings):
    assert client.get("/feeds/books/archives/1/")["Cache-Control"] == \
        "public, max-age=31536000, immutable"
    assert client.get("/feeds/books/archives/2/")["Cache-Control"] == \
        f"public, max-age={conf.settings.FEEDPUB_MAX_AGE}"
    assert client.get("/feeds/books/")["Cache-Control"] == \
        f"public, max-age={conf.settings.FEEDPUB_MAX_AGE}"


@pytest.mark.parametrize("url", ["/feeds/books/", "/feeds/books/archives/1/",
                                 "/feeds/books/archives/2/", "/feeds/books/records/k1"])
def test_it_answers_304_to_a_matching_etag(client, sealed_feed, url):
    response = client.get(url)

    by_etag = client.get(url, HTTP_IF_NONE_MATCH=response["ETag"])
    changed = client.get(url, HTTP_IF_NONE_MATCH='"something-else"')
    assert by_etag.status_code == 304
    assert by_etag.content == b""
    assert by_etag["ETag"] == response["ETag"]
    assert by_etag["Link"] == response["Link"]
    assert changed.status_code == 200


def test_a_subscription_poll_that_finds_nothing_new_costs_one_query_and_no_rendering(
        client, sealed_feed, monkeypatch):
    etag = client.get("/feeds/books/")["ETag"]
    monkeypatch.setattr(atom, "render_subscription", lambda *a: pytest.fail("rendered"))

    with CaptureQueriesContext(connection) as queries:
        response = client.get("/feeds/books/", HTTP_IF_NONE_MATCH=etag)
    assert response.status_code == 304
    assert len(queries) == 1


def test_a_write_or_a_retitle_changes_the_subscription_etag(client, sealed_feed):
    etag = client.get("/feeds/books/")["ETag"]
    publishing.update_feed(feed=sealed_feed, title="Retitled")
    retitled = client.get("/feeds/books/", HTTP_IF_NONE_MATCH=etag)
    publishing.put_record(feed=sealed_feed, key="new", data=record_data(99))
    written = client.get("/feeds/books/", HTTP_IF_NONE_MATCH=retitled["ETag"])

    assert retitled.status_code == written.status_code == 200
    assert len({etag, retitled["ETag"], written["ETag"]}) == 3


def test_an_immutable_page_is_served_from_memory_without_the_database(
        client, sealed_feed, settled):
    first = client.get("/feeds/books/archives/1/")
    with CaptureQueriesContext(connection) as queries:
        again = client.get("/feeds/books/archives/1/")
        revalidated = client.get("/feeds/books/archives/1/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert len(queries) == 0
    assert again.content == first.content
    assert revalidated.status_code == 304


@pytest.mark.parametrize("url", ["/feeds/books/", "/feeds/books/archives/1/",
                                 "/feeds/books/archives/2/", "/feeds/books/records/k1",
                                 "/feeds/books/archives/9/", "/feeds/books/records/k2"])
def test_head_answers_the_same_status_and_headers_as_get_without_a_body(sealed_feed, url):
    (get_status, get_headers, get_body) = through_wsgi(url)
    (head_status, head_headers, head_body) = through_wsgi(url, REQUEST_METHOD="HEAD")

    assert head_status == get_status
    assert get_status.split()[0] == str(Client().get(url).status_code)  # served, not a fluke
    if head_status.startswith("200"):  # error pages are left to the server to strip
        assert head_body == b""
    for name in ["Content-Type", "ETag", "Last-Modified", "Cache-Control", "Link"]:
        assert head_headers.get(name) == get_headers.get(name), name
    # The same Content-Length as GET, or none (never a wrong one, such as 0).
    if "Content-Length" in head_headers:
        assert head_headers["Content-Length"] == get_headers["Content-Length"]


def through_wsgi(url, **environ):
    """Status, headers and body through Django's WSGI handler, as a server runs it: the
    test client strips HEAD bodies itself and never sets the script prefix. Like the test
    client, it keeps the request from closing the test's database connection."""
    environ = RequestFactory()._base_environ(PATH_INFO=url, **environ)
    answer = {}
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = WSGIHandler()(environ, lambda s, h: answer.update(s=s, h=dict(h)))
        body = b"".join(response)
        response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return answer["s"], answer["h"], body


def test_other_methods_are_refused(client, sealed_feed):
    assert client.post("/feeds/books/").status_code == 405
    assert client.delete("/feeds/books/archives/1/").status_code == 405


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/feeds/nope/", 404),
        ("/feeds/nope/archives/1/", 404),
        ("/feeds/books/archives/0/", 404),
        ("/feeds/books/archives/3/", 404),
        ("/feeds/books/archives/99999999999999999999999/", 404),
        ("/feeds/books/archives/2023/02/30/", 404),
        ("/feeds/books/archives/2023/13/", 404),
        ("/feeds/books/archives/0000/01/", 404),
        ("/feeds/books/archives/abc/", 404),
        ("/feeds/books/archives/2024/ab/", 404),
        ("/feeds/books/archives/-1/", 404),
        ("/feeds/books/records/nope", 404),
        ("/feeds/books/records/k2", 410),
        ("/feeds/nope/archives/2024/01/", 404),
    ],
)
def test_bad_addresses_get_a_clear_4xx(client, sealed_feed, url, status):
    assert client.get(url).status_code == status


@pytest.fixture
def dated_feed(feed, monkeypatch):
    """Entry n written at noon on 2024-01-n: page 1 = Jan 1-3, page 2 = Jan 4-6, 7 unsealed."""
    days = iter(datetime(2024, 1, n, 12, tzinfo=UTC) for n in range(1, 8))
    monkeypatch.setattr(publishing.timezone, "now", lambda: next(days))
    for n in range(1, 8):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    monkeypatch.undo()
    seal_feed(feed)
    return feed


@pytest.mark.parametrize(
    ("path", "status", "location"),
    [
        ("2023/12/", 301, "/feeds/books/archives/1/"),
        ("2024/01/", 301, "/feeds/books/archives/1/"),
        ("2024/01/03/", 301, "/feeds/books/archives/1/"),
        ("2024/01/04/", 301, "/feeds/books/archives/2/"),
        ("2024/01/06/", 301, "/feeds/books/archives/2/"),
        ("2024/01/07/", 302, "/feeds/books/"),
        ("2024/02/", 302, "/feeds/books/"),
    ],
)
def test_date_routes_redirect_to_the_page_holding_that_instant(
        client, dated_feed, path, status, location):
    response = client.get(f"/feeds/books/archives/{path}")
    assert (response.status_code, response["Location"]) == (status, location)


def test_a_date_route_into_the_sealed_range_is_answered_from_memory_for_ever(
        client, dated_feed):
    first = client.get("/feeds/books/archives/2024/01/05/")
    with CaptureQueriesContext(connection) as queries:
        again = client.get("/feeds/books/archives/2024/01/05/")
    assert len(queries) == 0
    assert (again.status_code, again["Location"]) == (301, "/feeds/books/archives/2/")
    assert again["Cache-Control"] == first["Cache-Control"] == \
        "public, max-age=31536000, immutable"


def test_a_date_not_sealed_yet_is_looked_up_again_once_it_is(client, dated_feed):
    assert client.get("/feeds/books/archives/2024/01/08/")["Location"] == "/feeds/books/"
    for n in range(8, 10):
        publishing.put_record(feed=dated_feed, key=f"k{n}", data=record_data(n))
    seal_feed(dated_feed)  # page 3: Jan 7 and the two entries written now
    response = client.get("/feeds/books/archives/2024/01/08/")
    assert (response.status_code, response["Location"]) == (301, "/feeds/books/archives/3/")


def test_the_record_url_serves_an_atom_entry_document(client, sealed_feed, atom_validators):
    response = client.get("/feeds/books/records/k1")
    root = atom_validators(response.content)

    assert response["Content-Type"] == "application/atom+xml; type=entry; charset=utf-8"
    assert response["Vary"] == "Accept-Encoding, Accept"
    assert root.tag == f"{{{atom.ATOM_NS}}}entry"
    assert root.findtext("a:title", namespaces=NS) == "Renamed"
    assert root.find("a:link[@rel='self']", NS).get("href") == f"{BASE}/feeds/books/records/k1"
    assert json.loads(root.findtext("a:content", namespaces=NS)) == record_data(1)["metadata"]


def test_the_record_url_serves_json_when_asked(client, sealed_feed):
    response = client.get("/feeds/books/records/k1", HTTP_ACCEPT="application/json")
    atom_etag = client.get("/feeds/books/records/k1")["ETag"]
    body = response.json()

    assert response["Content-Type"] == "application/json"
    assert response["ETag"] != atom_etag
    assert body["key"] == "k1"
    assert body["title"] == "Renamed"
    assert body["deleted"] is False
    assert body["metadata"] == record_data(1)["metadata"]
    assert body["url"] == f"{BASE}/feeds/books/records/k1"
    assert client.get("/feeds/books/records/k1?format=json")["Content-Type"] == \
        "application/json"


def test_the_record_updated_equals_its_newest_entry(client, sealed_feed):
    walked = walk(client, f"{BASE}/feeds/books/")
    live = walked.live
    for key in ["k1", "k3", "k4", "k5"]:
        body = client.get(f"/feeds/books/records/{key}?format=json").json()
        assert live[body["atom_id"]]["updated"] == body["updated"]


def test_the_index_lists_feeds_with_autodiscovery_links(client, sealed_feed):
    FeedFactory(slug="films", title="Films")
    response = client.get("/")
    root = etree.HTML(response.content)

    assert response.status_code == 200
    discovered = root.xpath("//link[@rel='alternate'][@type='application/atom+xml']/@href")
    assert discovered == ["/feeds/books/", "/feeds/films/"]
    assert "Books" in response.content.decode()


def test_documents_do_not_depend_on_the_request_host(client, sealed_feed):
    here = client.get("/feeds/books/archives/2/").content
    there = client.get("/feeds/books/archives/2/", HTTP_HOST="localhost").content
    assert here == there


def test_documents_do_not_depend_on_the_script_prefix(sealed_feed):
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    urls.url_path.cache_clear()  # each request below renders its links afresh
    _, mounted_headers, mounted = through_wsgi("/feeds/books/", SCRIPT_NAME="/mounted")
    urls.url_path.cache_clear()
    _, plain_headers, plain = through_wsgi("/feeds/books/")
    assert mounted == plain
    assert mounted_headers["Link"] == plain_headers["Link"]
    assert b"/mounted/" not in mounted


def test_documents_carry_the_feeds_language_and_links_for_people(client, sealed_feed):
    publishing.update_feed(feed=sealed_feed, language="de")
    subscription = etree.fromstring(client.get("/feeds/books/").content)
    record = etree.fromstring(client.get("/feeds/books/records/k1").content)

    assert subscription.get("{http://www.w3.org/XML/1998/namespace}lang") == "de"
    assert record.get("{http://www.w3.org/XML/1998/namespace}lang") == "de"
    assert subscription.find("a:link[@type='text/html']", NS).get("href") == (
        f"{BASE}/feeds/books/?format=html")
    archive = etree.fromstring(client.get("/feeds/books/archives/1/").content)
    html_alternates = [entry.find("a:link[@type='text/html']", NS)
                       for entry in archive.findall("a:entry", NS)
                       if entry.find("a:link[@rel='alternate']", NS) is not None]
    assert html_alternates
    assert all(link.get("rel") == "alternate" and link.get("href").endswith("?format=html")
               for link in html_alternates)


def test_a_feeds_language_must_be_a_language_tag(sealed_feed):
    with pytest.raises(ValidationError) as refused:
        publishing.update_feed(feed=sealed_feed, language="english please")
    assert "language" in refused.value.message_dict
