"""The deploy nginx serving exported pages (archives/storage/export.py) from their files: the same
bytes and headers feedpub sends for the same URL, validators either side accepts, and
feedpub answering whatever has no file. Real nginx (tests/nginx_server.py) in front of the
live server; skipped without nginx, an error in CI."""

from __future__ import annotations

import gzip
import http.client
import os
import time
from datetime import timedelta

import pytest
from django.db.models import F

from archives import conf
from archives.documents import base
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import ArchivePage, Feed
from archives.storage import export

from .factories import FeedFactory, record_data
from .nginx_server import Nginx, Response, require_nginx

# What feedpub says about a document, which nginx must say the same way.
COMPARED = ("Content-Type", "ETag", "Last-Modified", "Cache-Control", "Link", "Vary",
            "Content-Encoding", "Content-Length")
# Django's security middleware's (SecurityMiddleware, XFrameOptionsMiddleware).
SECURITY = ("X-Content-Type-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy",
            "X-Frame-Options", "Strict-Transport-Security")
COMPARED += SECURITY
GZIP = {"Accept-Encoding": "gzip, deflate, br"}


@pytest.fixture
def served(live_server, settings, transactional_db, tmp_path, pages_dir):
    """nginx with the deploy template, serving the test's exported pages directory."""
    require_nginx()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{live_server.thread.port}",
                  pages_dir=pages_dir, max_age=conf.settings.FEEDPUB_MAX_AGE,
                  secure=secure_variables(settings))
    settings.FEEDPUB_BASE_URL = nginx.url  # before any page is sealed: pages keep it
    nginx.start()
    nginx.origin = live_server.thread.port
    yield nginx
    nginx.stop()


def secure_variables(settings) -> dict[str, str]:
    """FEEDPUB_SECURE_* (tests/nginx_server.py) as the deploy sets them: feedpub's own."""
    return {"SSL_REDIRECT": str(settings.SECURE_SSL_REDIRECT).lower(),
            "HSTS_SECONDS": str(settings.SECURE_HSTS_SECONDS),
            "HSTS_INCLUDE_SUBDOMAINS": str(settings.SECURE_HSTS_INCLUDE_SUBDOMAINS).lower(),
            "HSTS_PRELOAD": str(settings.SECURE_HSTS_PRELOAD).lower()}


def from_django(nginx: Nginx, path: str, headers: dict | None = None) -> Response:
    connection = http.client.HTTPConnection("127.0.0.1", nginx.origin, timeout=15)
    try:
        connection.request("GET", path, headers=headers or {})
        answer = connection.getresponse()
        return Response(answer.status, answer.headers, answer.read())
    finally:
        connection.close()


def headers_of(response: Response) -> dict[str, object]:
    headers = {name: response.headers.get_all(name) for name in COMPARED}
    # (nginx's gzip_vary repeats Accept-Encoding in a Vary of its own on what it proxies)
    headers["Vary"] = {token.strip() for value in headers["Vary"] or []
                       for token in value.split(",")}
    return headers


def from_file(response: Response) -> bool:
    """Whether nginx answered from a file (what it proxies carries its cache status)."""
    return response.header("X-Cache-Status") is None


def write(feed: Feed, count: int) -> None:
    for n in range(feed.last_seq, feed.last_seq + count):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(Feed.objects.get(pk=feed.pk))


def settle_and_export() -> None:
    """As if the pages were sealed a minute ago (their Last-Modified has passed), then the
    sealer's export pass."""
    ArchivePage.objects.update(modified=F("modified") - timedelta(minutes=1))
    export.export_pending(limit=None)


def wait_and_export() -> None:
    """The sealer's export pass once the pages' Last-Modified second has come (real time:
    what keeps a page's versions apart by date)."""
    newest = max(ArchivePage.objects.values_list("modified", flat=True))
    time.sleep(max(0.0, base.visible_second(newest) - time.time() + 0.01))
    assert export.export_pending(limit=None)


def urls(numbers) -> list[str]:
    return [f"/feeds/served/archives/{n}/{twin}" for n in numbers for twin in ("", "rss/")]


def test_nginx_serves_exported_pages_with_feedpubs_bytes_and_headers(served):
    write(FeedFactory(slug="served", page_size=3), 9)  # pages 1, 2 final, 3 open
    settle_and_export()
    for url in urls([1, 2, 3]):
        for headers in ({}, GZIP):
            nginx, django = served.request(url, headers), from_django(served, url, headers)
            assert from_file(nginx), url
            assert nginx.status == django.status == 200
            assert nginx.body == django.body
            assert headers_of(nginx) == headers_of(django), url
            assert nginx.header("Accept-Ranges") is None
    page_3 = served.request("/feeds/served/archives/3/", GZIP)
    assert page_3.header("Cache-Control") == "public, max-age=60"
    assert b'rel="next-archive"' not in gzip.decompress(page_3.body)
    assert served.request("/feeds/served/archives/2/").header("Cache-Control") \
        == "public, max-age=31536000, immutable"


