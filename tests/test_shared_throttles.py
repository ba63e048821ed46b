"""API rates hold across processes: two web servers (as two gunicorn workers, or two
containers) sharing one cache count a client once, whether the cache is the database
(the default) or Redis (FEEDPUB_REDIS_URL). Before, each process counted on its own, and a
client got the rate once per process."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.core.cache import caches
from django.db import connection, connections
from rest_framework.test import APIClient

from archives.db.cache import LockingDatabaseCache

from .nginx_server import free_port

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = str(ROOT / "deploy" / "entrypoint.sh")
REDIS_URL = "redis://127.0.0.1:6379/15"
RATE = 4  # a client's requests an hour


def redis_or_skip() -> None:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        pytest.skip("needs Redis at 127.0.0.1:6379")
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter("feedpub:*throttle_*"):  # counts of an earlier run
        client.delete(key)


def server_environment(tmp_path: Path, cache: str) -> dict[str, str]:
    home = tmp_path / "home-is-a-file"  # gunicorn's default control socket cannot go there
    home.write_text("")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DATABASE_URL", "FEEDPUB_", "DJANGO_", "POSTGRES_"))}
    env.update({
        "DATABASE_URL": f"sqlite:///{tmp_path / 'shared.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "feedpub.settings",
        "ALLOWED_HOSTS": "127.0.0.1",
        "FEEDPUB_API_ANON_RATE": f"{RATE}/hour",
        "FEEDPUB_API_PROXIES": "0",  # clients reach gunicorn directly here
        "WEB_CONCURRENCY": "1",
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    })
    env.pop("XDG_RUNTIME_DIR", None)
    if cache == "redis":
        env["FEEDPUB_REDIS_URL"] = REDIS_URL
    return env


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen([ENTRYPOINT, "web"], cwd=ROOT,  # noqa: S603
                              env={**env, "GUNICORN_BIND": f"127.0.0.1:{port}",
                                   # each says where it is served (DEBUG's check answers 421)
                                   "FEEDPUB_BASE_URL": f"http://127.0.0.1:{port}"},
                              stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(log.read_text())
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"gunicorn did not listen on {port}\n{log.read_text()}")


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (loopback)
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize("cache", ["database", "redis"])
def test_two_servers_sharing_the_cache_hold_one_client_to_its_rate(tmp_path, cache):
    if cache == "redis":
        redis_or_skip()
    env = server_environment(tmp_path, cache)
    subprocess.run([ENTRYPOINT, "migrate"], cwd=ROOT, env=env,  # noqa: S603
                   check=True, capture_output=True, timeout=120)
    ports = [free_port(), free_port()]
    servers = [start_server(env, port, tmp_path / f"server{n}.log")
               for n, port in enumerate(ports)]
    try:
        if time.time() % 3600 > 3590:  # not across two windows (an hour each)
            time.sleep(11)
        # The same client, alternately to each server: each has seen only half of them.
        codes = [status(f"http://127.0.0.1:{ports[n % 2]}/api/feeds/")
                 for n in range(RATE + 2)]
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    assert codes == [200] * RATE + [429, 429]
    for n in range(2):
        log = (tmp_path / f"server{n}.log").read_text()
        assert "control socket" not in log.lower(), log  # gunicorn starts without a warning


# The database cache's count, under concurrency -----------------------------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_counts_of_one_key_are_never_lost():
    """Django's own DatabaseCache.incr is a get and a set: two writers both write n + 1."""
    cache = caches["default"]
    assert isinstance(cache, LockingDatabaseCache)
    cache.set("counted", 0, timeout=60)
    threads, per_thread = 4, 50

    def count():
        try:
            for _ in range(per_thread):
                cache.incr("counted")
        finally:
            connection.close()

    workers = [threading.Thread(target=count) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert cache.get("counted") == threads * per_thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_count_in_a_callers_transaction_leaves_its_commit_durable():
    """The count's own transaction commits without waiting for the disk; a caller's, which
    may hold a write, must not inherit that."""
    from django.db import transaction

    cache = caches["default"]
    cache.set("counted", 0, timeout=60)

    def synchronous_commit():
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return cursor.fetchone()[0]

    with transaction.atomic():
        assert cache.incr("counted") == 1
        assert synchronous_commit() == "on"
    assert cache.incr("counted") == 2
    assert synchronous_commit() == "on"  # (SET LOCAL ended with the count's transaction)


def test_a_count_keeps_the_expiry_of_its_window(db):
    cache = caches["default"]
    cache.add("window", 1, timeout=1)
    assert cache.incr("window") == 2
    time.sleep(1.1)
    assert cache.get("window") is None  # the increment did not restart its expiry
    with pytest.raises(ValueError, match="not found"):
        cache.incr("window")


def test_an_unreachable_redis_lets_requests_through_and_says_so(db, settings, caplog):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    settings.FEEDPUB_API_ANON_RATE = "1/hour"
    client = APIClient()
    assert [client.get("/api/feeds/").status_code for _ in range(2)] == [200, 200]
    assert "Redis is unreachable" in caplog.text


# A cache that does not answer ----------------------------------------------------------

def project_settings(monkeypatch, **environment: str) -> types.ModuleType:
    """feedpub/settings.py as read by a process started with `environment` (a copy of its
    own: the running settings are untouched)."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("settings_as_configured",
                                                  ROOT / "feedpub" / "settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def silent_redis():
    """The URL of a Redis that takes connections and never answers, as a paused one does
    (the kernel completes each connection; nobody reads it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"


def timed_statuses(client: APIClient, count: int) -> list[tuple[int, float]]:
    answers = []
    for _ in range(count):
        began = time.monotonic()
        status_code = client.get("/api/feeds/").status_code
        answers.append((status_code, time.monotonic() - began))
    return answers


def test_a_redis_that_does_not_answer_leaves_requests_uncounted_at_once(
        db, settings, monkeypatch, silent_redis, caplog):
    """Before, every API request waited redis-py's default 5 s socket timeout, and with
    all the workers waiting, so did every feed and /healthz."""
    settings.CACHES = project_settings(monkeypatch, FEEDPUB_REDIS_URL=silent_redis).CACHES
    settings.FEEDPUB_API_ANON_RATE = "1/hour"
    answers = timed_statuses(APIClient(), 3)
    assert [status_code for status_code, _ in answers] == [200, 200, 200]
    first, *then = (seconds for _, seconds in answers)
    assert first < 1, answers  # the count's timeout (0.25 s), not 5 s
    assert max(then) < 0.2, answers  # and the next requests do not ask it again
    assert caplog.text.count("Redis is unreachable") == 1


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_paused_redis_is_counted_on_again_once_it_answers(
        db, settings, monkeypatch, tmp_path):
    """A redis-server of the test's own, paused (SIGSTOP) and resumed."""
    port = free_port()
    server = subprocess.Popen(  # noqa: S603
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",  # noqa: S607
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        settings.CACHES = project_settings(
            monkeypatch, FEEDPUB_REDIS_URL=f"redis://127.0.0.1:{port}/0").CACHES
        settings.FEEDPUB_API_ANON_RATE = "2/hour"
        monkeypatch.setattr("archives.db.cache.AWAY_SECONDS", 0.5)
        client = APIClient()
        if time.time() % 3600 > 3590:  # not across two windows (an hour each)
            time.sleep(11)
        assert timed_statuses(client, 1)[0][0] == 200  # counted: 1
        server.send_signal(signal.SIGSTOP)
        try:
            (status_code, seconds), = timed_statuses(client, 1)
        finally:
            server.send_signal(signal.SIGCONT)
        assert status_code == 200
        assert seconds < 1
        time.sleep(0.6)  # Redis is asked again
        assert [status_code for status_code, _ in timed_statuses(client, 2)] == [200, 429]
    finally:
        server.terminate()
        server.wait(timeout=10)


# A counter row (or SQLite's write lock) that another transaction holds -------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_held_counter_row_leaves_the_clients_requests_uncounted_at_once(settings, caplog):
    """Before, each of the client's requests waited for the row as long as it was held, and
    with every worker waiting so did feeds and /healthz."""
    caches["default"].clear()  # (counts of earlier tests: the table is not flushed)
    settings.FEEDPUB_API_ANON_RATE = "100/hour"
    client = APIClient()
    if time.time() % 3600 > 3590:  # not across two windows (an hour each)
        time.sleep(11)
    assert client.get("/api/feeds/").status_code == 200  # the window's counter row
    holder = connections.create_connection("default")
    holder.set_autocommit(False)
    raw = holder.connection  # psycopg's, which the timer's thread may roll back
    try:
        raw.execute("SELECT cache_key FROM feedpub_cache FOR UPDATE")  # a stuck count
        release = threading.Timer(3, raw.rollback)
        release.start()
        try:
            answers = timed_statuses(client, 2)
        finally:
            release.cancel()
            raw.rollback()
        assert [status_code for status_code, _ in answers] == [200, 200]
        assert max(seconds for _, seconds in answers) < 1, answers  # 0.25 s, not 3 s
        assert "not counted" in caplog.text
        assert timed_statuses(client, 1)[0][0] == 200
        assert caches["default"].get(next(iter(counter_keys()))) == 2  # counted again
    finally:
        holder.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_windows_first_count_waits_at_most_the_lock_timeout_for_a_stuck_first(
        settings, caplog):
    """The window's first count adds the client's row: behind another first count's insert
    that has not committed, it waited as long as that."""
    settings.FEEDPUB_API_ANON_RATE = None
    timed_statuses(APIClient(), 1)  # this process's first request loads the API
    settings.FEEDPUB_API_ANON_RATE = "100/hour"
    if time.time() % 3600 > 3590:  # not across two windows (an hour each)
        time.sleep(11)
    key = f"throttle_anon_127.0.0.1:{int(time.time() // 3600)}"  # APIClient's address
    caches["default"].clear()  # (counts of earlier tests: the table is not flushed)
    holder = connections.create_connection("default")
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:  # a first count, stuck before its commit
            cursor.execute("INSERT INTO feedpub_cache (cache_key, value, expires) "
                           "VALUES (%s, %s, now() + interval '1 hour')",
                           [caches["default"].make_and_validate_key(key), "stuck"])
        release = threading.Timer(3, holder.connection.rollback)
        release.start()
        try:
            (status_code, seconds), = timed_statuses(APIClient(), 1)
        finally:
            release.cancel()
            holder.connection.rollback()
    finally:
        holder.close()
    assert status_code == 200
    assert seconds < 1
    assert "not counted" in caplog.text
    assert timed_statuses(APIClient(), 1)[0][0] == 200
    assert caches["default"].get(key) == 1  # counted once it is gone


def counter_keys() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT cache_key FROM feedpub_cache")
        return [key.split(":", 2)[2] for (key,) in cursor.fetchall()]


SQLITE_WRITER_HOLDS_THE_LOCK = """
import json, sqlite3, sys, time
import django
django.setup()
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
client = Client()
first = client.get("/api/feeds/").status_code
holder = sqlite3.connect(sys.argv[1], isolation_level=None)
holder.execute("BEGIN IMMEDIATE")  # a writer mid-transaction: an import, a seal
began = time.monotonic()
second = client.get("/api/feeds/").status_code
seconds = time.monotonic() - began
holder.execute("ROLLBACK")
third = client.get("/api/feeds/").status_code
from django.core.cache import cache
counts = [cache.get(key.split(":", 2)[2]) for (key,) in
          holder.execute("SELECT cache_key FROM feedpub_cache")]
print(json.dumps([first, second, seconds, third, counts]))
"""


def test_sqlites_write_lock_held_leaves_requests_uncounted_at_once(tmp_path):
    """On SQLite a count is a write: it waited for the write lock as every writer does (20 s),
    then failed the request."""
    database = tmp_path / "held.sqlite3"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DATABASE_URL", "FEEDPUB_", "DJANGO_", "POSTGRES_"))}
    env.update({"DATABASE_URL": f"sqlite:///{database}", "DJANGO_SETTINGS_MODULE":
                "feedpub.settings", "DEBUG": "false", "SECRET_KEY": "test",
                "SECURE_SSL_REDIRECT": "false", "ALLOWED_HOSTS": "testserver",
                "FEEDPUB_API_PROXIES": "0", "PYTHONPATH": str(ROOT)})
    run = subprocess.run([sys.executable, "-c", SQLITE_WRITER_HOLDS_THE_LOCK,  # noqa: S603
                          str(database)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    first, second, seconds, third, counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert (first, second, third) == (200, 200, 200), run.stdout
    assert seconds < 1, run.stdout
    assert "not counted" in run.stdout
    assert counts == [2], run.stdout  # counted again once the lock is free
