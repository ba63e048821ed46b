"""HTTPS on one machine (docs/deploying/https.md): the deploy nginx, run for real with a
certificate from a local certificate authority (trustme), in front of feedpub, as
docker-compose.yml runs it with FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY; and without one, behind
a TLS terminator of the operator's (FEEDPUB_TRUSTED_PROXIES).

What a client sees: the handshake with that certificate, plain http redirected but for health
checks and ACME challenges, HSTS on every https answer exactly once, cookies marked Secure,
an admin login, a long poll answered through TLS, and a renewed certificate taken without a
restart. Needs nginx (tests/nginx_server.py: skipped without it, an error in CI).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import trustme
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

from archives.log import publishing

from .factories import FeedFactory, record_data
from .nginx_server import TLS_SCRIPT, Nginx, require_nginx

HSTS = "max-age=31536000; includeSubDomains"
# feedpub's production settings (feedpub/settings.py with DEBUG off), which nginx is given
# too (docker-compose.yml's FEEDPUB_SECURE_*).
SECURE = {"SSL_REDIRECT": "true", "HSTS_SECONDS": "31536000",
          "HSTS_INCLUDE_SUBDOMAINS": "true", "HSTS_PRELOAD": "false"}


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def feedpub_server():
    """feedpub under a threaded WSGI server, its middleware built now, from the settings
    as the test has them (the session's live server built its own at its start)."""
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def production(settings):
    """feedpub's settings with DEBUG off (feedpub/settings.py)."""
    # feedpub.asgi builds its Django application, middleware and all, once a process, from
    # the settings as they are then: built before these change, or a later plain-http long
    # poll of another module in this process would be redirected (SECURE_SSL_REDIRECT).
    import feedpub.asgi  # noqa: F401
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = False
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    return settings


@pytest.fixture
def ca():
    return trustme.CA()


def certificate_files(ca: trustme.CA, directory, name: str = "site"):
    """A certificate for localhost from `ca` (the full chain) and its key, as files."""
    issued = ca.issue_cert("localhost", "127.0.0.1")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key.write_bytes(issued.private_key_pem.bytes())
    return cert, key


@pytest.fixture
def https_site(production, transactional_db, tmp_path, ca):
    """nginx terminating TLS with the CA's certificate, in front of feedpub."""
    require_nginx()
    cert, key = certificate_files(ca, tmp_path / "tls")
    with feedpub_server() as upstream:
        nginx = Nginx(tmp_path / "nginx", upstream, tls_cert=cert, tls_key=key, secure=SECURE)
        nginx.base_url = nginx.https_url
        production.FEEDPUB_BASE_URL = nginx.https_url
        nginx.start()
        try:
            yield nginx
        finally:
            nginx.stop()


@pytest.fixture
def client(ca):
    """A client that trusts the local CA, as a reader trusts Let's Encrypt (and nothing from
    the environment: no proxy, no other CA bundle)."""
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    with httpx.Client(verify=trusting, trust_env=False, timeout=10) as session:
        yield session


def plain_get(url: str, **options) -> httpx.Response:
    """A GET over plain http, redirects not followed, nothing from the environment."""
    return httpx.get(url, trust_env=False, timeout=10, **options)


def hsts_headers(response: httpx.Response) -> list[str]:
    return response.headers.get_list("Strict-Transport-Security")


def handshake(port: int, context: ssl.SSLContext) -> dict:
    with (socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
          context.wrap_socket(sock, server_hostname="localhost") as tls):
        return {"version": tls.version(), "certificate": tls.getpeercert()}


def test_the_handshake_presents_the_certificate_nginx_was_given(https_site, ca):
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    answered = handshake(https_site.tls_port, trusting)
    assert answered["version"] in {"TLSv1.2", "TLSv1.3"}
    assert ("DNS", "localhost") in answered["certificate"]["subjectAltName"]
    # A client that does not trust that CA refuses it: it is the certificate, not another.
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(https_site.tls_port, ssl.create_default_context())


def test_plain_http_is_redirected_to_https_but_health_checks_and_acme(https_site, client):
    feed = FeedFactory(slug="books")
    publishing.put_record(feed=feed, key="k1", data=record_data(1))
    plain = plain_get(f"{https_site.url}/feeds/books/?format=html")
    assert plain.status_code == 301
    assert plain.headers["Location"] == f"{https_site.https_url}/feeds/books/?format=html"
    assert hsts_headers(plain) == []  # meaningless over http (RFC 6797 8.1)
    followed = client.get(f"{https_site.url}/admin/login/", follow_redirects=True)
    assert str(followed.url) == f"{https_site.https_url}/admin/login/"
    assert followed.status_code == 200

    assert plain_get(f"{https_site.url}/healthz").status_code == 200
    assert plain_get(f"{https_site.url}/nginx-health").status_code == 204
    # certbot's http-01 challenge: a file in the webroot, answered over plain http
    challenges = https_site.acme_root / ".well-known" / "acme-challenge"
    challenges.mkdir(parents=True)
    (challenges / "tok3n").write_text("tok3n.thumbprint")
    acme = plain_get(f"{https_site.url}/.well-known/acme-challenge/tok3n")
    assert (acme.status_code, acme.text) == (200, "tok3n.thumbprint")
    missing = plain_get(f"{https_site.url}/.well-known/acme-challenge/other")
    assert missing.status_code == 404  # never feedpub's, never redirected


def test_every_https_answer_carries_hsts_exactly_once(https_site, client):
    feed = FeedFactory(slug="books", page_size=2)
    for n in range(3):
        publishing.put_record(feed=feed, key=f"k{n}", data=record_data(n))
    base = https_site.https_url
    answers = {
        "feedpub's": client.get(f"{base}/api/feeds/"),
        "feedpub's health": client.get(f"{base}/healthz"),
        "an archive page": client.get(f"{base}/feeds/books/archives/1/"),
        "nginx's own": client.get(f"{base}/nginx-health"),
    }
    for _ in range(2):  # stored, then from nginx's cache
        answers["cached"] = client.get(f"{base}/feeds/books/")
    assert answers["cached"].headers["X-Cache-Status"] == "HIT"
    for what, answer in answers.items():
        assert answer.status_code in {200, 204}, what
        assert hsts_headers(answer) == [HSTS], what


def test_session_and_csrf_cookies_are_secure_and_an_admin_logs_in_over_https(https_site,
                                                                            client):
    from django.contrib.auth.models import User

    User.objects.create_superuser("ada", "ada@example.org", "correct horse")
    login_url = f"{https_site.https_url}/admin/login/"
    page = client.get(login_url)
    assert page.status_code == 200
    assert all("; Secure" in cookie for cookie in page.headers.get_list("Set-Cookie"))
    assert client.cookies.get("csrftoken") is not None
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)

    # As a browser posts it: with its Referer, which Django checks on https.
    answer = client.post(login_url, data={
        "csrfmiddlewaretoken": token, "username": "ada", "password": "correct horse",
        "next": "/admin/"}, headers={"Referer": login_url})
    assert answer.status_code == 302, answer.text[:500]
    assert answer.headers["Location"] == "/admin/"
    cookies = {cookie.name: cookie for cookie in client.cookies.jar}
    assert set(cookies) == {"csrftoken", "sessionid"}
    assert all(cookie.secure for cookie in cookies.values())
    index = client.get(f"{https_site.https_url}/admin/")
    assert index.status_code == 200
    assert 'id="logout-form"' in index.text
    assert hsts_headers(index) == [HSTS]


