"""WebSub end to end with a subscriber nobody here wrote: flask-websub's (PyPI Flask-WebSub),
running its own Flask app on a local port. It discovers our hub and topic from the
subscription document, subscribes through our hub, confirms the worker's verification,
and checks each delivery's X-Hub-Signature before handing the body to its listeners.

flask-websub sends a secret only to a hub reached over https (as WebSub advises), so
feedpub is served here over TLS, by werkzeug with a certificate from a throwaway CA
(trustme) that requests is told to trust.
"""

from __future__ import annotations

import ssl
import threading

import pytest
import requests
import trustme
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from flask import Flask
from flask_websub.subscriber import (
    SQLite3SubscriberStorage,
    SQLite3TempSubscriberStorage,
    Subscriber,
    discover,
)
from werkzeug.serving import make_server

from archives.log import publishing
from archives.models import Subscription
from archives.push.worker import Worker

from .factories import FeedFactory, record_data

pytestmark = pytest.mark.django_db(transaction=True)


class Served:
    """A WSGI app served by werkzeug in a thread, on a free local port."""

    def __init__(self, app, *, ssl_context=None):
        self.server = make_server("127.0.0.1", 0, app, threaded=True, ssl_context=ssl_context)
        scheme = "https" if ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.thread.join(timeout=5)


def feedpub_app(environ, start_response):
    """feedpub's WSGI app, each request on a connection of its own that it closes."""
    try:
        return WSGIHandler()(environ, start_response)
    finally:
        connections.close_all()


@pytest.fixture(autouse=True)
def _local_callbacks(settings):
    settings.FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = True  # the subscriber is local


@pytest.fixture
def feedpub_over_tls(settings, tmp_path, monkeypatch):
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.pem"))  # flask-websub's
    served = Served(feedpub_app, ssl_context=context)
    settings.FEEDPUB_BASE_URL = served.url
    yield served
    served.stop()


@pytest.fixture
def flask_subscriber(tmp_path):
    """flask-websub's Subscriber in a Flask app of its own: what it was told, by whom."""
    app = Flask("subscriber")
    subscriber = Subscriber(SQLite3SubscriberStorage(str(tmp_path / "subscriptions.db")),
                            SQLite3TempSubscriberStorage(str(tmp_path / "requests.db")))
    app.register_blueprint(subscriber.build_blueprint(url_prefix="/callbacks"))
    told = {"content": [], "success": [], "error": []}
    subscriber.add_listener(lambda topic, callback_id, body: told["content"].append(
        (topic, callback_id, body)))
    subscriber.add_success_handler(lambda topic, callback_id, mode: told["success"].append(
        (topic, callback_id, mode)))
    subscriber.add_error_handler(lambda topic, callback_id, reason: told["error"].append(
        (topic, callback_id, reason)))
    served = Served(app)
    app.config["SERVER_NAME"] = served.url.removeprefix("http://")
    yield app, subscriber, told
    served.stop()


def test_flask_websubs_subscriber_gets_each_change_with_a_valid_signature(
        feedpub_over_tls, flask_subscriber):
    app, subscriber, told = flask_subscriber
    feed = FeedFactory(slug="books", page_size=3)
    topic = f"{feedpub_over_tls.url}/feeds/books/"
    worker = Worker()
    try:
        with app.app_context():
            found = discover(topic)  # from the Link headers rel="hub" and rel="self"
            assert found == {"hub_url": f"{feedpub_over_tls.url}/websub/", "topic_url": topic}
            callback_id = subscriber.subscribe(**found, lease_seconds=3600)
        subscription = Subscription.objects.get()
        assert subscription.intent_secret  # flask-websub made one up: the hub is https

        assert worker.run_round().verified == 1
        assert told["success"] == [(topic, callback_id, "subscribe")]
        assert subscriber.storage[callback_id]["lease_seconds"] == 3600

        publishing.put_record(feed=feed, key="k1", data=record_data(1))
        assert worker.run_round().delivered == 1
        # Its listeners hear only of content whose signature it has checked.
        ((heard_topic, heard_id, body),) = told["content"]
        assert (heard_topic, heard_id) == (topic, callback_id)
        assert body == requests.get(topic, timeout=5).content

        # A signature made with another secret fails its check: nothing is heard.
        Subscription.objects.update(secret="not the secret it gave")
        publishing.put_record(feed=feed, key="k2", data=record_data(2))
        assert worker.run_round().delivered == 1  # (the callback still answers 200)
        assert len(told["content"]) == 1

        with app.app_context():
            subscriber.unsubscribe(callback_id)
        assert worker.run_round().verified == 1
        assert told["success"][-1] == (topic, callback_id, "unsubscribe")
        assert not Subscription.objects.exists()
        assert told["error"] == []
    finally:
        worker.close()


def test_flask_websub_discovers_the_linked_pages_topic_through_the_redirect(
        feedpub_over_tls, flask_subscriber):
    """requests follows /pages/latest's redirect, so flask-websub reads the newest page's
    Link header: the hub, and the page as `self`. The hub takes that page as a name of the
    entry point and delivers the newest page from then on."""
    app, subscriber, told = flask_subscriber
    feed = FeedFactory(slug="books", page_size=3)
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    page_one = f"{feedpub_over_tls.url}/feeds/books/pages/1"
    worker = Worker()
    try:
        with app.app_context():
            found = discover(f"{feedpub_over_tls.url}/feeds/books/pages/latest")
            assert found == {"hub_url": f"{feedpub_over_tls.url}/websub/",
                             "topic_url": page_one}
            callback_id = subscriber.subscribe(**found, lease_seconds=3600)
        assert worker.run_round().verified == 1
        assert told["success"] == [(page_one, callback_id, "subscribe")]

        for n in range(2, 5):  # page_size 3: the fourth entry starts page 2
            publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
        assert worker.run_round().delivered == 1
        ((heard_topic, heard_id, body),) = told["content"]  # its signature checked
        assert (heard_topic, heard_id) == (page_one, callback_id)
        assert body == requests.get(f"{feedpub_over_tls.url}/feeds/books/pages/2",
                                    timeout=5).content
        assert told["error"] == []
    finally:
        worker.close()
