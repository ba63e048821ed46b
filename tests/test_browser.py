"""A real browser (headless Chromium) reads the pages for people from the live server:
with its own Accept header, so these also prove that a browser is given HTML at the very
URLs feed readers get Atom from. Screenshots go to /tmp/feedpub-shots/ for a person to look at.

Without Chromium these tests skip; with FEEDPUB_REQUIRE_CHROMIUM set (.ci/run sets it) they
fail instead, so that CI never passes without having run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlencode, urljoin

import pytest
from lxml import html

from archives.log import publishing
from archives.log.sealing import seal_feed
from archives.models import Feed

from .external import require
from .factories import record_data
from .test_schema_documents import METADATA, SCHEMA

# Screenshots for a person to look at after a run (FEEDPUB_SHOTS_DIR moves them).
SHOTS = Path(os.environ.get("FEEDPUB_SHOTS_DIR", "/tmp/feedpub-shots"))  # noqa: S108
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]



@pytest.fixture(scope="session")
def chromium_binary() -> str:
    return require(shutil.which("chromium") or shutil.which("chromium-browser"),
                   name="chromium", install="chromium")


@pytest.fixture
def browser(chromium_binary, tmp_path):
    """Runs Chromium on a URL: `dump(url)` is the DOM it built, `shoot(url, name)` a PNG."""
    profile = tmp_path / "profile"

    def run(*args: str) -> str:
        done = subprocess.run(  # noqa: S603 (our own arguments)
            [chromium_binary, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=120, check=True)
        return done.stdout

    class Browser:
        @staticmethod
        def dump(url: str):
            return html.fromstring(run("--dump-dom", url))

        @staticmethod
        def shoot(url: str, name: str) -> Path:
            SHOTS.mkdir(exist_ok=True)
            path = SHOTS / f"{name}.png"
            path.unlink(missing_ok=True)
            run(f"--screenshot={path}", "--window-size=1280,900", url)
            return path

    return Browser


@pytest.fixture
def site(live_server, settings, transactional_db):
    """A feed with sealed pages, a deletion and a hostile title, served by the live server
    (whose address is the base URL of every link)."""
    settings.FEEDPUB_BASE_URL = live_server.url
    feed = publishing.create_feed(slug="books", title="Books of the world",
                                  subtitle="A test catalogue", page_size=3, language="en-GB")
    for n in range(1, 6):
        publishing.put_record(feed=feed, key=f"book-{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="book-1", data=record_data(
        1, title="<script>alert(1)</script> Renamed", metadata={"year": 1999, "pages": 320}))
    publishing.delete_record(feed=feed, key="book-2")
    seal_feed(feed)
    return Feed.objects.get(slug="books"), live_server.url


def visible(element) -> str:
    """The text a person reads in an element (of a page: its body, not its <style>)."""
    body = element.find("body")
    return " ".join(" ".join((element if body is None else body).itertext()).split())


def test_a_browser_gets_the_feeds_page_at_the_feed_url(browser, site):
    feed, base = site
    root = browser.dump(f"{base}/feeds/books/")

    assert root.get("lang") == "en-GB"
    assert root.findtext(".//h1") == "Books of the world"
    assert "A test catalogue" in visible(root)
    assert root.xpath("//script") == []
    assert "<script>alert(1)</script> Renamed" in visible(root)
    assert root.xpath("//link[@type='application/atom+xml']/@href") == [f"{base}/feeds/books/"]
    pages = root.xpath("//h2[.='Archive pages']/following-sibling::table[1]//a/@href")
    assert pages == [f"{base}/feeds/books/archives/2/?format=html",
                     f"{base}/feeds/books/archives/1/?format=html"]
    assert browser.shoot(f"{base}/feeds/books/", "feed").stat().st_size > 10_000


def test_its_links_lead_to_archive_and_record_pages(browser, site):
    feed, base = site
    front = browser.dump(f"{base}/feeds/books/")
    archive_href = front.xpath("//a[.='Page 1']/@href")[0]
    archive = browser.dump(archive_href)

    assert "Archive page 1" in visible(archive)
    assert archive.xpath("//table/tbody/tr/td[1]/text()") == ["3", "2", "1"]
    record_href = archive.xpath("//table/tbody/tr[3]//a/@href")[0]  # entry 1: book-1
    record = browser.dump(record_href)
    assert record.findtext(".//h1") == "<script>alert(1)</script> Renamed"
    assert dict(zip(record.xpath("//dl[2]/dt/text()"), record.xpath("//dl[2]/dd/text()"),
                    strict=True)) == {"year": "1999", "pages": "320"}
    history = record.xpath("//h2[.='History']/following-sibling::table[1]/tbody/tr/td[1]/text()")
    assert history == ["6", "1"]
    assert browser.shoot(archive_href, "archive").stat().st_size > 10_000
    assert browser.shoot(record_href, "record").stat().st_size > 10_000


def test_a_deleted_records_page_says_so(browser, site):
    feed, base = site
    root = browser.dump(f"{base}/feeds/books/records/book-2")

    assert "was deleted" in visible(root)
    assert root.xpath("//h2[.='History']/following-sibling::table[1]/tbody/tr/td[2]//text()") \
        == ["delete", "create"]


def test_the_search_form_finds_a_record(browser, site):
    feed, base = site
    front = browser.dump(f"{base}/feeds/books/")
    form = front.xpath("//form[@role='search']")[0]
    field = form.xpath(".//input[@type='search']")[0]
    assert form.get("method") == "get"
    # What the browser requests when a person types "renamed" and presses Search.
    results = browser.dump(urljoin(f"{base}/feeds/books/", form.get("action"))
                           + "?" + urlencode({field.get("name"): "renamed"}))

    rows = results.xpath("//table/tbody/tr")
    assert [row.xpath("td[2]/code/text()")[0] for row in rows] == ["book-1"]
    assert "live" in visible(rows[0])
    found = browser.dump(rows[0].xpath(".//a/@href")[0])
    assert found.findtext(".//h1") == "<script>alert(1)</script> Renamed"


def test_the_activity_chart_renders(browser, site):
    feed, base = site
    root = browser.dump(f"{base}/feeds/books/activity.svg")

    assert "created (5)" in " ".join(root.itertext())
    assert browser.shoot(f"{base}/feeds/books/activity.svg", "chart").stat().st_size > 3_000


def test_the_home_page_links_each_feeds_formats_the_admin_and_the_api_docs(browser, site):
    feed, base = site
    root = browser.dump(f"{base}/")

    row = root.xpath("//tbody/tr[.//code[.='books']]")[0]
    hrefs = {a.text: urljoin(f"{base}/", a.get("href")) for a in row.xpath(".//a")}
    assert hrefs["Books of the world"] == f"{base}/feeds/books/?format=html"
    assert [hrefs[name] for name in ("Atom", "RSS", "complete", "paged", "linked pages")] == [
        f"{base}/feeds/books/", f"{base}/feeds/books/rss/", f"{base}/feeds/books/complete/",
        f"{base}/feeds/books/paged/", f"{base}/feeds/books/pages/latest"]
    assert visible(row.xpath(".//time")[0]).endswith(" UTC")
    site_links = root.xpath("//nav[@aria-label='Site']//a/@href")
    assert site_links == ["/admin/", "/api/schema/swagger-ui/", "/api/"]
    people = browser.dump(hrefs["Books of the world"])
    assert people.findtext(".//h1") == "Books of the world"
    assert browser.shoot(f"{base}/", "home").stat().st_size > 10_000


# What fits a phone: the document's width, as Chromium lays it out at 390 px.
PHONE = {"width": 390, "height": 844}
SCROLL_WIDTH = """() => ({width: document.documentElement.scrollWidth,
    wider: [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
        .slice(0, 5).map(e => e.tagName + ' ' + e.textContent.trim().slice(0, 40))})"""


def playwright_page(chromium_binary, monkeypatch, viewport: dict):
    """A Chromium page of `viewport`, driven by Playwright."""
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop; the test's own ORM calls are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_binary,
                                             args=["--no-sandbox", "--disable-gpu"])
        yield browser.new_page(viewport=viewport)
        browser.close()


@pytest.fixture
def phone(chromium_binary, monkeypatch):
    """A Chromium page 390 px wide (an iPhone's), driven by Playwright."""
    yield from playwright_page(chromium_binary, monkeypatch, PHONE)


@pytest.fixture
def desktop(chromium_binary, monkeypatch):
    """A Chromium page 1280 px wide, driven by Playwright."""
    yield from playwright_page(chromium_binary, monkeypatch, {"width": 1280, "height": 900})


@pytest.fixture
def catalogue(site):
    """Beside the books, a feed whose records have a schema (a research-data catalogue's,
    from tests/test_schema_documents.py), with one record checked under it."""
    feed = publishing.create_feed(slug="data", title="Research data", record_schema=SCHEMA,
                                  language="en-GB")
    publishing.put_record(feed=feed, key="sea", data=record_data(
        1, title="Salinity of the North Sea", metadata=METADATA))
    return site[1]


def test_every_page_fits_a_390_px_screen(site, catalogue, phone):
    feed, base = site
    # What makes a page wide: a long unbroken key, a long metadata name, many entries.
    long_key = "survey-" + "x" * 150
    publishing.put_record(feed=feed, key=long_key, data=record_data(
        9, metadata={"a_metadata_field_name_without_any_space_in_it": "value"}))
    pages = {
        "home": "/", "feed": "/feeds/books/", "archive": "/feeds/books/archives/1/",
        "record": "/feeds/books/records/book-1", "deleted": "/feeds/books/records/book-2",
        "long-key": f"/feeds/books/records/{long_key}",
        "search": "/feeds/books/search?q=book", "search-long": "/feeds/books/search?q=survey",
        "not-found": "/feeds/nothing/", "schema-record": "/feeds/data/records/sea",
    }
    SHOTS.mkdir(exist_ok=True)
    for name, path in pages.items():
        phone.goto(base + path)
        width = phone.evaluate(SCROLL_WIDTH)
        assert width["width"] <= PHONE["width"], (name, width)
        phone.screenshot(path=SHOTS / f"phone-{name}.png", full_page=True)
    phone.goto(f"{base}/feeds/books/")
    search = phone.locator("form[role=search]")
    assert search.bounding_box()["width"] <= PHONE["width"]
    search.locator("input[type=search]").fill("renamed")
    with phone.expect_navigation():
        search.locator("button").click()
    assert phone.locator("tbody tr").count() == 1


def test_a_record_page_shows_its_metadata_by_its_schema(catalogue, desktop):
    base = catalogue
    desktop.goto(f"{base}/feeds/data/records/sea")  # with Chromium's own Accept

    metadata = desktop.locator("h2:text-is('Metadata') + dl")
    labels = metadata.locator(":scope > dt")
    assert labels.all_inner_texts() == [
        "Creators", "Date issued", "Last modified", "Subjects", "Licence", "Identifier",
        "version", "Funding", "note", "homepage"]
    assert all(labels.nth(n).is_visible() for n in range(labels.count()))
    # A description shows on hover (the browser's tooltip, from the label's title).
    assert labels.first.get_attribute("title") == "Who made the data set, first author first"
    values = metadata.locator(":scope > dd")
    subjects = values.nth(3).locator("li")
    assert subjects.all_inner_texts() == ["oceanography", "salinity"]
    assert subjects.nth(0).is_visible()
    assert subjects.nth(1).is_visible()
    # Each subject on a line of its own, one below the other.
    first, second = subjects.nth(0).bounding_box(), subjects.nth(1).bounding_box()
    assert second["y"] >= first["y"] + first["height"] - 1
    # The creators: a list of nested definition lists, inside the value's box.
    creator = values.nth(0).locator("li").first.locator("dl")
    assert creator.locator("dt").all_inner_texts() == ["Name", "ORCID iD"]
    inner, outer = creator.bounding_box(), values.nth(0).bounding_box()
    assert outer["x"] <= inner["x"]
    assert inner["x"] + inner["width"] <= outer["x"] + outer["width"]
    assert values.nth(1).inner_text() == "4 Mar 2021"  # the feed is en-GB
    assert values.nth(4).locator("a").get_attribute("href") == \
        "https://creativecommons.org/licenses/by/4.0/"
    SHOTS.mkdir(exist_ok=True)
    desktop.screenshot(path=SHOTS / "schema-record.png", full_page=True)