def test_a_long_poll_over_https_is_answered_when_the_feed_changes(production, transactional_db,
                                                                  tmp_path, ca, client,
                                                                  monkeypatch):
    from django.db import connection

    from .asgi_server import AsgiServer

    require_nginx()
    production.FEEDPUB_SEAL_ON_WRITE = False
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)  # as the service runs
    cert, key = certificate_files(ca, tmp_path / "tls")
    asgi = AsgiServer().start()
    with feedpub_server() as upstream:
        nginx = Nginx(tmp_path / "nginx", upstream, long_poll=f"127.0.0.1:{asgi.port}",
                      tls_cert=cert, tls_key=key, secure=SECURE)
        nginx.base_url = production.FEEDPUB_BASE_URL = nginx.https_url  # before any write
        feed = FeedFactory(slug="books", page_size=10)
        publishing.put_record(feed=feed, key="k1", data=record_data(1))
        nginx.start()
        try:
            url = f"{nginx.https_url}/feeds/books/"
            etag = client.get(url).headers["ETag"]
            answers = []
            waiting = threading.Thread(target=lambda: answers.append(client.get(
                url, headers={"If-None-Match": etag, "Prefer": "wait=20"}, timeout=30)))
            started = time.monotonic()
            waiting.start()
            asgi.wait_for_waiters("books", 1)
            publishing.put_record(feed=feed, key="k2", data=record_data(2))
            waiting.join(timeout=25)
            answer, = answers
        finally:
            nginx.stop()
            asgi.stop()
    assert answer.status_code == 200
    assert answer.headers["Preference-Applied"] == "wait=20"
    assert b"Record 2" in answer.content
    assert answer.headers["ETag"] != etag
    assert time.monotonic() - started < 15  # answered by the write, not by the wait's end
    assert hsts_headers(answer) == [HSTS]