def test_each_answers_the_others_validators_with_304(served):
    write(FeedFactory(slug="served", page_size=3), 7)
    settle_and_export()
    for url in urls([1, 2]):
        for headers in ({}, GZIP):
            etag = from_django(served, url, headers).header("ETag")
            again = served.request(url, {**headers, "If-None-Match": etag})
            assert from_file(again)
            assert again.status == 304
            etag = served.request(url, headers).header("ETag")
            assert from_django(served, url, {**headers, "If-None-Match": etag}).status == 304
    # A plain copy's ETag never matches the gzip one, nor the other way round.
    plain = served.request("/feeds/served/archives/1/").header("ETag")
    assert served.request("/feeds/served/archives/1/", {**GZIP, "If-None-Match": plain}) \
        .status == 200


def test_feedpub_answers_what_has_no_file_and_what_people_ask_for(served, pages_dir):
    write(FeedFactory(slug="served", page_size=3), 7)
    settle_and_export()
    (pages_dir / "feeds/served/archives/1/index.xml").unlink()
    missing = served.request("/feeds/served/archives/1/")
    assert not from_file(missing)
    assert headers_of(missing) == headers_of(from_django(served, "/feeds/served/archives/1/"))
    for headers, path in (({"Accept": "text/html,application/xhtml+xml"}, ""),
                          ({}, "?format=html"),
                          ({"Accept": "application/atom+xml, text/html;q=0.5"}, "")):
        answer = served.request("/feeds/served/archives/2/" + path, headers)
        assert not from_file(answer), (headers, path)
        assert answer.status == 200
    assert served.request("/feeds/served/archives/2/?format=html").header(
        "Content-Type").startswith("text/html")
    # A page that does not exist: feedpub's own 404 (not nginx's, nor its error_page's).
    missing, django = (served.request("/feeds/served/archives/9/"),
                       from_django(served, "/feeds/served/archives/9/"))
    assert missing.status == django.status == 404
    assert missing.body == django.body
    assert missing.header("Content-Type") == django.header("Content-Type")


def test_a_page_gaining_its_next_link_is_served_final_from_its_new_file(served, pages_dir,
                                                                      settings):
    settings.FEEDPUB_LAST_MODIFIED_SETTLE = 0
    feed = FeedFactory(slug="served", page_size=3)
    write(feed, 6)  # page 2 is the open page
    wait_and_export()
    open_copy = served.request("/feeds/served/archives/2/")
    assert from_file(open_copy)
    assert b'rel="next-archive"' not in open_copy.body

    write(Feed.objects.get(pk=feed.pk), 3)  # page 3 sealed: page 2 gains next-archive
    # Its open file is gone with the commit: feedpub answers until the final file exists.
    assert not (pages_dir / "feeds/served/archives/2/open.xml").exists()
    meanwhile = served.request("/feeds/served/archives/2/")
    assert not from_file(meanwhile)
    assert b'rel="next-archive"' in meanwhile.body
    assert served.request("/feeds/served/archives/2/",
                          {"If-None-Match": open_copy.header("ETag")}).status == 200

    wait_and_export()
    final = served.request("/feeds/served/archives/2/")
    assert from_file(final)
    assert final.header("Cache-Control") == "public, max-age=31536000, immutable"
    assert b'rel="next-archive"' in final.body
    assert headers_of(final) == headers_of(from_django(served, "/feeds/served/archives/2/"))
    assert final.header("ETag") != open_copy.header("ETag")
    assert final.header("Last-Modified") != open_copy.header("Last-Modified")
    for validator in ({"If-None-Match": open_copy.header("ETag")},
                      {"If-Modified-Since": open_copy.header("Last-Modified")}):
        assert served.request("/feeds/served/archives/2/", validator).status == 200


NUMBERS = [1, 2, 9, 10, 11, 19, 99, 100, 101, 109, 990, 999, 1000, 1009, 1299, 9999,
           10000, 123456789, 999999999, 1000000000, 1999999999, 2147483646, 2147483647]


