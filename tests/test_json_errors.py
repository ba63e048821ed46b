"""A client that asks a document URL for JSON gets its errors in JSON too, in the API's error
shape (`{"detail": "..."}`); Atom and HTML clients get what they got before. Of the document
URLs, the record URL is the one that negotiates JSON."""

from __future__ import annotations

import pytest

JSON = {"HTTP_ACCEPT": "application/json"}


def assert_json_error(response, status: int, detail: str) -> None:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": detail}
    assert "Accept" in response["Vary"]  # a browser's answer at the same URL is HTML


@pytest.mark.parametrize("asked", [JSON, {"QUERY_STRING": "format=json"},
                                   {"HTTP_ACCEPT": "application/json, text/html;q=0.5"}])
def test_a_deleted_record_is_a_json_410_to_a_json_client(client, sealed_feed, asked):
    response = client.get("/feeds/books/records/k2", **asked)
    assert_json_error(response, 410, "Record 'k2' was deleted.")


@pytest.mark.parametrize(("url", "detail"), [
    ("/feeds/books/records/nope", "Feed 'books' has no record 'nope'"),
    ("/feeds/nope/records/k1", "Feed 'nope' has no record 'k1'"),
    ("/feeds/books/records/%20bad", "Feed 'books' has no record ' bad'"),  # no valid key
])
@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_record_is_a_json_404_to_a_json_client(client, sealed_feed, settings,
                                                          url, detail, debug):
    settings.DEBUG = debug  # not left to the 404 handler, which DEBUG replaces
    host = {"HTTP_HOST": "127.0.0.1:8000"}  # FEEDPUB_BASE_URL's, as DEBUG checks
    assert_json_error(client.get(url, **JSON, **host), 404, detail)


def test_an_unknown_format_is_a_json_400_when_the_client_prefers_json(client, sealed_feed):
    response = client.get("/feeds/books/records/k1?format=xml", **JSON)
    assert_json_error(response, 400, "Unknown format 'xml': this URL serves ?format=atom, "
                                     "?format=json, ?format=html.")
    plain = client.get("/feeds/books/records/k1?format=xml")
    assert (plain.status_code, plain["Content-Type"]) == (400, "text/plain")


def test_the_error_shape_is_the_apis(client, sealed_feed):
    api = client.get("/api/feeds/books/records/nope")
    document = client.get("/feeds/books/records/nope", **JSON)
    assert api.status_code == document.status_code == 404
    assert api["Content-Type"] == document["Content-Type"]
    assert api.json().keys() == document.json().keys() == {"detail"}


def test_atom_and_html_clients_get_what_they_got(client, sealed_feed):
    atom = client.get("/feeds/books/records/k2")
    assert (atom.status_code, atom["Content-Type"]) == (410, "text/plain")
    assert atom.content == b"Record 'k2' was deleted."
    page = client.get("/feeds/books/records/k2", HTTP_ACCEPT="text/html")
    assert page.status_code == 410
    assert page["Content-Type"].startswith("text/html")
    missing = client.get("/feeds/books/records/nope", HTTP_ACCEPT="text/html")
    assert missing.status_code == 404
    assert missing["Content-Type"].startswith("text/html")
    assert b"has no record" in missing.content  # the site's page (templates/404.html)