# Renewal ------------------------------------------------------------------------------------

@contextmanager
def watching(nginx: Nginx):
    """deploy/nginx/tls.sh's watcher, as the image leaves it running, looking every second;
    yields what it has said so far (a function)."""
    watcher = subprocess.Popen(["/bin/sh", str(TLS_SCRIPT), "watch"],  # noqa: S603
                               env={**nginx.tls_environment(), "FEEDPUB_TLS_CHECK_SECONDS": "1"},
                               stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)  # it has its fingerprint of the files as they are
        yield watcher
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def said(watcher: subprocess.Popen) -> str:
    text = watcher.stderr.read().decode()
    watcher.stderr.close()
    return text


def serial(port: int, context: ssl.SSLContext) -> int:
    with (socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
          context.wrap_socket(sock, server_hostname="localhost") as tls):
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509
    return x509.load_der_x509_certificate(der).serial_number


def test_a_renewed_certificate_is_served_without_restarting_nginx(https_site, ca, tmp_path):
    """certbot replaces the files; tls.sh's watcher sees them change and reloads nginx
    (SIGHUP): the same master, no refused connection, the new certificate."""
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    before = serial(https_site.tls_port, trusting)
    with watching(https_site) as watcher:
        renewed_cert, renewed_key = certificate_files(ca, tmp_path / "renewed")
        https_site.tls_cert.write_bytes(renewed_cert.read_bytes())
        https_site.tls_key.write_bytes(renewed_key.read_bytes())
        deadline = time.monotonic() + 15
        served = before
        while served == before and time.monotonic() < deadline:
            served = serial(https_site.tls_port, trusting)  # never refused meanwhile
            time.sleep(0.2)
    assert served != before
    assert "reloading nginx" in said(watcher)
    assert https_site.process.poll() is None  # the same nginx, reloaded


# Behind a TLS terminator ----------------------------------------------------------------------

