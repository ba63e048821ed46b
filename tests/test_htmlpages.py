"""Pages for people: browsers get HTML at the feed, archive page and record URLs, feed
readers keep getting the same Atom bytes; the feed search; the activity chart."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import feedparser
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.module_loading import import_string
from lxml import etree, html

from archives.html import pages as html_pages
from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Entry
from archives.storage.snapshots import take_snapshot
from feedpub import urls

from .factories import FeedFactory, record_data

BASE = "http://127.0.0.1:8000"
CHROME = ("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
          "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7")
FIREFOX = ("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
           "image/png,image/svg+xml,*/*;q=0.8")
SAFARI = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
BROWSERS = [CHROME, FIREFOX, SAFARI]
FEED_READERS = [
    "application/atom+xml",
    "application/rss+xml, application/atom+xml;q=0.9, */*;q=0.1",
    "application/xml, text/xml, text/html",
    "application/atom+xml, text/html",
    "*/*",
    "text/*",
    "text/html;q=0",
    None,
]
DOCUMENTS = ["/feeds/books/", "/feeds/books/archives/1/", "/feeds/books/archives/2/",
             "/feeds/books/records/k1"]
SVG = "{http://www.w3.org/2000/svg}"


def varies_on(response) -> set[str]:
    return {name.strip() for name in response["Vary"].split(",")}


def get(client, url, accept=None, **headers):
    if accept is not None:
        headers["HTTP_ACCEPT"] = accept
    return client.get(url, **headers)


def page(response):
    assert response["Content-Type"] == "text/html; charset=utf-8"
    return html.fromstring(response.content)


def text(root) -> str:
    return " ".join(" ".join(root.itertext()).split())


# Negotiation --------------------------------------------------------------------------

@pytest.mark.parametrize("url", DOCUMENTS)
@pytest.mark.parametrize("accept", BROWSERS, ids=["chrome", "firefox", "safari"])
def test_browsers_get_a_page_for_people(client, sealed_feed, url, accept):
    response = get(client, url, accept)

    assert response.status_code == 200
    root = page(response)
    assert root.get("lang") == "en"
    assert "Books" in text(root)
    assert "Accept" in varies_on(response)
    assert response["Cache-Control"] == "public, max-age=60"


@pytest.mark.parametrize("url", DOCUMENTS)
@pytest.mark.parametrize("accept", FEED_READERS)
def test_feed_readers_get_the_same_atom_bytes(client, sealed_feed, url, accept):
    plain = client.get(url)
    response = get(client, url, accept)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/atom+xml")
    assert response.content == plain.content
    assert response["ETag"] == plain["ETag"]
    assert "Accept" in varies_on(response) & varies_on(plain)


@pytest.mark.parametrize("url", DOCUMENTS)
def test_format_atom_forces_the_same_atom_bytes_even_for_a_browser(client, sealed_feed, url):
    plain = client.get(url)
    forced = get(client, url + "?format=atom", CHROME)

    assert forced.content == plain.content
    assert forced["Content-Type"] == plain["Content-Type"]
    assert forced["ETag"] == plain["ETag"]


@pytest.mark.parametrize("url", DOCUMENTS)
def test_the_html_variant_has_its_own_etag_and_answers_304(client, sealed_feed, url):
    atom = client.get(url)
    first = client.get(url + "?format=html")
    again = client.get(url + "?format=html", HTTP_IF_NONE_MATCH=first["ETag"])
    browser = get(client, url, SAFARI, HTTP_IF_NONE_MATCH=first["ETag"])

    assert first["ETag"] != atom["ETag"]
    assert "Last-Modified" not in first  # revalidated by ETag only
    assert again.status_code == browser.status_code == 304
    assert "Accept" in varies_on(again) & varies_on(browser)
    assert client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200  # Atom


def test_the_feeds_page_changes_its_etag_with_the_feed(client, sealed_feed):
    before = client.get("/feeds/books/?format=html")["ETag"]
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))

    response = client.get("/feeds/books/?format=html", HTTP_IF_NONE_MATCH=before)
    assert response.status_code == 200
    assert "Record 9" in text(page(response))


def test_json_and_gone_records_vary_on_accept_too(client, sealed_feed):
    as_json = get(client, "/feeds/books/records/k1", "application/json")
    gone = client.get("/feeds/books/records/k2")

    assert as_json["Content-Type"] == "application/json"
    assert "Accept" in varies_on(as_json) & varies_on(gone)
    assert gone.status_code == 410


def test_an_unknown_format_is_a_clear_400(client, sealed_feed):
    response = client.get("/feeds/books/?format=rss")

    assert response.status_code == 400
    assert "Unknown format 'rss'" in response.content.decode()
    assert "?format=html" in response.content.decode()


# The feed's page ----------------------------------------------------------------------

def test_the_feeds_page_shows_the_feed_its_newest_changes_and_its_pages(client, sealed_feed):
    root = page(client.get("/feeds/books/?format=html"))

    assert root.findtext(".//h1") == "Books"
    assert root.xpath("//link[@rel='alternate'][@type='application/atom+xml']/@href") == [
        f"{BASE}/feeds/books/"]
    rows = root.xpath("//h2[.='Newest changes']/following-sibling::table[1]/tbody/tr")
    # One entry is unsealed: the newest sealed ones fill the list, newest first.
    assert [row.findtext("td[1]") for row in rows] == ["7", "6", "5", "4", "3", "2", "1"]
    newest = rows[0]
    assert newest.xpath(".//a/@href")[:2] == [f"{BASE}/feeds/books/records/k2?format=html",
                                              f"{BASE}/feeds/books/?format=html"]
    assert "delete" in text(newest)
    assert rows[1].xpath(".//a/@href")[1] == f"{BASE}/feeds/books/archives/2/?format=html"
    pages = root.xpath("//h2[.='Archive pages']/following-sibling::table[1]/tbody/tr")
    assert [row.xpath(".//a/@href")[0] for row in pages] == [
        f"{BASE}/feeds/books/archives/2/?format=html",
        f"{BASE}/feeds/books/archives/1/?format=html"]
    assert "4–6" in text(pages[0])
    assert "2 archive pages (3 entries each)" in text(root)
    assert root.xpath("//img/@src") == [f"{BASE}/feeds/books/activity.svg"]


def test_the_feeds_page_lists_every_format(client, sealed_feed):
    take_snapshot(sealed_feed)
    root = page(client.get("/feeds/books/?format=html"))
    urls = root.xpath("//h2[.='Formats']/following-sibling::table[1]//code/text()")

    for path in ["/feeds/books/", "/feeds/books/pages/latest", "/feeds/books/snapshots/latest",
                 "/api/", "/feeds/books/complete/", "/feeds/books/paged/", "/feeds/books/rss/"]:
        assert f"{BASE}{path}" in urls
        assert client.get(path).status_code in (200, 302), path


def test_the_feeds_page_offers_no_snapshot_until_there_is_one(client, sealed_feed, settings):
    # "Not yet" is asked again once the page's max-age is over: here at once.
    settings.FEEDPUB_MAX_AGE = 0
    before = client.get("/feeds/books/?format=html")
    row = page(before).xpath("//h2[.='Formats']/following-sibling::table[1]"
                             "//tr[th='Snapshots']")[0]

    assert "snapshots/latest" not in before.content.decode()
    assert client.get("/feeds/books/snapshots/latest").status_code == 404
    assert text(row).startswith("Snapshots none yet")
    take_snapshot(sealed_feed)
    after = client.get("/feeds/books/?format=html", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200  # a new page, with a new ETag
    assert f"{BASE}/feeds/books/snapshots/latest" in after.content.decode()


def test_archive_pages_are_listed_in_pages_of_fifty(client, feed):
    for n in range(1, 3 * 52 + 1):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    seal_feed(feed)

    first = page(client.get("/feeds/books/?format=html"))
    second = page(client.get("/feeds/books/?format=html&page=2"))
    beyond = client.get("/feeds/books/?format=html&page=x")

    listed = "//h2[.='Archive pages']/following-sibling::table[1]/tbody/tr/td[1]/a/text()"
    assert first.xpath(listed) == [f"Page {n}" for n in range(52, 2, -1)]
    assert second.xpath(listed) == ["Page 2", "Page 1"]
    assert beyond.status_code == 200
    assert "older" in text(first)
    assert "newer" in text(second)


def test_the_index_links_each_feeds_page(client, sealed_feed):
    root = html.fromstring(client.get("/").content)
    assert root.xpath("//a[.='Books']/@href") == ["/feeds/books/?format=html"]


# Archive pages ------------------------------------------------------------------------

def test_an_archive_page_lists_the_atom_pages_entries_in_its_order(client, sealed_feed):
    atom = feedparser.parse(client.get("/feeds/books/archives/2/").content)
    root = page(client.get("/feeds/books/archives/2/?format=html"))
    rows = root.xpath("//table/tbody/tr")

    assert [row.xpath("td[3]/a/text()")[0] for row in rows] == [e.title for e in atom.entries]
    assert [row.findtext("td[1]") for row in rows] == ["6", "5", "4"]
    assert "Entries 4–6" in text(root)
    assert root.xpath("//a[@rel='prev']/@href") == [f"{BASE}/feeds/books/archives/1/?format=html"]
    assert root.xpath("//a[@rel='next']") == []
    assert f"{BASE}/feeds/books/archives/2/?format=atom" in root.xpath("//a/@href")


def test_an_archive_page_shows_deletions_as_such(client, feed):
    for n in range(1, 3):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    publishing.delete_record(feed=feed, key="k1")
    seal_feed(feed)
    root = page(client.get("/feeds/books/archives/1/?format=html"))

    newest = root.xpath("//table/tbody/tr")[0]
    assert newest.xpath("td[2]//text()") == ["delete"]
    assert "deleted" in text(newest)
    assert root.xpath("//a[@rel='next']") == []


# Record pages -------------------------------------------------------------------------

def test_a_record_page_shows_the_record_and_its_history(client, sealed_feed):
    root = page(client.get("/feeds/books/records/k1?format=html"))

    assert root.findtext(".//h1") == "Renamed"
    assert "Summary of record 1" in text(root)
    # {"n": 1, "tags": ["a", "b"]}: a list is a list, never a JSON dump.
    metadata = root.xpath("//h2[.='Metadata']/following-sibling::*[1]")[0]
    assert metadata.tag == "dl"
    assert metadata.xpath("dt/text()") == ["n", "tags"]
    assert metadata.xpath("dd[2]/ul/li/text()") == ["a", "b"]
    assert root.xpath("//pre") == []
    assert root.xpath("//a[.='Landing page']/@href") == ["https://example.org/records/1"]
    assert f"{BASE}/feeds/books/records/k1?format=json" in root.xpath("//a/@href")
    history = root.xpath("//h2[.='History']/following-sibling::table[1]/tbody/tr")
    assert [(row.findtext("td[1]"), row.xpath("td[5]/a/@href")[0]) for row in history] == [
        ("5", f"{BASE}/feeds/books/archives/2/?format=html"),
        ("1", f"{BASE}/feeds/books/archives/1/?format=html"),
    ]


def test_each_history_link_leads_to_the_page_that_holds_the_entry(client, sealed_feed):
    publishing.put_record(feed=sealed_feed, key="k1", data=record_data(1, title="Again"))
    root = page(client.get("/feeds/books/records/k1?format=html"))

    for row in root.xpath("//h2[.='History']/following-sibling::table[1]/tbody/tr"):
        seq, href = row.findtext("td[1]"), row.xpath("td[5]/a/@href")[0]
        holder = page(client.get(href.removeprefix(BASE)))
        # The feed's page lists its newest changes first; an archive page, only its own.
        listed = holder.xpath("//table[1]/tbody/tr/td[1]/text()")
        assert seq in listed


def test_a_flat_metadata_object_is_a_definition_list(client, feed):
    publishing.put_record(feed=feed, key="flat", data=record_data(
        1, metadata={"year": 1999, "open": True, "publisher": "Acme"}))
    root = page(client.get("/feeds/books/records/flat?format=html"))

    pairs = dict(zip(root.xpath("//dl[2]/dt/text()"), root.xpath("//dl[2]/dd/text()"),
                     strict=True))
    assert pairs == {"year": "1999", "open": "true", "publisher": "Acme"}


def test_a_deleted_records_page_is_gone_but_shows_its_history(client, sealed_feed):
    response = get(client, "/feeds/books/records/k2", FIREFOX)

    assert response.status_code == 410
    assert "Accept" in varies_on(response)
    root = page(response)
    assert "was deleted" in text(root)
    history = root.xpath("//h2[.='History']/following-sibling::table[1]/tbody/tr/td[2]//text()")
    assert history == ["delete", "create"]


def test_producer_text_is_shown_as_text(client, feed):
    evil = '<script>alert(1)</script>'
    data = record_data(1, title=evil, summary=f"<img src=x onerror=alert(1)> {evil}",
                       metadata={"note": evil},
                       links=[{"href": "urn:isbn:0451450523", "rel": "related", "title": evil}])
    publishing.put_record(feed=feed, key="evil", data=data)
    publishing.put_record(feed=feed, key="evil", data={**data, "metadata": {"note": [evil]}})
    publishing.put_record(feed=feed, key="other", data=record_data(3))
    seal_feed(feed)

    for url in ["/feeds/books/?format=html", "/feeds/books/archives/1/?format=html",
                "/feeds/books/records/evil?format=html", "/feeds/books/search?q=script"]:
        root = html.fromstring(client.get(url).content)
        assert root.xpath("//script | //img[@onerror]") == [], url
        assert evil in text(root), url
    record = html.fromstring(client.get("/feeds/books/records/evil?format=html").content)
    # A link that is not http(s) is shown, not followed.
    assert "urn:isbn:0451450523" in text(record)
    assert not [href for href in record.xpath("//a/@href") if href.startswith("urn:")]


# Search -------------------------------------------------------------------------------

def test_search_finds_records_by_key_or_title_live_or_deleted(client, sealed_feed):
    root = page(client.get("/feeds/books/search?q=K2"))
    rows = root.xpath("//table/tbody/tr")

    assert [(row.findtext("td[2]/code"), row.findtext("td[3]")) for row in rows] == [
        ("k2", "deleted")]
    assert rows[0].xpath(".//a/@href") == [f"{BASE}/feeds/books/records/k2?format=html"]
    by_title = page(client.get("/feeds/books/search?q=renam"))
    assert by_title.xpath("//table/tbody/tr/td[2]/code/text()") == ["k1"]
    assert by_title.xpath("//table/tbody/tr/td[3]/text()") == ["live"]


def test_search_ignores_accents_and_case_and_looks_in_summaries(client, feed):
    publishing.put_record(feed=feed, key="chc", data=record_data(
        1, title="Ōtautahi Christchurch", summary="Rivers of Waitaha"))
    publishing.put_record(feed=feed, key="orl", data=record_data(
        2, title="Orleans", summary="Loire valley, near Blois"))
    publishing.put_record(feed=feed, key="zur", data=record_data(
        3, title="Zurich", summary="Straße and SEE: Zürichsee, not Łódź"))

    def found(query):
        return page(client.get("/feeds/books/search", {"q": query})).xpath(
            "//table/tbody/tr/td[2]/code/text()")

    assert found("otautahi") == ["chc"]  # the person types no macron
    assert found("ŌTAUTAHI") == ["chc"]
    assert found("orléans") == ["orl"]  # nor must the record have one to be found with it
    assert found("waitaha") == ["chc"]  # the summary
    assert found("ZURICHSEE") == ["zur"]
    assert found("strasse") == ["zur"]
    assert found("lodz") == ["zur"]
    assert found("orleans loire") == []  # a match never spans the title and the summary
    assert found("c_c") == []  # the query's own LIKE wildcards are only characters
    assert found("%") == []
    says = text(page(client.get("/feeds/books/search", {"q": "otautahi"})))
    assert "1 record whose key, title or summary contain “otautahi”" in says
    says = text(page(client.get("/feeds/books/search", {"q": "ch"})))
    assert "whose key or title contain “ch”" in says  # too short for the index


def test_search_pages_its_results(client, feed):
    publishing.apply_batch(feed=feed, operations=[
        {"op": "put", "key": f"item-{n:03}", "record": record_data(n)} for n in range(120)])
    first = page(client.get("/feeds/books/search?q=item"))
    third = page(client.get("/feeds/books/search?q=item&page=3"))

    assert "120 records" in text(first)
    assert len(first.xpath("//table/tbody/tr")) == 50
    assert third.xpath("//table/tbody/tr/td[2]/code/text()") == [
        f"item-{n:03}" for n in range(100, 120)]


@pytest.mark.parametrize(("query", "status", "says"), [
    ("", 200, "Type part of a record"),
    ("   ", 200, "Type part of a record"),
    ("x" * 201, 400, "at most 200"),
    ("nothing-like-it", 200, "0 records"),
    ("a\x00b", 400, "U+0000"),  # PostgreSQL would refuse it in a query
])
def test_search_explains_what_it_cannot_do(client, sealed_feed, query, status, says):
    response = client.get("/feeds/books/search", {"q": query})

    assert response.status_code == status
    assert says in text(page(response))


def test_search_says_when_there_are_more_matches_than_it_lists(client, feed, monkeypatch):
    monkeypatch.setattr(html_pages, "SEARCH_LIMIT", 3)
    for n in range(3):
        publishing.put_record(feed=feed, key=f"item-{n}", data=record_data(n))

    exactly = text(page(client.get("/feeds/books/search", {"q": "item-"})))
    publishing.put_record(feed=feed, key="item-9", data=record_data(9))
    more = text(page(client.get("/feeds/books/search", {"q": "item-"})))

    assert "longer search" not in exactly
    assert "longer search" in more


def test_search_of_an_unknown_feed_is_404(client, db):
    assert client.get("/feeds/nope/search?q=a").status_code == 404


# The activity chart -------------------------------------------------------------------

def chart_counts(body: bytes) -> tuple[dict[str, int], dict[str, int], int]:
    """What the chart shows: its legend's totals, the sum of its bars (their tooltips), and
    how many bars it has."""
    svg = etree.fromstring(body)
    assert svg.tag == f"{SVG}svg"
    legend = {kind: int(n) for kind, n in
              (re.fullmatch(r"(\w+) \((\d+)\)", t).groups()
               for t in svg.xpath("./s:text/text()", namespaces={"s": SVG[1:-1]})
               if re.fullmatch(r"\w+ \(\d+\)", t))}
    bars = svg.findall(f"{SVG}g")
    summed = dict.fromkeys(legend, 0)
    for bar in bars:
        for n, kind in re.findall(r"(\d+) (\w+)", bar.findtext(f"{SVG}title").split(": ")[1]):
            summed[kind] += int(n)
    return legend, summed, len(bars)


def write_over_days(feed, days: int, per_day: int, monkeypatch):
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for day in range(days):
        monkeypatch.setattr(timezone, "now", lambda day=day: start + timedelta(days=day))
        for n in range(per_day):
            key = f"k{n}"
            if day % 3 == 2 and n == 0:
                publishing.delete_record(feed=feed, key=key)
            else:
                publishing.put_record(feed=feed, key=key, data=record_data(n, title=f"{day}"))


def expected(feed) -> dict[str, int]:
    counts = {"created": 0, "updated": 0, "deleted": 0}
    for kind in Entry.objects.filter(feed=feed).values_list("kind", flat=True):
        counts[{"create": "created", "update": "updated", "delete": "deleted"}[kind]] += 1
    return counts


def test_the_chart_counts_each_kind_per_day(client, feed, monkeypatch):
    write_over_days(feed, days=10, per_day=3, monkeypatch=monkeypatch)
    response = client.get("/feeds/books/activity.svg")

    assert response["Content-Type"] == "image/svg+xml"
    assert response["Cache-Control"] == "public, max-age=60"
    legend, summed, bars = chart_counts(response.content)
    assert legend == summed == expected(feed)
    assert expected(feed)["deleted"] > 0
    assert bars == 10
    assert "per day" in response.content.decode()


def test_a_long_lived_feeds_chart_has_weeks_or_months_not_a_bar_a_day(client, feed, monkeypatch):
    write_over_days(feed, days=400, per_day=1, monkeypatch=monkeypatch)
    legend, summed, bars = chart_counts(client.get("/feeds/books/activity.svg").content)

    assert legend == summed == expected(feed)
    assert 52 <= bars <= 60  # weeks


def test_the_chart_is_revalidated_by_etag_and_changes_with_the_feed(client, feed):
    empty = client.get("/feeds/books/activity.svg")
    assert "No entries yet" in empty.content.decode()
    assert client.get("/feeds/books/activity.svg",
                      HTTP_IF_NONE_MATCH=empty["ETag"]).status_code == 304
    publishing.put_record(feed=feed, key="k1", data=record_data(1))

    changed = client.get("/feeds/books/activity.svg", HTTP_IF_NONE_MATCH=empty["ETag"])
    assert changed.status_code == 200
    assert chart_counts(changed.content)[0] == {"created": 1, "updated": 0, "deleted": 0}


def test_after_a_write_the_chart_counts_only_what_is_new(client, feed, monkeypatch):
    write_over_days(feed, days=10, per_day=3, monkeypatch=monkeypatch)
    seal_feed(feed)
    client.get("/feeds/books/activity.svg")
    counted_before = feed.last_seq
    for n in range(4):  # a page more is sealed, and one entry is left unsealed
        publishing.put_record(feed=feed, key=f"late{n}", data=record_data(n))
    seal_feed(feed)
    feed.refresh_from_db()

    with CaptureQueriesContext(connection) as queries:
        legend, summed, _ = chart_counts(client.get("/feeds/books/activity.svg").content)

    assert legend == summed == expected(feed)
    assert feed.sealed_pages > 1
    counted = [q["sql"] for q in queries.captured_queries if "COUNT" in q["sql"].upper()]
    lower_bounds = [re.search(r'"seq" >= (\d+)', sql) for sql in counted]
    assert counted
    assert all(bound and int(bound[1]) > counted_before for bound in lower_bounds)


def test_the_admins_feed_page_shows_the_chart(admin_client, feed):
    other = FeedFactory(slug="films")
    response = admin_client.get(f"/admin/archives/feed/{feed.pk}/change/")

    root = html.fromstring(response.content)
    assert root.xpath("//img/@src") == [f"{BASE}/feeds/books/activity.svg"]
    assert other.slug not in " ".join(root.xpath("//img/@src"))
    assert admin_client.get("/admin/archives/feed/add/").status_code == 200


def test_a_rendered_page_is_served_again_without_rendering_until_it_changes(client, sealed_feed):
    first = client.get("/feeds/books/?format=html")
    with CaptureQueriesContext(connection) as queries:
        again = client.get("/feeds/books/?format=html")

    assert again.content == first.content
    assert len(queries) == 1  # the feed's row, for the ETag
    publishing.put_record(feed=sealed_feed, key="k9", data=record_data(9))
    assert "Record 9" in text(page(client.get("/feeds/books/?format=html")))


@pytest.mark.parametrize("url", ["/feeds/books/?format=html",
                                 "/feeds/books/records/k1?format=html"])
def test_one_page_shown_is_one_etag_however_it_is_asked_for(client, sealed_feed, url):
    etags = {client.get(url + suffix)["ETag"]
             for suffix in ("", "&page=1", "&page=01", "&page=x", "&page=999")}

    assert len(etags) == 1


@pytest.mark.parametrize(("accept", "content_type"), [
    ("application/json", "application/json"),
    ("application/atom+xml;q=0.5, application/json", "application/json"),
    ("*/*, application/json", "application/atom+xml; type=entry; charset=utf-8"),
    ("application/atom+xml, application/json", "application/atom+xml; type=entry; charset=utf-8"),
    ("text/html, application/json", "text/html; charset=utf-8"),
])
def test_the_record_url_goes_by_the_same_rule_for_json(client, sealed_feed, accept,
                                                       content_type):
    assert get(client, "/feeds/books/records/k1", accept)["Content-Type"] == content_type


def test_the_feed_urls_do_not_answer_json(client, sealed_feed):
    response = get(client, "/feeds/books/", "application/json")

    assert response["Content-Type"].startswith("application/atom+xml")


# Error pages ---------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "says"), [
    ("/no/such/page", None),
    ("/feeds/nothing/?format=html", "No feed 'nothing'"),
    ("/feeds/books/archives/99/?format=html", "Feed 'books' has no archive page 99"),
])
def test_a_404_is_a_page_of_the_site(client, sealed_feed, settings, url, says):
    settings.DEBUG = False
    response = client.get(url)

    root = page(response)
    assert response.status_code == 404
    assert root.findtext(".//h1") == "Not found"
    assert root.xpath("//header[@class='site']//a[@href='/']")  # the site's own header
    assert "max-width:64rem" in root.findtext(".//style")  # and its style
    assert root.xpath("//main//a[.='list of feeds']/@href") == ["/"]
    notice = root.xpath("string(//p[@class='notice'])")
    assert notice == (says or "")
    assert "Resolver404" not in text(root)


def test_a_500_is_a_page_of_the_site(rf, settings):
    settings.DEBUG = False
    handler = import_string(urls.handler500)

    response = handler(rf.get("/feeds/books/"))

    root = page(response)
    assert response.status_code == 500
    assert root.findtext(".//h1") == "Something went wrong on our side"
    assert "max-width:64rem" in root.findtext(".//style")
