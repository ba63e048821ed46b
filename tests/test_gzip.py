"""Documents are gzip-encoded for clients that accept it: the same bytes, compressed once
per process, under an ETag of their own, with `Vary: Accept-Encoding` on every variant."""

from __future__ import annotations

import gzip

import feedparser
import pytest

from archives.documents.base import gzipped_bodies
from archives.log import publishing
from archives.storage import snapshots

from .factories import record_data

DOCUMENTS = ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/archives/2/",
             "/feeds/books/records/k1", "/feeds/books/pages/1", "/feeds/books/pages/3",
             "/feeds/books/rss/", "/feeds/books/archives/1/rss/", "/feeds/books/paged/",
             "/feeds/books/paged/1/", "/feeds/books/?format=html",
             "/feeds/books/records/k1?format=html", "/feeds/books/activity.svg"]


@pytest.mark.parametrize("url", DOCUMENTS)
def test_a_document_is_the_same_bytes_gzipped(client, sealed_feed, url):
    plain = client.get(url)
    compressed = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate, br")

    assert plain.status_code == compressed.status_code == 200
    assert "Content-Encoding" not in plain
    assert compressed["Content-Encoding"] == "gzip"
    assert gzip.decompress(compressed.content) == plain.content
    assert int(compressed["Content-Length"]) == len(compressed.content)
    if "/archives/" in url:  # sealed pages carry their exported files' ETags (nginx's)
        second, length = compressed["ETag"].strip('"').split("-")
        assert compressed["ETag"] == f'"{second}-{len(compressed.content):x}"'
        assert plain["ETag"] == f'"{second}-{len(plain.content):x}"'
    else:
        assert compressed["ETag"] == plain["ETag"][:-1] + '-gzip"'
    for response in (plain, compressed):
        assert "Accept-Encoding" in response["Vary"]
        assert response["Content-Type"] == plain["Content-Type"]


def test_gzip_bytes_are_the_same_in_every_process(client, sealed_feed):
    first = client.get("/feeds/books/archives/1/", HTTP_ACCEPT_ENCODING="gzip").content
    gzipped_bodies.clear()  # as a process that has not compressed it yet

    assert client.get("/feeds/books/archives/1/", HTTP_ACCEPT_ENCODING="gzip").content == first


@pytest.mark.parametrize(("accept_encoding", "gzipped"), [
    ("gzip", True), ("GZIP;q=0.5", True), ("x-gzip", True), ("*", True),
    ("br, *;q=0.1", True), ("", False), ("identity", False), ("gzip;q=0", False),
    ("gzip;q=0, *", False), ("*;q=0", False), ("deflate, br", False), ("gzip;q=oops", False),
])
def test_accept_encoding_is_read_with_its_q_values(client, sealed_feed, accept_encoding,
                                                    gzipped):
    response = client.get("/feeds/books/archives/1/", HTTP_ACCEPT_ENCODING=accept_encoding)

    assert (response.get("Content-Encoding") == "gzip") is gzipped


def test_each_encoding_revalidates_with_its_own_etag(client, sealed_feed):
    url = "/feeds/books/archives/1/"
    plain_etag = client.get(url)["ETag"]
    gzip_etag = client.get(url, HTTP_ACCEPT_ENCODING="gzip")["ETag"]

    not_modified = client.get(url, HTTP_ACCEPT_ENCODING="gzip", HTTP_IF_NONE_MATCH=gzip_etag)
    other_copy = client.get(url, HTTP_ACCEPT_ENCODING="gzip", HTTP_IF_NONE_MATCH=plain_etag)

    assert not_modified.status_code == 304
    assert not_modified["ETag"] == gzip_etag
    assert "Content-Encoding" not in not_modified  # a 304 has no content to encode
    assert other_copy.status_code == 200  # a cache's plain copy is not this representation
    assert client.get(url, HTTP_IF_NONE_MATCH=plain_etag).status_code == 304


def test_a_new_write_changes_the_gzip_etag_too(client, sealed_feed):
    before = client.get("/feeds/books/", HTTP_ACCEPT_ENCODING="gzip")
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    after = client.get("/feeds/books/", HTTP_ACCEPT_ENCODING="gzip",
                       HTTP_IF_NONE_MATCH=before["ETag"])

    assert after.status_code == 200
    assert after["ETag"] != before["ETag"]
    assert b"k9" in gzip.decompress(after.content)


def test_head_tells_the_gzip_length(client, sealed_feed):
    get = client.get("/feeds/books/archives/1/", HTTP_ACCEPT_ENCODING="gzip")
    head = client.head("/feeds/books/archives/1/", HTTP_ACCEPT_ENCODING="gzip")

    assert head.content == b""
    assert head["Content-Length"] == get["Content-Length"]
    assert head["Content-Encoding"] == "gzip"


def test_snapshots_are_gzipped_too(client, sealed_feed):
    snapshot = snapshots.take_snapshot(sealed_feed)
    url = f"/feeds/books/snapshots/{snapshot.uuid}/"

    compressed = client.get(url, HTTP_ACCEPT_ENCODING="gzip")

    assert gzip.decompress(compressed.content) == client.get(url).content


def test_readers_get_the_feed_through_gzip(live_server, sealed_feed):
    # feedparser asks for gzip itself and decodes it, as readers do.
    parsed = feedparser.parse(f"{live_server.url}/feeds/books/archives/1/")

    assert not parsed.bozo
    assert parsed.headers.get("content-encoding") == "gzip"
    assert len(parsed.entries) == 3
