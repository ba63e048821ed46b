"""The home page orients: which feed is which (slugs), when each last changed (in words a
person reads), and where each of its formats, the admin and the API docs are."""

from __future__ import annotations

import re

import feedparser
import pytest
from django.contrib.auth.models import User
from django.test import Client
from lxml import html

from archives.models import Feed

from .factories import FeedFactory


@pytest.fixture
def home(client, sealed_feed):
    # A second feed with the same title: only the slug tells them apart.
    FeedFactory(slug="books-2", title="Books")
    return html.fromstring(client.get("/").content)


def row(root, slug: str):
    return root.xpath(f"//tbody/tr[.//code[.='{slug}']]")[0]


def visible(element) -> str:
    return " ".join(" ".join(element.itertext()).split())


def test_each_feed_shows_its_slug(home):
    assert home.xpath("//tbody/tr//code/text()") == ["books", "books-2"]
    assert visible(row(home, "books")).startswith("Books books")


def test_the_last_change_is_a_human_date_in_utc(home, sealed_feed):
    changed = sealed_feed.content_updated
    shown = row(home, "books").xpath(".//time")[0]

    assert visible(shown) == f"{changed.day} {changed:%b %Y, %H:%M} UTC"
    assert not re.search(r"\d\.\d{6}", visible(home))  # no microseconds anywhere
    assert shown.get("datetime").startswith(changed.strftime("%Y-%m-%dT%H:%M:%S"))


def test_each_feeds_formats_are_linked_and_answer(client, home):
    links = {a.text: a.get("href") for a in row(home, "books").xpath(".//a")}

    assert links == {
        "Books": "/feeds/books/?format=html", "Atom": "/feeds/books/",
        "RSS": "/feeds/books/rss/", "complete": "/feeds/books/complete/",
        "paged": "/feeds/books/paged/", "linked pages": "/feeds/books/pages/latest",
        "first": "/feeds/books/archives/1/?format=html",
    }
    assert client.get(links["Books"])["Content-Type"].startswith("text/html")
    for name in ("Atom", "RSS", "complete", "paged"):
        parsed = feedparser.parse(b"".join(client.get(links[name])))
        assert not parsed.bozo, name
        assert parsed.feed.title == "Books", name
    latest = client.get(links["linked pages"])
    assert latest.status_code == 302
    assert client.get(latest["Location"]).status_code == 200


def test_a_feed_without_entries_links_only_what_answers(client, home):
    links = {a.text: a.get("href") for a in row(home, "books-2").xpath(".//a")}

    assert "linked pages" not in links
    assert "Atom" in links
    for name, href in links.items():
        assert client.get(href, follow=True).status_code == 200, name


def test_it_links_the_admin_and_the_api_docs(client, home):
    site = {a.text: a.get("href") for a in home.xpath("//nav[@aria-label='Site']//a")}

    assert site == {"Admin": "/admin/", "API docs (Swagger UI)": "/api/schema/swagger-ui/",
                    "API": "/api/"}
    assert client.get(site["Admin"]).status_code == 302  # to the login page
    assert b"swagger-ui" in client.get(site["API docs (Swagger UI)"]).content
    assert client.get(site["API"], headers={"Accept": "application/json"}).json()["docs"] \
        == "http://testserver/api/schema/swagger-ui/"


def test_it_keeps_the_autodiscovery_links(home):
    assert home.xpath("//head/link[@rel='alternate']/@href") == [
        "/feeds/books/", "/feeds/books/rss/", "/feeds/books-2/", "/feeds/books-2/rss/"]


def test_many_feeds_are_listed_a_page_at_a_time(client, db, django_assert_max_num_queries):
    FeedFactory.create_batch(120)
    slugs = sorted(Feed.objects.values_list("slug", flat=True))
    seen, url = [], "/"
    for _ in range(3):
        with django_assert_max_num_queries(2):  # the count and one page of feeds
            root = html.fromstring(client.get(url).content)
        listed = root.xpath("//tbody/tr//code/text()")
        assert len(listed) <= 50
        # Each listed feed keeps its autodiscovery links, and only those are in the head.
        assert len(root.xpath("//head/link[@type='application/atom+xml']")) == len(listed)
        seen += listed
        following = root.xpath("//nav[@aria-label='Feed list pages']/a[contains(., 'next')]/@href")
        assert root.xpath("//head/link[@rel='next']/@href") == following
        if not following:
            break
        url = "/" + following[0]
    assert seen == slugs
    assert "page 3 of 3 (120 feeds)" in visible(root)


def test_only_staff_get_edit_in_the_admin_links(client, admin_client, sealed_feed):
    User.objects.create_user("reader", password="a-long-secret-1")
    member = Client()
    member.login(username="reader", password="a-long-secret-1")
    edit = "//a[.='edit in the admin']/@href"

    assert html.fromstring(client.get("/").content).xpath(edit) == []
    assert html.fromstring(member.get("/").content).xpath(edit) == []
    staff = html.fromstring(admin_client.get("/").content).xpath(edit)
    assert staff == [f"/admin/archives/feed/{sealed_feed.pk}/change/"]
    assert admin_client.get(staff[0]).status_code == 200
    # The page differs by who asks: no shared cache may hand one person's to another.
    assert "Cookie" in admin_client.get("/")["Vary"]
