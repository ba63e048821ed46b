"""What a general feed reader (feedparser) makes of every format feedpub serves: no
complaint, and each entry's link (the "open" button) is the record's page for people."""

from __future__ import annotations

from urllib.parse import urlsplit

import feedparser
import pytest

from archives.log import publishing
from archives.models import Record

from .factories import record_data

FEEDS = ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/archives/2/",
         "/feeds/books/rss/", "/feeds/books/archives/1/rss/", "/feeds/books/archives/2/rss/",
         "/feeds/books/complete/", "/feeds/books/paged/", "/feeds/books/paged/1/",
         "/feeds/books/paged/2/"]


@pytest.fixture
def books(sealed_feed):
    publishing.put_record(feed=sealed_feed, key="k6", data=record_data(6))  # one more live
    return sealed_feed


@pytest.mark.parametrize("url", FEEDS)
def test_every_format_opens_real_pages_in_a_reader(client, books, url):
    response = client.get(url)
    parsed = feedparser.parse(b"".join(response) if response.streaming else response.content)

    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.entries
    assert urlsplit(parsed.feed.link).scheme == "http"
    assert client.get(urlsplit(parsed.feed.link).path + "?format=html")[
        "Content-Type"].startswith("text/html")
    for entry in parsed.entries:
        if entry.get("summary", "").endswith(" was deleted."):
            # A deletion entry: Atom-PMH forbids it an alternate link (feedparser then
            # shows the entry's urn:uuid id as its link; RSS readers show none).
            assert urlsplit(entry.get("link", "urn:")).scheme == "urn"
            continue
        link = urlsplit(entry.link)
        assert link.scheme in ("http", "https")
        assert link.query == "format=html"
        page = client.get(f"{link.path}?{link.query}")
        # A record deleted since this entry: its page says so, with its history, as a 410.
        deleted = Record.objects.get(key=link.path.rsplit("/", 1)[1]).is_deleted
        assert page.status_code == (410 if deleted else 200)
        assert page["Content-Type"].startswith("text/html")
        assert entry.title.encode() in page.content
