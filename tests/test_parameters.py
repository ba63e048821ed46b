"""One rule for a parameter given twice, at every door (archives/parameters.py): refused,
with a message naming it, never resolved to one of its values. (The WebSub hub's is in
test_websub.py, long polling's in test_longpoll.py.)"""

from __future__ import annotations

import pytest

from archives.log import publishing

from .factories import FeedFactory, record_data
from .oai import NS, ask, error_codes

pytestmark = pytest.mark.django_db

FORMAT_TWICE = "The parameter format is given more than once; give it once."
PAGE_TWICE = "The parameter page is given more than once; give it once."


@pytest.mark.parametrize(("url", "message"), [
    ("/feeds/books/?format=html&format=atom", FORMAT_TWICE),
    ("/feeds/books/?format=atom&format=atom", FORMAT_TWICE),  # even the same value
    ("/feeds/books/archives/1/?format=html&format=atom", FORMAT_TWICE),
    ("/feeds/books/records/k1?format=json&format=atom", FORMAT_TWICE),
    ("/feeds/books/?format=html&page=1&page=2", PAGE_TWICE),
    ("/feeds/books/records/k1?format=html&page=1&page=2", PAGE_TWICE),
    ("/feeds/books/records/k2?format=html&page=1&page=2", PAGE_TWICE),  # deleted: 410 else
    ("/?page=1&page=2", PAGE_TWICE),
    ("/feeds/books/search?q=a&q=b", "The parameter q is given more than once; give it once."),
])
@pytest.mark.parametrize("method", ["get", "head"])
def test_documents_and_pages_refuse_a_repeated_parameter_naming_it(client, sealed_feed, url,
                                                                    message, method):
    response = getattr(client, method)(url)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    if method == "get":
        assert response.content.decode() == message


def test_a_json_client_gets_the_refusal_in_json(client, sealed_feed):
    response = client.get("/feeds/books/records/k1?format=json&format=json",
                          HTTP_ACCEPT="application/json")

    assert response.status_code == 400
    assert response.json() == {"detail": FORMAT_TWICE}


def test_a_parameter_given_once_is_read_as_before(client, sealed_feed):
    assert client.get("/feeds/books/?format=html&page=1")["Content-Type"].startswith(
        "text/html")
    assert client.get("/feeds/books/?format=atom")["Content-Type"].startswith(
        "application/atom+xml")


def test_the_api_refuses_a_repeated_query_parameter_naming_it(client, db):
    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="k1", data=record_data(1))

    response = client.get("/api/feeds/books/records/?page_size=1&page_size=2")

    assert response.status_code == 400
    assert response.json() == {
        "detail": "The parameter page_size is given more than once; give it once.",
        "errors": {"page_size": ["Given more than once; give it once."]}}


def test_oai_pmh_refuses_a_repeated_argument_naming_it(client, db):
    document = ask(client, verb="ListRecords", metadataPrefix=["oai_dc", "oai_dc"])
    assert error_codes(document) == ["badArgument"]
    assert document.findtext("o:error", namespaces=NS) == (
        "The parameter metadataPrefix is given more than once; give it once.")

    document = ask(client, verb=["Identify", "Identify"])
    assert error_codes(document) == ["badVerb"]
    assert document.findtext("o:error", namespaces=NS) == (
        "The parameter verb is given more than once; give it once.")


def test_the_admin_refuses_a_repeated_feed_for_a_new_record(admin_client, db):
    one, other = FeedFactory(slug="one"), FeedFactory(slug="other")

    response = admin_client.get(f"/admin/archives/record/add/?feed={one.pk}&feed={other.pk}")

    assert response.status_code == 400
    assert response.content.decode() == (
        "The parameter feed is given more than once; give it once.")


@pytest.mark.parametrize("url", ["/api/feeds/?format=json&format=api",
                                 "/api/?format=json&format=api",
                                 "/api/schema/?format=json&format=yaml"])
def test_every_api_view_refuses_a_repeated_format(client, db, url):
    response = client.get(url)

    assert response.status_code == 400
    assert response.json()["detail"] == (
        "The parameter format is given more than once; give it once.")
