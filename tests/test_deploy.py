"""The deployment files agree with each other and with what the benchmark runs, the
production settings pass `check --deploy`, /healthz answers for the database, and the
container health check passes whatever ALLOWED_HOSTS says. (tests/test_nginx.py runs the
nginx template for real.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock

import pytest
import yaml
from django.db import DatabaseError
from django.http.request import validate_host
from django.urls import reverse

from .nginx_server import VARIABLES, Nginx, render_template, require_nginx

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ENTRYPOINT = (ROOT / "deploy" / "entrypoint.sh").read_text()
TEMPLATE = ROOT / "deploy" / "nginx" / "feedpub.conf.template"


def bench_module():
    """bench/run.py's constants, without running it (importing it sets environment
    variables, so read them from its source instead)."""
    source = (ROOT / "bench" / "run.py").read_text()
    namespace = {}
    for name in ("ENTRYPOINT", "MIGRATE_COMMAND", "WEB_COMMAND", "SEALER_COMMAND"):
        line = re.search(rf"^{name} = (.+)$", source, re.MULTILINE).group(1)
        namespace[name] = eval(line, {}, namespace)  # noqa: S307 (our own literal)
    return namespace, source


def entrypoint_commands() -> dict[str, str]:
    """The `case` arms of deploy/entrypoint.sh: name -> the command it execs."""
    return dict(re.findall(r"^  (\w+)\)\n(?:(?!\s+exec ).*\n)*?\s+exec (.+)$", ENTRYPOINT,
                           re.MULTILINE))


def test_the_image_runs_every_process_through_the_entrypoint():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["deploy/entrypoint.sh"]' in dockerfile
    assert 'CMD ["web"]' in dockerfile
    assert "collectstatic --noinput" in dockerfile


def test_the_entrypoint_names_gunicorn_with_our_config_and_the_watching_sealer():
    commands = entrypoint_commands()
    assert commands["web"] == "gunicorn -c deploy/gunicorn.conf.py feedpub.wsgi"
    assert commands["sealer"].startswith("python manage.py seal_archives --watch ")
    assert commands["migrate"] == "python manage.py migrate --noinput"
    # The ASGI service for long polls, without persistent connections (Django serves each
    # ASGI request in a thread of its own).
    assert commands["longpoll"].startswith("env CONN_MAX_AGE=0 uvicorn feedpub.asgi:application ")


def test_every_compose_app_service_runs_an_entrypoint_command():
    commands = entrypoint_commands()
    assert commands["websub"] == "python manage.py websub_worker"
    for name in ("migrate", "web", "sealer", "websub", "longpoll"):
        assert SERVICES[name]["build"] == "."
        assert SERVICES[name]["command"] == [name]
        assert name in commands


def test_the_benchmark_runs_the_same_commands_as_compose():
    bench, source = bench_module()
    assert bench["ENTRYPOINT"] == "deploy/entrypoint.sh"
    for name, constant in (("web", "WEB_COMMAND"), ("sealer", "SEALER_COMMAND"),
                           ("migrate", "MIGRATE_COMMAND")):
        assert bench[constant] == [bench["ENTRYPOINT"], *SERVICES[name]["command"]]
        assert f"start({constant}" in source or f"sh(*{constant}" in source
    assert "NGINX_TEMPLATE = ROOT / \"deploy\" / \"nginx\" / \"feedpub.conf.template\"" in source


def test_the_websub_benchmark_runs_the_worker_as_compose_does():
    source = (ROOT / "bench" / "websub.py").read_text()
    command = eval(re.search(r"^WORKER_COMMAND = (.+)$", source, re.MULTILINE).group(1))  # noqa: S307
    assert command == ["deploy/entrypoint.sh", *SERVICES["websub"]["command"]]
    assert "subprocess.Popen(WORKER_COMMAND" in source


def test_compose_nginx_renders_the_template_the_benchmark_renders():
    nginx = SERVICES["nginx"]
    # Rendered as conf.d/default.conf, it replaces the image's welcome server (which would
    # answer requests for Host "localhost").
    mount = f"./deploy/nginx/{TEMPLATE.name}:/etc/nginx/templates/default.conf.template:ro"
    assert mount in nginx["volumes"]
    variables = set(re.findall(r"\$\{(\w+)\}", TEMPLATE.read_text()))
    assert variables == set(nginx["environment"]) == set(VARIABLES)
    assert nginx["environment"]["FEEDPUB_UPSTREAM"] == "web:8000"
    assert SERVICES["web"]["environment"]["GUNICORN_BIND"] == "0.0.0.0:8000"
    assert nginx["environment"]["FEEDPUB_LONGPOLL_UPSTREAM"] == \
        f"longpoll:{SERVICES['longpoll']['environment']['LONGPOLL_PORT']}"
    assert SERVICES["longpoll"]["expose"] == [SERVICES["longpoll"]["environment"]["LONGPOLL_PORT"]]


def test_nginx_caches_documents_and_passes_the_rest_through():
    text = re.sub(r"#.*", "", TEMPLATE.read_text())
    locations = dict(re.findall(r"location (\S+) \{\n(.*?)\n    \}", text, re.DOTALL))
    assert "proxy_cache feedpub;" in locations["/feeds/"]
    assert "proxy_cache_valid" not in text  # only what Cache-Control allows is cached
    assert "proxy_cache" not in locations["/"]


def test_nginx_serves_an_expired_copy_only_when_feedpub_fails():
    text = re.sub(r"#.*", "", TEMPLATE.read_text())
    stale = re.findall(r"proxy_cache_use_stale ([^;]*);", text)
    # (/feeds/, and archive pages without an exported file)
    assert stale == ["error timeout http_500 http_502 http_503 http_504"] * 2
    assert "proxy_cache_background_update" not in text


def test_the_template_keeps_the_comment_naming_its_variables():
    head = TEMPLATE.read_text().split("\n\n")[0]
    assert all(name in head for name in VARIABLES)


def test_the_template_renders_and_nginx_accepts_it(tmp_path):
    require_nginx()
    # The compose file's values, but an upstream and a cache directory that exist here
    # (nginx -t resolves upstream names and creates the cache directory).
    environment = SERVICES["nginx"]["environment"]
    nginx = Nginx(tmp_path, "127.0.0.1:8000", listen=environment["NGINX_PORT"])
    nginx.write_config()
    assert "${" not in (tmp_path / "feedpub.conf").read_text()
    result = nginx.test_config()
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_the_renderer_does_what_envsubst_does():
    if shutil.which("envsubst") is None:
        pytest.skip("needs envsubst (gettext-base)")
    values = {"NGINX_PORT": "80", "FEEDPUB_UPSTREAM": "web:8000",
              "NGINX_CACHE_DIR": "/var/cache/nginx/feedpub", "NGINX_CACHE_SIZE": "2g",
              "FEEDPUB_PAGES_DIR": "/srv/feedpub/pages", "FEEDPUB_BASE_URL": "https://x.test",
              "FEEDPUB_MAX_AGE": "60", "FEEDPUB_LONGPOLL_UPSTREAM": "longpoll:8001",
              "FEEDPUB_SECURE_SSL_REDIRECT": "true", "FEEDPUB_SECURE_HSTS_SECONDS": "31536000",
              "FEEDPUB_SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
              "FEEDPUB_SECURE_HSTS_PRELOAD": "true", "NGINX_RESOLVER": "127.0.0.11 valid=10s"}
    shell_format = " ".join(f"${{{name}}}" for name in values)
    real = subprocess.run(["envsubst", shell_format], input=TEMPLATE.read_text(),  # noqa: S603, S607
                          env={**os.environ, **values}, capture_output=True, text=True,
                          check=True).stdout
    assert render_template(values) == real


def test_only_nginx_is_published():
    published = [name for name, service in SERVICES.items() if "ports" in service]
    assert published == ["nginx"]
    assert SERVICES["web"]["expose"] == ["8000"]


def test_the_image_defaults_to_production_settings():
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    image_env = dict(re.findall(r"(\w+)=(\S+)", " ".join(
        line[len("ENV "):] for line in dockerfile.splitlines() if line.startswith("ENV "))))
    assert image_env["DEBUG"] == "false"
    env = {key: value for key, value in os.environ.items() if key != "DEBUG"}
    result = manage("shell", "-c", "from django.conf import settings; print(settings.DEBUG)",
                    env={**env, **image_env, "SECRET_KEY": "x8#Lq" * 12})
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr


def test_the_page_cache_is_sized_from_the_environment():
    for name in ("web", "sealer", "migrate"):
        size = SERVICES[name]["environment"]["FEEDPUB_PAGE_CACHE_BYTES"]
        assert size == "${FEEDPUB_PAGE_CACHE_BYTES:-67108864}"
    assert "\nFEEDPUB_PAGE_CACHE_BYTES=67108864\n" in (ROOT / ".env.example").read_text()


def test_postgres_has_a_volume_and_a_health_check_that_the_app_waits_for():
    db = SERVICES["db"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert SERVICES["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert SERVICES["web"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully"
    )
    assert SERVICES["web"]["healthcheck"]["test"] == HEALTHCHECK


def test_every_variable_compose_needs_is_in_the_committed_env_example():
    example = (ROOT / ".env.example").read_text()
    names = set(re.findall(r"^([A-Z_]+)=", example, re.MULTILINE))
    used = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    assert used <= names
    assert {"SECRET_KEY", "FEEDPUB_BASE_URL", "ALLOWED_HOSTS"} <= names


def production_environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SECURE_", "DEBUG", "SECRET_KEY"))}
    env.update({"DEBUG": "false", "SECRET_KEY": "x8#Lq" * 12,
                "DJANGO_SETTINGS_MODULE": "feedpub.settings", **extra})
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,  # noqa: S603
                          capture_output=True, text=True, check=False)


def test_check_deploy_is_clean_with_debug_off():
    result = manage("check", "--deploy", "--fail-level", "WARNING",
                    env=production_environment())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_secret_key_can_come_from_a_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file-" + "y" * 50 + "\n")
    env = production_environment(SECRET_KEY_FILE=str(secret))
    del env["SECRET_KEY"]
    result = manage("shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)",
                    env=env)
    assert result.stdout.strip().splitlines()[-1] == "from-a-file-" + "y" * 50


def test_settings_refuse_to_start_without_a_secret_key_when_debug_is_off():
    env = production_environment()
    del env["SECRET_KEY"]
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_healthz_answers_ok_when_the_database_answers(client, db):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.content == b"ok\n"
    assert "no-cache" in response["Cache-Control"]


def test_healthz_answers_503_when_the_database_does_not(client, db):
    with mock.patch("django.db.backends.utils.CursorWrapper.execute",
                    side_effect=DatabaseError("connection refused")):
        response = client.get(reverse("healthz"))
    assert response.status_code == 503


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_healthz_refuses_writes(client, db, method):
    assert getattr(client, method)(reverse("healthz")).status_code == 405


# The container health check (deploy/healthcheck.py) --------------------------------------

HEALTHCHECK = ["CMD", "python", "deploy/healthcheck.py"]


def healthcheck_module():
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_and_compose_run_the_same_health_check():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"CMD {json.dumps(HEALTHCHECK[1:])}" in dockerfile
    assert SERVICES["web"]["healthcheck"]["test"] == HEALTHCHECK


@pytest.mark.parametrize(("allowed", "host"), [
    (["feeds.example.org", "localhost"], "feeds.example.org"),
    ([".example.org"], "example.org"),
    (["*"], "localhost"),
    ([], "localhost"),
])
def test_the_health_check_sends_a_host_that_allowed_hosts_accepts(allowed, host):
    assert healthcheck_module().allowed_host(allowed) == host
    if allowed:
        assert validate_host(host, allowed)


@pytest.mark.parametrize(("bind", "url"), [
    ("0.0.0.0:8000", "http://127.0.0.1:8000/healthz"),
    ("[::]:8001", "http://[::1]:8001/healthz"),
    ("10.1.2.3:9000", "http://10.1.2.3:9000/healthz"),
])
def test_the_health_check_asks_gunicorn_where_it_listens(bind, url):
    assert healthcheck_module().health_url(bind) == url


def test_the_container_health_check_passes_whatever_allowed_hosts_says(live_server, settings,
                                                                       transactional_db):
    settings.ALLOWED_HOSTS = ["feeds.example.org"]  # as in .env.example
    port = live_server.thread.port
    env = {**os.environ, "ALLOWED_HOSTS": "feeds.example.org", "GUNICORN_BIND": f"0.0.0.0:{port}",
           "DJANGO_SETTINGS_MODULE": "feedpub.settings"}
    result = subprocess.run([sys.executable, "deploy/healthcheck.py"], cwd=ROOT, env=env,  # noqa: S603
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 0, result.stderr
    # What the check asked before: Host 127.0.0.1, which such a deployment refuses.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)  # noqa: S310
    assert refused.value.code == 400
