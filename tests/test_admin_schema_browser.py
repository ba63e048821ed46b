"""The metadata form drawn from a feed's record schema, in a real browser (headless Chromium,
as tests/test_admin_browser.py drives it): a person adds a record to a schema feed by its
labelled inputs, finds it at its public URL, and reads the write path's refusal at the
input it is about. Screenshots go to /tmp/feedpub-admin-shots/.

Without Chromium (or Playwright) these tests skip; with FEEDPUB_REQUIRE_CHROMIUM set they
fail instead (tests/external.py).
"""

from __future__ import annotations

from archives.admin.helpers import feed_label
from archives.documents import urls
from archives.log import publishing
from archives.models import Entry, Feed, Record

from . import test_admin_browser as admin_browser

SHOTS = admin_browser.SHOTS
browser_page = admin_browser.browser_page  # a logged-in admin page, against the live server

SCHEMA = {
    "type": "object",
    "required": ["year", "creators"],
    "properties": {
        "year": {"type": "integer", "title": "Year", "minimum": 1450, "x-dc": "date",
                 "description": "The year it was first published."},
        "kind": {"type": "string", "title": "Kind", "enum": ["article", "book", "dataset"]},
        "creators": {"type": "array", "title": "Creators", "x-dc": "creator",
                     "description": "Who made it, first author first.",
                     "items": {"type": "object", "required": ["name"], "properties": {
                         "name": {"type": "string", "title": "Name"}}}},
    },
    "additionalProperties": False,
}


def row(page, label: str):
    """The widget's row of the input labelled `label` (its label, input, help and errors)."""
    return page.locator(".field-metadata .rjf-form-row-inner").filter(
        has=page.locator(f"label:text-is('{label}')"))


def save(page) -> None:
    with page.expect_navigation():
        page.click("input[name=_save]")


def test_a_keeper_adds_a_record_by_the_form_its_feeds_schema_draws(browser_page):
    page = browser_page
    feed = publishing.create_feed(slug="papers", title="Papers", record_schema=SCHEMA)

    page.goto(f"{page.base}/admin/archives/record/add/")
    page.fill("#id_key", "pride")
    page.fill("#id_title", "Pride and Prejudice")
    with page.expect_navigation():  # choosing a schema feed draws its form
        page.select_option("#id_feed", label=feed_label(Feed.objects.get(slug="papers")))
    assert page.url.endswith(f"?feed={feed.pk}&key=pride&title=Pride+and+Prejudice")
    assert page.input_value("#id_key") == "pride"  # what was typed stays

    year = row(page, "Year")
    assert year.locator("label").get_attribute("class") == "rjf-required"
    assert page.evaluate("""() => getComputedStyle(
        document.querySelector('.field-metadata label.rjf-required'), '::after').content
    """) == '" *"'
    assert year.locator(".rjf-help-text").inner_text() == "The year it was first published."
    kind = row(page, "Kind").locator("select")
    assert kind.locator("option:not([disabled])").all_inner_texts() == [
        "article", "book", "dataset"]
    creators = page.locator(".field-metadata .rjf-form-group").filter(
        has=page.locator(".rjf-form-group-title", has_text="Creators")).first
    assert "Who made it, first author first." in creators.inner_text()

    year.locator("input").fill("1813")
    kind.select_option("book")
    creators.locator("button.rjf-add-button").click()
    creators.locator("button.rjf-add-button").click()
    names = creators.locator("input[type=text]")
    assert names.count() == 2
    names.nth(0).fill("Austen, Jane")
    names.nth(1).fill("Austen, Cassandra")
    page.screenshot(path=SHOTS / "record-schema-form.png", full_page=True)
    save(page)

    record = Record.objects.get(feed=feed, key="pride")
    assert page.url.endswith(f"/admin/archives/record/{record.pk}/change/")
    public = page.request.get(f"{page.base}/feeds/papers/records/pride?format=json").json()
    assert public["metadata"] == {"year": 1813, "kind": "book", "creators": [
        {"name": "Austen, Jane"}, {"name": "Austen, Cassandra"}]}
    assert public["schema"] == urls.schema_url("papers", 1)
    assert row(page, "Year").locator("input").input_value() == "1813"  # drawn again


def test_a_value_the_schema_refuses_is_said_at_its_input_and_nothing_is_saved(browser_page):
    page = browser_page
    feed = publishing.create_feed(slug="papers", title="Papers", record_schema=SCHEMA)
    publishing.put_record(feed=feed, key="pride", data={
        "title": "Pride and Prejudice",
        "metadata": {"year": 1813, "creators": [{"name": "Austen, Jane"}]}})
    record = Record.objects.get(key="pride")

    page.goto(f"{page.base}/admin/archives/record/{record.pk}/change/")
    row(page, "Year").locator("input").fill("1200")
    save(page)

    assert row(page, "Year").locator(".rjf-error-text").inner_text() == (
        "1200 is less than the minimum of 1450")
    assert page.locator(".field-metadata .errorlist li").all_inner_texts() == [
        "Year: 1200 is less than the minimum of 1450"]  # the input's label, no JSON path
    assert row(page, "Year").locator("input").input_value() == "1200"  # as it was typed
    page.screenshot(path=SHOTS / "record-schema-error.png", full_page=True)
    assert Entry.objects.filter(feed=feed).count() == 1
    public = page.request.get(f"{page.base}/feeds/papers/records/pride?format=json").json()
    assert public["metadata"]["year"] == 1813