@pytest.fixture
def behind_a_terminator(production, transactional_db, tmp_path):
    """nginx on plain http (no certificate), as behind a load balancer, with
    FEEDPUB_TRUSTED_PROXIES set by the test (the test's connections come from 127.0.0.1)."""
    require_nginx()
    started = []

    def start(trusted: str) -> Nginx:
        nginx = Nginx(tmp_path / f"nginx-{len(started)}", upstream, trusted_proxies=trusted,
                      base_url="https://feeds.example.org", secure=SECURE)
        started.append(nginx.start())
        return nginx

    production.FEEDPUB_BASE_URL = "https://feeds.example.org"
    production.ALLOWED_HOSTS = ["feeds.example.org"]
    with feedpub_server() as upstream:
        try:
            yield start
        finally:
            for nginx in started:
                nginx.stop()


def through(nginx: Nginx, proto: str | None):
    headers = {"Host": "feeds.example.org"}
    if proto:
        headers["X-Forwarded-Proto"] = proto
    return plain_get(f"{nginx.url}/api/feeds/", headers=headers)


def test_a_trusted_terminator_forwarded_proto_is_honoured(behind_a_terminator):
    nginx = behind_a_terminator("10.0.0.0/8, 127.0.0.1")
    secure = through(nginx, "https")
    assert secure.status_code == 200
    assert hsts_headers(secure) == [HSTS]  # feedpub's, once
    plain = through(nginx, "http")
    assert plain.status_code == 301
    assert plain.headers["Location"] == "https://feeds.example.org/api/feeds/"


def test_another_address_forwarded_proto_is_not(behind_a_terminator):
    nginx = behind_a_terminator("192.0.2.10 198.51.100.0/24")
    claimed = through(nginx, "https")
    assert claimed.status_code == 301  # plain http, whatever the client claims
    assert claimed.headers["Location"] == "https://feeds.example.org/api/feeds/"
    assert hsts_headers(claimed) == []


# deploy/nginx/tls.sh's refusals -------------------------------------------------------------

def test_a_certificate_without_its_key_is_refused(tmp_path, ca):
    cert, _ = certificate_files(ca, tmp_path / "tls")
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9", tls_cert=cert)
    with pytest.raises(RuntimeError, match="set both FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY"):
        nginx.write_config()


def test_a_trusted_proxy_that_is_not_an_address_is_refused(tmp_path):
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9", trusted_proxies="10.0.0.1, lb.internal")
    with pytest.raises(RuntimeError, match="'lb.internal' is not an address or a CIDR range"):
        nginx.write_config()


def test_until_the_first_certificate_exists_nginx_answers_plain_http(tmp_path, ca):
    """Before certbot's first certificate: plain http (ACME challenges answered), no https
    listener; once the files exist, the watcher that tls.sh leaves running when the image
    runs it (no argument) turns https on, as after a renewal."""
    require_nginx()
    cert, key = tmp_path / "tls" / "site.pem", tmp_path / "tls" / "site.key"
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9", tls_cert=cert, tls_key=key)
    nginx.start()
    try:
        assert "plain http only" in (nginx.workdir / "feedpub-tls.conf").read_text()
        assert plain_get(f"{nginx.url}/nginx-health").status_code == 204
        with pytest.raises(ConnectionRefusedError):  # no https listener
            socket.create_connection(("127.0.0.1", nginx.tls_port), timeout=2).close()
        trusting = ssl.create_default_context()
        ca.configure_trust(trusting)
        started = nginx.tls_script(FEEDPUB_TLS_CHECK_SECONDS="1")  # as the image runs it
        watcher = int(re.search(r"\(pid (\d+)\)", started).group(1))
        try:
            certificate_files(ca, tmp_path / "tls")  # certbot's first certificate
            deadline = time.monotonic() + 15
            while True:
                try:
                    handshake(nginx.tls_port, trusting)
                    break
                except OSError:
                    assert time.monotonic() < deadline, "https never came up"
                    time.sleep(0.2)
        finally:
            os.kill(watcher, signal.SIGTERM)
        assert "not there yet: plain http only" in started
        # plain http still answers
        assert plain_get(f"{nginx.url}/nginx-health").status_code == 204
    finally:
        nginx.stop()
