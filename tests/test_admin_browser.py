"""The admin in a real browser (headless Chromium at 1280 x 900, driven by Playwright): a
person logs in, creates a feed and records, makes the usual mistakes and reads the
messages, follows the links from a feed to its records, entries and documents, and no list
is cut off. Screenshots go to /tmp/feedpub-admin-shots/ for a person to look at.

Without Chromium (or Playwright) these tests skip; with FEEDPUB_REQUIRE_CHROMIUM set they
fail instead (tests/external.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from archives.admin.helpers import feed_label
from archives.log import publishing
from archives.models import Feed, Record

from .external import require
from .factories import record_data

SHOTS = Path(os.environ.get("FEEDPUB_ADMIN_SHOTS_DIR", "/tmp/feedpub-admin-shots"))  # noqa: S108
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
# Whether a list's table is wider than its box (cut off, or scrolled sideways).
OVERFLOW = """() => {
    const box = document.querySelector('#changelist .results');
    const cells = [...document.querySelectorAll('#result_list thead th')];
    return {scroll: box.scrollWidth, client: box.clientWidth,
            right: Math.max(...cells.map(c => c.getBoundingClientRect().right))};
}"""


@pytest.fixture
def browser_page(live_server, transactional_db, settings, monkeypatch):
    """A logged-in admin page in Chromium, against the live server."""
    chromium = require(shutil.which("chromium"), name="chromium", install="chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop; Django's ORM calls from the test are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    settings.FEEDPUB_BASE_URL = live_server.url
    User.objects.create_superuser("keeper", "keeper@example.org", "a-long-secret-1")
    SHOTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "keeper")
        page.fill("#id_password", "a-long-secret-1")
        page.click("input[type=submit]")
        page.base = live_server.url
        yield page
        browser.close()


def add_record(page, *, key: str, title: str = "A record", summary: str = "",
               metadata: str = "{}"):
    page.goto(f"{page.base}/admin/archives/record/add/")
    page.select_option("#id_feed", label=feed_label(Feed.objects.get(slug="books")))
    page.fill("#id_key", key)
    page.fill("#id_title", title)
    page.fill("#id_summary", summary)
    page.fill("#id_metadata", metadata)
    with page.expect_navigation():
        page.click("input[name=_save]")


def errors(page) -> str:
    return " ".join(page.locator(".errorlist li").all_inner_texts())


def fits(page) -> None:
    width = page.evaluate(OVERFLOW)
    assert width["scroll"] <= width["client"], width
    assert width["right"] <= 1280, width


def test_a_keeper_creates_a_feed_and_records_and_is_told_each_mistake(browser_page):
    page = browser_page
    page.goto(f"{page.base}/admin/archives/feed/add/")
    page.fill("#id_slug", "books")
    page.fill("#id_title", "Books of the world")
    page.fill("#id_page_size", "3")
    with page.expect_navigation():
        page.click("input[name=_save]")
    assert Feed.objects.get(slug="books").page_size == 3

    add_record(page, key="k" * 201)
    assert errors(page) == "A key has at most 200 characters (it has 201)."
    assert page.input_value("#id_key") == "k" * 201  # not cut by the field

    add_record(page, key="k1", metadata='{\n  "year": 1813\n  "x": 1\n}')
    assert "Invalid JSON at line 3, column 3" in errors(page)
    page.screenshot(path=SHOTS / "record-form-error.png")

    add_record(page, key="k1", summary="tab \x0b inside")
    assert "Character U+000B at position 5 is not allowed in XML." in errors(page)

    add_record(page, key="k1", metadata='{"year": 1813}')
    record = Record.objects.get(key="k1")
    assert page.url.endswith(f"/admin/archives/record/{record.pk}/change/")
    assert page.input_value("#id_metadata") == '{\n  "year": 1813\n}'
    page.screenshot(path=SHOTS / "record-form.png", full_page=False)


def test_a_feed_links_to_its_records_entries_and_documents_and_lists_fit(browser_page):
    page = browser_page
    feed = publishing.create_feed(slug="books", title="Books of the world", page_size=3)
    for n in range(1, 9):
        publishing.put_record(feed=feed, key=f"book-{n}", data=record_data(n))
    publishing.put_record(feed=feed, key="x" * 200, data=record_data(
        9, title="A title much longer than any column would hold " * 10))
    publishing.delete_record(feed=feed, key="book-2")

    page.goto(f"{page.base}/admin/archives/feed/{feed.pk}/change/")
    assert page.locator(".feed-frozen").inner_text().startswith("Read-only now")
    page.screenshot(path=SHOTS / "feed-change.png")

    with page.expect_navigation():
        page.click("text=8 live records")
    assert page.locator("#result_list tbody tr").count() == 8
    fits(page)
    page.screenshot(path=SHOTS / "record-list.png")

    page.go_back(wait_until="load")
    with page.expect_navigation():
        page.click("text=10 entries")
    assert page.locator("#result_list tbody tr").count() == 10
    assert page.locator("#result_list tbody tr").first.locator(".field-kind").inner_text() == (
        "Delete")
    fits(page)
    page.screenshot(path=SHOTS / "entry-list.png")

    page.fill("#searchbar", "book-3")
    with page.expect_navigation():
        page.press("#searchbar", "Enter")
    with page.expect_navigation():
        page.click("#result_list .field-record_key a")
    with page.expect_navigation():
        page.click(".field-history a")
    assert page.locator("#result_list tbody tr").count() == 1

    page.goto(f"{page.base}/admin/archives/feed/{feed.pk}/change/")
    with page.expect_navigation():
        page.click("text=its page for people")
    assert "Books of the world" in page.title()
    page.go_back(wait_until="load")
    with page.expect_response(lambda r: r.url.endswith("/activity.svg")) as chart:
        page.click("text=activity chart")
    assert chart.value.status == 200


def test_every_list_fits_1280_pixels_with_long_slugs_and_titles(browser_page):
    page = browser_page
    for slug in ("books", "a-catalogue-whose-slug-runs-on-" + "and-on-" * 9):
        feed = publishing.create_feed(slug=slug, page_size=3,
                                      title="A feed title longer than a column holds " * 7)
        for n in range(1, 8):
            publishing.put_record(feed=feed, key=f"{'k' * 190}-{n}", data=record_data(
                n, title="A title much longer than any column would hold " * 10))
    assert max(len(feed.slug) for feed in Feed.objects.all()) >= 90

    for name in ("record", "feed", "archivepage", "entry"):
        page.goto(f"{page.base}/admin/archives/{name}/")
        assert page.locator("#result_list tbody tr").count() >= 2, name
        fits(page)
        if name == "feed":  # a title on a line or two, not wrapped over five
            page.screenshot(path=SHOTS / "feed-list.png")
            assert max(page.evaluate("""() => [...document.querySelectorAll(
                '#result_list .field-short_title span')].map(s => s.getClientRects().length)
                """)) <= 2


def test_a_keeper_deletes_a_record_and_brings_it_back_by_adding_its_key(browser_page):
    page = browser_page
    feed = publishing.create_feed(slug="books", title="Books of the world", page_size=3)
    publishing.put_record(feed=feed, key="emma", data=record_data(1, title="Emma"))
    record = Record.objects.get(key="emma")

    page.goto(f"{page.base}/admin/archives/record/{record.pk}/delete/")
    assert "marked deleted, not removed" in page.locator("#content").inner_text()
    page.screenshot(path=SHOTS / "record-delete.png")
    with page.expect_navigation():
        page.click("input[type=submit]")
    page.goto(f"{page.base}/admin/archives/record/{record.pk}/change/")
    assert page.locator(".record-deleted").inner_text().startswith("This record is deleted")

    add_record(page, key="emma", title="Emma, again")
    assert "belongs to a record deleted on" in errors(page)
    page.screenshot(path=SHOTS / "record-restore-offer.png")
    with page.expect_navigation():
        page.click("button[name=_restore]")

    assert page.url.endswith(f"/admin/archives/record/{record.pk}/change/")
    assert "Restored books / emma" in page.locator(".messagelist").inner_text()
    assert page.locator(".record-deleted").count() == 0
    restored = Record.objects.get(pk=record.pk)
    assert (restored.title, restored.is_deleted) == ("Emma, again", False)
