"""The development check of FEEDPUB_BASE_URL (archives/serving/basecheck.py): a request for
another address than the documents' links would lead to is answered 421, saying what to set;
another loopback name for the same server is redirected."""

from __future__ import annotations

from django.test import Client

from .factories import FeedFactory

OLD, NEW = "http://127.0.0.1:8000", "http://127.0.0.1:8001"



def test_development_refuses_a_host_other_than_the_base_urls(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    FeedFactory(slug="books")

    response = Client().get("/feeds/books/?x=1", HTTP_HOST="127.0.0.1:8001")

    assert response.status_code == 421
    text = response.content.decode()
    assert f"open {OLD}/feeds/books/?x=1" in text
    assert f"FEEDPUB_BASE_URL={NEW} .venv/bin/python manage.py runserver 127.0.0.1:8001" in text
    assert f"FEEDPUB_BASE_URL={NEW} .venv/bin/python manage.py rerender_documents" in text
    assert Client().get("/feeds/books/", HTTP_HOST="127.0.0.1:8000").status_code == 200
    assert Client().get("/healthz", HTTP_HOST="127.0.0.1:8001").status_code == 200


def test_a_default_port_is_the_same_origin_and_a_scheme_is_not(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, "http://feeds.example.org"
    settings.ALLOWED_HOSTS = ["feeds.example.org"]
    FeedFactory(slug="books")

    assert Client().get("/feeds/books/", HTTP_HOST="feeds.example.org:80").status_code == 200
    assert Client().get("/feeds/books/", HTTP_HOST="FEEDS.example.org").status_code == 200
    assert Client().get("/feeds/books/", HTTP_HOST="feeds.example.org",
                        secure=True).status_code == 421


def test_with_debug_off_any_allowed_host_is_served(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = False, OLD
    FeedFactory(slug="books")

    assert Client().get("/feeds/books/", HTTP_HOST="127.0.0.1:8001").status_code == 200


def test_development_redirects_another_loopback_name_for_the_same_port(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    FeedFactory(slug="books")

    for host in ("localhost:8000", "[::1]:8000"):
        response = Client().get("/feeds/books/?x=1", HTTP_HOST=host)
        assert response.status_code == 302
        assert response["Location"] == f"{OLD}/feeds/books/?x=1"
    assert Client().get("/feeds/books/", HTTP_HOST="localhost:8001").status_code == 421
    assert Client().post("/feeds/books/", HTTP_HOST="localhost:8000").status_code == 421


def test_development_refuses_a_port_out_of_range_without_an_error(db, settings):
    settings.DEBUG, settings.FEEDPUB_BASE_URL = True, OLD
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

    for host in ("localhost:99999", "127.0.0.1:99999"):
        assert Client().get("/feeds/books/", HTTP_HOST=host).status_code == 421, host
