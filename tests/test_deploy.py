"""The deployment files agree with each other and with what the benchmark runs, the
production settings pass `check --deploy`, and /healthz answers for the database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml
from django.db import DatabaseError
from django.urls import reverse

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
    return dict(re.findall(r"^  (\w+)\)\n\s+exec (.+)$", ENTRYPOINT, re.MULTILINE))


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


def test_every_compose_app_service_runs_an_entrypoint_command():
    commands = entrypoint_commands()
    for name in ("migrate", "web", "sealer"):
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


def test_compose_nginx_renders_the_template_the_benchmark_renders():
    nginx = SERVICES["nginx"]
    mount = f"./deploy/nginx/{TEMPLATE.name}:/etc/nginx/templates/{TEMPLATE.name}:ro"
    assert mount in nginx["volumes"]
    variables = set(re.findall(r"\$\{(\w+)\}", TEMPLATE.read_text()))
    assert variables == set(nginx["environment"])
    assert nginx["environment"]["FEEDPUB_UPSTREAM"] == "web:8000"
    assert SERVICES["web"]["environment"]["GUNICORN_BIND"] == "0.0.0.0:8000"


def test_nginx_caches_documents_and_passes_the_rest_through():
    text = re.sub(r"#.*", "", TEMPLATE.read_text())
    locations = dict(re.findall(r"location (\S+) \{\n(.*?)\n    \}", text, re.DOTALL))
    assert "proxy_cache feedpub;" in locations["/feeds/"]
    assert "proxy_cache_valid" not in text  # only what Cache-Control allows is cached
    assert "proxy_cache" not in locations["/"]


def test_postgres_has_a_volume_and_a_health_check_that_the_app_waits_for():
    db = SERVICES["db"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert SERVICES["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert SERVICES["web"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully"
    )
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])


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