def test_nginx_spells_prev_and_next_archive_as_feedpub_does(served):
    """The Link header's n - 1 and n + 1, which nginx spells with maps, for final and open
    pages of many numbers (rows stored directly: sealing 2**31 pages takes a while)."""
    feed = FeedFactory(slug="served", page_size=3)
    write(feed, 3)
    sealed = ArchivePage.objects.get(feed=feed, number=1)
    for number in NUMBERS[1:]:
        ArchivePage.objects.create(
            feed=feed, number=number, first_seq=1, last_seq=3, first_updated=sealed.first_updated,
            last_updated=sealed.last_updated, body=sealed.body, etag=sealed.etag,
            has_next=number % 2 == 1, rss=sealed.rss, multipart=sealed.multipart)
    settle_and_export()
    for url in urls(NUMBERS):
        nginx, django = served.request(url), from_django(served, url)
        assert from_file(nginx), url
        assert nginx.header("Link") == django.header("Link"), url
        assert nginx.header("Cache-Control") == django.header("Cache-Control"), url


def test_a_file_gone_when_nginx_opens_it_is_answered_by_feedpub(served, pages_dir):
    """try_files finds open.xml, which sealing removes before nginx opens it (the page
    has just gained its next link): feedpub answers, never a 404. Timed for real that
    race is rare; a FIFO in the file's place fails the same way every time (try_files
    accepts any name that is not a directory, the static module answers 404 for what is
    not a regular file)."""
    write(FeedFactory(slug="served", page_size=3), 7)  # page 2 open
    settle_and_export()
    name = pages_dir / "feeds/served/archives/2/open.xml"
    name.unlink()
    os.mkfifo(name)
    answer, django = (served.request("/feeds/served/archives/2/"),
                      from_django(served, "/feeds/served/archives/2/"))
    assert not from_file(answer)
    assert answer.status == django.status == 200
    assert answer.body == django.body


def https_nginx(live_server, tmp_path, pages_dir, secure: dict[str, str]) -> Nginx:
    """nginx behind a TLS terminator on 127.0.0.1 (trusted: its X-Forwarded-Proto)."""
    def trust_localhost(text: str) -> str:
        return text.replace("    default 0;\n", "    default 0;\n    127.0.0.1 1;\n", 1)

    return Nginx(tmp_path / "nginx-https", f"127.0.0.1:{live_server.thread.port}",
                 pages_dir=pages_dir, secure=secure, edit=trust_localhost).start()


def test_pages_from_files_carry_feedpubs_https_headers(live_server, settings, tmp_path,
                                                       pages_dir, transactional_db, client):
    """Over https, the Strict-Transport-Security feedpub sends (its SECURE_HSTS_*
    settings, mirrored by the template's variables), and plain http, which feedpub
    redirects to https (SECURE_SSL_REDIRECT), left to feedpub."""
    require_nginx()
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = False
    nginx = https_nginx(live_server, tmp_path, pages_dir, secure_variables(settings))
    try:
        settings.FEEDPUB_BASE_URL = nginx.url
        write(FeedFactory(slug="served", page_size=3), 7)
        settle_and_export()
        for url in urls([1, 2]):
            over_https = nginx.request(url, {"X-Forwarded-Proto": "https"})
            assert from_file(over_https), url
            # (the live server's middleware keeps the settings it started with; the test
            # client's reads these)
            django = client.get(url, headers={"X-Forwarded-Proto": "https"})
            assert over_https.header("Strict-Transport-Security") \
                == django["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
            for name in SECURITY:
                assert over_https.header(name) == django.get(name), name
            over_http = nginx.request(url, {"X-Forwarded-Proto": "http"})
            assert not from_file(over_http), url  # feedpub's to answer: a redirect
            assert client.get(url, headers={"X-Forwarded-Proto": "http"}).status_code == 301
            assert over_http.header("Strict-Transport-Security") is None
    finally:
        nginx.stop()


def test_without_https_redirect_plain_http_is_served_from_files(live_server, settings,
                                                                tmp_path, pages_dir,
                                                                transactional_db):
    require_nginx()
    nginx = https_nginx(live_server, tmp_path, pages_dir, {
        "SSL_REDIRECT": "false", "HSTS_SECONDS": "0", "HSTS_INCLUDE_SUBDOMAINS": "true",
        "HSTS_PRELOAD": "true"})
    try:
        settings.FEEDPUB_BASE_URL = nginx.url
        write(FeedFactory(slug="served", page_size=3), 4)
        settle_and_export()
        for proto in ("http", "https"):
            answer = nginx.request("/feeds/served/archives/1/", {"X-Forwarded-Proto": proto})
            assert from_file(answer)
            assert answer.header("Strict-Transport-Security") is None  # HSTS_SECONDS 0
    finally:
        nginx.stop()
