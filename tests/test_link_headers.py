"""Every document's Link header repeats all of its links (HEAD alone can walk a feed:
docs/how-it-works/invariants.md#http), with the attributes its elements carry: the body's
links read with lxml, the header read by RFC 8288's algorithm (the consumer's parse_links),
for every kind of document, as Django serves it and as nginx serves its exported file."""

from __future__ import annotations

import gzip
from collections import Counter
from urllib.parse import quote, urljoin

from feedpub_consumer.http import parse_links
from lxml import etree

from archives.documents import atom
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed
from archives.storage.snapshots import take_snapshot

from .factories import FeedFactory, record_data
from .test_export_nginx import GZIP, from_django, from_file, served, settle_and_export

__all__ = ["served"]  # the fixture: nginx with the deploy template before the live server

A = f"{{{atom.ATOM_NS}}}"
ATTRIBUTES = ("type", "title", "hreflang")
# Producer links with what a header must escape or encode: quotes, commas and semicolons
# in a title, a title that is not ASCII (title*), an IRI, a media type with a parameter.
PRODUCER_LINKS = [
    {"href": "https://example.org/covers/1.jpg?size=large&format=jpeg", "rel": "enclosure",
     "type": "image/jpeg", "title": 'Cover "front", large; 1 of 2'},
    {"href": "https://example.org/catalogue/écrits", "rel": "alternate",
     "type": "text/plain; charset=utf-8", "title": "Écrits, édition numérique"},
    {"href": "https://example.org/related/1", "rel": "related"},
]


def header_links(value: str | None, url: str) -> Counter:
    return Counter((link.rel, link.href, *(link.attribute(name) for name in ATTRIBUTES))
                   for link in parse_links(value, url))


def body_links(content_type: str, body: bytes, url: str) -> Counter | None:
    """The document's own links (its root's, an RSS channel's), as the header writes them:
    hrefs resolved and as URIs (RFC 3987 3.1); None for a body with no link syntax (the
    multipart pages and JSON indexes, whose links are their Link header alone)."""
    media_type = content_type.split(";")[0].strip()
    if media_type not in ("application/atom+xml", "application/rss+xml"):
        return None
    root = etree.fromstring(body)
    if media_type == "application/rss+xml":
        root = root.find("channel")
        # The channel's link is the feed's page for people.
        found = [("alternate", root.findtext("link"), atom.HTML_TYPE, None, None)]
    else:
        found = []
    for link in root.findall(f"{A}link"):
        href = quote(urljoin(url, link.get("href")), safe=":/?#[]@!$&'()*+,;=%~")
        found.append((link.get("rel", "alternate"), href,
                      *(link.get(name) for name in ATTRIBUTES)))
    return Counter(found)


def test_every_document_s_link_header_carries_every_link_of_its_body(served):
    feed = FeedFactory(slug="served", page_size=3)
    for n in range(1, 8):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="k1", data=record_data(1, links=PRODUCER_LINKS))
    publishing.delete_record(feed=feed, key="k2")
    seal_feed(Feed.objects.get(pk=feed.pk))  # pages 1 to 3 sealed, 3 their newest
    publishing.put_record(feed=feed, key="k8", data=record_data(8))  # linked page 4, open
    snapshot = take_snapshot(Feed.objects.get(pk=feed.pk))
    settle_and_export()
    snapshot_path = f"/feeds/served/snapshots/{snapshot.uuid}/"
    documents = [
        "/feeds/served/", "/feeds/served/rss/", "/feeds/served/complete/",
        "/feeds/served/paged/", "/feeds/served/records/k1", "/feeds/served/records/k3",
        *(f"/feeds/served/{path}" for number in (1, 2, 3) for path in (
            f"archives/{number}/", f"archives/{number}/rss/", f"paged/{number}/",
            f"pages/{number}")),
        "/feeds/served/pages/4", snapshot_path,
        *(f"{snapshot_path}pages/{number}" for number in range(1, snapshot.pages + 1)),
    ]
    compared = 0
    for path in documents:
        response = from_django(served, path)
        url = served.url + path
        assert response.status == 200, path
        in_header = header_links(response.header("Link"), url)
        in_body = body_links(response.header("Content-Type"), response.body, url)
        if in_body is None:  # the header is where its links are: it names itself at least
            assert ("self", url, None, None, None) in in_header, path
            continue
        assert in_header == in_body, path
        compared += 1
    assert compared == 15  # the Atom and RSS documents

    # The exported files nginx serves, plain and gzip, with the headers it adds to them.
    for path in (f"/feeds/served/archives/{number}/{twin}" for number in (1, 2, 3)
                 for twin in ("", "rss/")):
        for headers in ({}, GZIP):
            response = served.request(path, headers)
            assert from_file(response), path
            body = gzip.decompress(response.body) if headers else response.body
            url = served.url + path
            assert header_links(response.header("Link"), url) == \
                body_links(response.header("Content-Type"), body, url), path


def test_head_alone_carries_the_links(client, sealed_feed):
    for path in ("/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/rss/",
                 "/feeds/books/complete/", "/feeds/books/paged/1/", "/feeds/books/pages/2"):
        assert client.head(path)["Link"] == client.get(path)["Link"], path


def test_a_link_header_writes_each_attribute_so_that_a_parser_reads_it_back():
    links = [atom.Link("alternate", "https://example.org/a b/é?x=<1>", "text/plain; q=1",
                       'He said "hi", \\ then left; bye'),
             atom.Link("enclosure", "https://example.org/c", None, "Café\nnoir", "fr")]
    value = atom.link_header(links)
    assert value.isascii()
    assert "\n" not in value
    parsed = parse_links(value, "https://example.org/")
    assert [(link.rel, link.href, link.attribute("type"), link.attribute("title"),
             link.attribute("hreflang")) for link in parsed] == [
        ("alternate", "https://example.org/a%20b/%C3%A9?x=%3C1%3E", "text/plain; q=1",
         'He said "hi", \\ then left; bye', None),
        ("enclosure", "https://example.org/c", None, "Café\nnoir", "fr")]


def test_a_feed_with_a_schema_says_so_in_its_bodies_and_their_link_headers(client, db):
    feed = publishing.create_feed(slug="data", title="Data", page_size=3, record_schema={
        "type": "object", "properties": {"n": {"type": "integer"}}})
    for n in range(1, 5):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n, metadata={"n": n}))
    seal_feed(Feed.objects.get(pk=feed.pk))
    base = "http://127.0.0.1:8000"
    schema = (f"{base}/feeds/data/schema/1", "application/schema+json", None, None)

    for path in ("/feeds/data/", "/feeds/data/rss/", "/feeds/data/complete/",
                 "/feeds/data/paged/", "/feeds/data/records/k1", "/feeds/data/archives/1/",
                 "/feeds/data/archives/1/rss/", "/feeds/data/paged/1/"):
        response = client.get(path)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        url = base + path
        in_header = header_links(response["Link"], url)
        assert in_header == body_links(response["Content-Type"], body, url), path
        # Sealed pages and their twins were frozen without it.
        assert in_header[("describedby", *schema)] == ("/archives/" not in path
                                                       and "/paged/1/" not in path), path
    entry_point = client.get("/feeds/data/pages/latest")
    assert header_links(entry_point["Link"], f"{base}/feeds/data/pages/latest")[
        ("describedby", *schema)] == 1
