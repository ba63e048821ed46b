"""The deployment files agree with each other and with what the benchmark runs, the
production settings pass `check --deploy`, /healthz answers for the database, and the
container health check passes whatever ALLOWED_HOSTS says. (tests/test_nginx.py runs the
nginx template for real.)"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from unittest import mock

import pytest
import yaml
from django.db import DatabaseError
from django.http.request import validate_host
from django.urls import reverse

from feedpub.release import described

from .nginx_server import TLS_VARIABLES, VARIABLES, Nginx, render_template, require_nginx

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
    assert commands["longpoll"].startswith(
        "env -u CONN_MAX_AGE_FILE CONN_MAX_AGE=0 uvicorn feedpub.asgi:application ")


def test_every_compose_app_service_runs_an_entrypoint_command():
    commands = entrypoint_commands()
    assert commands["websub"] == "python manage.py websub_worker"
    for name in ("migrate", "web", "sealer", "websub", "longpoll"):
        assert SERVICES[name]["build"]["context"] == "."
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


def test_the_benchmark_renders_every_variable_of_the_template():
    _, source = bench_module()
    body = source.split("def start_nginx()", 1)[1].split("text = NGINX_TEMPLATE", 1)[0]
    assert set(re.findall(r'"([A-Z_]+)": ', body)) == set(VARIABLES)


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
    assert variables == set(VARIABLES)
    # and deploy/nginx/tls.sh's, which writes what the template includes beside it
    assert set(nginx["environment"]) == set(VARIABLES) | set(TLS_VARIABLES)
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
              "FEEDPUB_SECURE_HSTS_PRELOAD": "true", "NGINX_RESOLVER": "127.0.0.11 valid=10s",
              "NGINX_ACME_ROOT": "/var/www/acme"}
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
    assert response.content == f"ok feedpub {described()}\n".encode()
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


# What goes into the image ------------------------------------------------------------------

def copied_into_the_image() -> list[str]:
    """The sources of the Dockerfile's COPY instructions, as paths of the checkout."""
    copies = re.findall(r"^COPY (.+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    return [source.rstrip("/") for line in copies for source in line.split()[:-1]]


# Top-level paths of the checkout that the processes never read.
NOT_FOR_THE_IMAGE = {"tests", "bench", "docs", ".ci", "mkdocs.yml", "README.md", "Dockerfile",
                     ".dockerignore", ".gitignore", "docker-compose.yml", ".env.example",
                     "CHANGELOG.md", ".gitattributes"}


def test_the_image_holds_what_the_processes_run_and_no_tests_docs_or_benchmarks():
    copied = copied_into_the_image()
    assert "." not in copied  # everything, tests, benchmarks, docs and CI included
    top = {path.split("/")[0] for path in copied}
    assert top & NOT_FOR_THE_IMAGE == set()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,  # noqa: S607
                             text=True, check=True).stdout.split()
    # Every top-level path is either copied or named as not needed: a new one is decided.
    assert {path.split("/")[0] for path in tracked} - NOT_FOR_THE_IMAGE <= top
    for path in NOT_FOR_THE_IMAGE - {".env.example"}:  # nor in the build context
        assert dockerignored(path) or path in {"Dockerfile", ".dockerignore", ".gitignore",
                                               ".gitattributes",
                                               "docker-compose.yml", "README.md"}, path


def test_what_the_image_copies_is_enough_to_run(tmp_path):
    """The image's files alone (the Dockerfile's COPYs into an empty folder), with
    production settings: Django's checks pass (settings, URLs, templates, models) and the
    entrypoint runs."""
    app = tmp_path / "app"
    app.mkdir()
    for source in copied_into_the_image():
        target = app / source
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / source, target)
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "DJANGO_SETTINGS_MODULE": "feedpub.settings", "DEBUG": "false",
           "SECRET_KEY": "test-only-" + "x" * 50, "ALLOWED_HOSTS": "feeds.example.org",
           "FEEDPUB_BASE_URL": "https://feeds.example.org"}
    where = ("import django; django.setup(); import archives, feedpub.urls; "
             "print(archives.__file__)")
    result = subprocess.run(["sh", "deploy/entrypoint.sh", "python", "-c", where],  # noqa: S603, S607
                            cwd=app, env=env, capture_output=True, text=True, check=False,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(app / "archives" / "__init__.py")  # not the checkout's
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=app, env=env,  # noqa: S603
                           capture_output=True, text=True, check=False, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


# Secrets stay out of git and the image ----------------------------------------------------

def dockerignored(path: str) -> bool:
    """Whether `docker build` leaves `path` out of the context, as Docker reads .dockerignore:
    each pattern (Go's filepath.Match, plus `**`) matches the path or a folder above it, a
    `!` pattern takes it back in, and the last pattern that matches decides."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        keep = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        regex = "".join(".*" if part == "**" else re.escape(part).replace(r"\*", "[^/]*")
                        .replace(r"\?", "[^/]") for part in re.split(r"(\*\*)", pattern))
        if re.fullmatch(rf"{regex}(/.*)?", path):
            ignored = not keep
    return ignored


SECRET_FILES = [".env", ".env.production", ".env.local", ".envrc"]


@pytest.mark.parametrize("path", SECRET_FILES)
def test_filled_in_env_files_stay_out_of_the_image_and_out_of_git(path):
    assert dockerignored(path)
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT,  # noqa: S603, S607
                             check=False)
    assert ignored.returncode == 0, f"git would commit {path}"


def test_the_example_and_the_code_go_into_the_image_and_into_git():
    for path in (".env.example", "manage.py", "deploy/entrypoint.sh", "deploy/constraints.txt"):
        assert not dockerignored(path), path
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", ".env.example"],  # noqa: S607
                             cwd=ROOT, check=False)
    assert ignored.returncode == 1


# The entrypoint: NAME_FILE and open files ---------------------------------------------------

SHELLS = [shell for shell in ("sh", "bash") if shutil.which(shell)]
# What docker compose itself reads from .env to fill in docker-compose.yml: no file can stand
# in for these (.env.example's header says so).
COMPOSE_READS = {"POSTGRES_USER", "POSTGRES_DB", "FEEDPUB_BASE_URL", "FEEDPUB_MAX_AGE",
                 "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
                 "SECURE_HSTS_PRELOAD", "FEEDPUB_PAGE_CACHE_BYTES",
                 "FEEDPUB_WEBSUB_CALLBACK_HOSTS", "HTTP_PORT", "NGINX_CACHE_SIZE",
                 "POSTGRES_PASSWORD_FILE",
                 # HTTPS (docs/deploying/https.md): nginx's and certbot's
                 "HTTPS_PORT", "FEEDPUB_TLS_CERT", "FEEDPUB_TLS_KEY", "FEEDPUB_TRUSTED_PROXIES",
                 "FEEDPUB_TLS_CHECK_SECONDS",
                 "LETSENCRYPT_DOMAINS", "LETSENCRYPT_EMAIL", "LETSENCRYPT_OPTIONS"}


def run_entrypoint(shell: str, *command: str, env: dict[str, str],
                   limit: str = "") -> subprocess.CompletedProcess:
    """deploy/entrypoint.sh under `shell` with only `env` (and PATH), after `limit` (a ulimit
    command), as a container runs it."""
    base = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "DJANGO_SETTINGS_MODULE": "feedpub.settings"}
    script = f"{limit}\nexec {shell} deploy/entrypoint.sh \"$@\""
    return subprocess.run([shell, "-c", script, shell, *command], cwd=ROOT,  # noqa: S603
                          env={**base, **env}, capture_output=True, text=True, check=False,
                          timeout=60)


def settings_reads() -> set[str]:
    source = (ROOT / "feedpub" / "settings.py").read_text()
    return set(re.findall(r'(?:env(?:bool|int|rate)?|app_setting)\(\s*"([A-Z0-9_]+)"', source))


def entrypoint_file_variables() -> set[str]:
    loop = re.search(r"^for name in (.*?); do$", ENTRYPOINT, re.MULTILINE | re.DOTALL).group(1)
    return set(loop.replace("\\", " ").split())


def test_every_variable_of_the_example_can_come_from_a_file():
    example = set(re.findall(r"^([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    header = (ROOT / ".env.example").read_text().split("\n\n")[0]
    for name in COMPOSE_READS - {"POSTGRES_PASSWORD_FILE"}:
        named = name in header or (name.startswith("SECURE_") and "SECURE_*" in header)
        assert named, f".env.example's header should name {name} as compose's"
    from_files = settings_reads() | entrypoint_file_variables()
    assert example - COMPOSE_READS - from_files == set()


def test_what_the_processes_read_before_the_settings_can_come_from_a_file():
    scripts = ENTRYPOINT + (ROOT / "deploy" / "gunicorn.conf.py").read_text()
    read = set(re.findall(r'\$\{([A-Z][A-Z0-9_]*):-', scripts))
    read |= set(re.findall(r'os\.environ(?:\.get\(|\[)"([A-Z][A-Z0-9_]*)"', scripts))
    assert read - {"PATH"} <= entrypoint_file_variables() | settings_reads()


@pytest.mark.parametrize("shell", SHELLS)
def test_gunicorn_settings_come_from_files(tmp_path, shell):
    (tmp_path / "workers").write_text("7\n")
    read = "import runpy; print(runpy.run_path('deploy/gunicorn.conf.py')['workers'])"
    result = run_entrypoint(shell, "python", "-c", read,
                            env={"WEB_CONCURRENCY_FILE": str(tmp_path / "workers")})
    assert result.stdout.strip() == "7", result.stderr
    both = run_entrypoint(shell, "true", env={"WEB_CONCURRENCY_FILE": str(tmp_path / "workers"),
                                              "WEB_CONCURRENCY": "2"})
    assert both.returncode == 1
    assert "both WEB_CONCURRENCY and WEB_CONCURRENCY_FILE" in both.stderr
    unrelated = run_entrypoint(shell, "sh", "-c", 'echo "$SSL_CERT_FILE"',
                               env={"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"})
    assert unrelated.stdout.strip() == "/etc/ssl/certs/ca-certificates.crt"  # not ours


DATABASE = ("import django; django.setup(); from django.conf import settings; "
            "d = settings.DATABASES['default']; print(d['HOST'], d['PORT'], d['USER'], d['NAME']);"
            " print(d['PASSWORD'])")


@pytest.mark.parametrize("password", ["p/ss#word@host:1?x=y%", "plain"])
def test_the_database_password_comes_from_a_file_with_any_characters(tmp_path, password):
    """As compose gives it: POSTGRES_HOST=db and POSTGRES_PASSWORD_FILE, the secret that the
    postgres image reads too."""
    (tmp_path / "password").write_text(password + "\n")
    result = run_entrypoint(SHELLS[0], "python", "-c", DATABASE, env={
        "POSTGRES_HOST": "db", "POSTGRES_USER": "feedpub", "POSTGRES_DB": "feedpub",
        "POSTGRES_PASSWORD_FILE": str(tmp_path / "password")})
    assert result.stdout.splitlines() == ["db 5432 feedpub feedpub", password], result.stderr


def test_a_database_url_from_the_environment_wins():
    result = run_entrypoint(SHELLS[0], "python", "-c", DATABASE, env={
        "DATABASE_URL": "postgres://u:pw@elsewhere:6543/x", "POSTGRES_HOST": "db"})
    assert result.stdout.splitlines() == ["elsewhere 6543 u x", "pw"], result.stderr


@pytest.fixture
def fake_uvicorn(tmp_path):
    """A `uvicorn` that prints its soft open-file limit: what the service would start with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uvicorn").write_text("#!/bin/sh\nulimit -Sn\n")
    (bin_dir / "uvicorn").chmod(0o755)
    return str(bin_dir)


def hard_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_long_poll_service_raises_its_open_file_limit(fake_uvicorn, shell):
    needed = 2000 + 256  # LONGPOLL_LIMIT_CONCURRENCY + 256
    if hard_limit() < needed:
        pytest.skip("this machine's hard limit is too low")
    result = run_entrypoint(shell, "longpoll", limit="ulimit -Sn 1024",
                            env={"PATH": f"{fake_uvicorn}:{os.environ['PATH']}",
                                 "LONGPOLL_LIMIT_CONCURRENCY": "2000"})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= needed


@pytest.mark.parametrize("shell", SHELLS)
def test_the_long_poll_service_keeps_no_connection_even_with_conn_max_age_from_a_file(
        tmp_path, shell):
    """Its bound on database connections needs CONN_MAX_AGE=0, which a CONN_MAX_AGE_FILE
    (every setting may come from a file) must not undo: the settings prefer the file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uvicorn").write_text(f"#!/bin/sh\nexec {sys.executable} -c \"{CONN_MAX_AGE}\"\n")
    (bin_dir / "uvicorn").chmod(0o755)
    (tmp_path / "age").write_text("600\n")
    result = run_entrypoint(shell, "longpoll", env={
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "LONGPOLL_LIMIT_CONCURRENCY": "100",
        "CONN_MAX_AGE_FILE": str(tmp_path / "age")})
    assert result.stdout.strip() == "0", result.stderr


CONN_MAX_AGE = ("import django; django.setup(); from django.conf import settings; "
                "print(settings.DATABASES['default']['CONN_MAX_AGE'])")


@pytest.mark.parametrize("shell", SHELLS)
def test_the_long_poll_service_refuses_a_limit_it_cannot_raise(fake_uvicorn, shell):
    result = run_entrypoint(shell, "longpoll", limit="ulimit -n 1024",  # soft and hard
                            env={"PATH": f"{fake_uvicorn}:{os.environ['PATH']}"})
    assert result.returncode == 1
    assert result.stdout == ""  # never started
    assert "open-file limit is 1024 (hard 1024), below the 10256" in result.stderr
    assert "the host's hard limit" in result.stderr


def test_nginx_asks_docker_dns_for_the_upstreams_every_two_seconds():
    """Docker's DNS answers with a TTL of 600 s: without `valid`, a recreated container's new
    address would wait ten minutes; every 2 s, a recreated web is found within 2 s."""
    assert SERVICES["nginx"]["environment"]["NGINX_RESOLVER"] == "127.0.0.11 valid=2s ipv6=off"
    template = TEMPLATE.read_text()
    assert "resolver ${NGINX_RESOLVER};" in template
    assert "upstream " not in re.sub(r"#.*", "", template)  # no name resolved once at start
    targets = re.findall(r"proxy_pass (\S+);", template)
    assert targets
    assert all(target.startswith("$") for target in targets), targets


NGINX_CONF = ROOT / "deploy" / "nginx" / "nginx.conf"
OPEN_FILES = ROOT / "deploy" / "nginx" / "open-files.sh"


def test_compose_sets_no_open_file_limit_that_the_host_may_not_allow():
    """A hard `ulimits: nofile` above the host's (rootless Docker, a daemon with a lower
    LimitNOFILE) fails the container's start with runc's opaque "rlimit type 7"; nginx's
    worker_rlimit_nofile sets the hard limit too. The services raise their soft limit
    themselves instead (the entrypoint, open-files.sh)."""
    for name, service in SERVICES.items():
        assert "nofile" not in service.get("ulimits", {}), name
    assert "worker_rlimit_nofile" not in re.sub(r"#.*", "", NGINX_CONF.read_text())
    connections = int(re.search(r"worker_connections\s+(\d+);", NGINX_CONF.read_text()).group(1))
    assert connections >= 2 * 10_000  # two a long poll, for LONGPOLL_LIMIT_CONCURRENCY polls
    volumes = SERVICES["nginx"]["volumes"]
    assert "./deploy/nginx/nginx.conf:/etc/nginx/nginx.conf:ro" in volumes
    # The image's entrypoint and command run through it, so that nginx inherits its limit
    # (an entrypoint set in compose clears the image's command, which must be repeated).
    assert "./deploy/nginx/open-files.sh:/feedpub/open-files.sh:ro" in volumes
    assert SERVICES["nginx"]["entrypoint"] == ["/bin/sh", "/feedpub/open-files.sh",
                                               "/docker-entrypoint.sh"]
    assert SERVICES["nginx"]["command"] == ["nginx", "-g", "daemon off;"]


def run_open_files(shell: str, limit: str, tmp_path: Path, connections: int,
                   command: tuple[str, ...] = ("sh", "-c", "ulimit -Sn"),
                   ) -> subprocess.CompletedProcess:
    """deploy/nginx/open-files.sh as compose runs it, after `limit`, reading a copy of
    nginx.conf with `connections` a worker, with a command that prints the soft limit it
    was started with (nginx's, in the container)."""
    conf = tmp_path / "nginx.conf"
    conf.write_text(re.sub(r"worker_connections\s+\d+;", f"worker_connections {connections};",
                           NGINX_CONF.read_text()))
    script = tmp_path / "open-files.sh"
    script.write_text(OPEN_FILES.read_text().replace("/etc/nginx/nginx.conf", str(conf)))
    return subprocess.run([shell, "-c", f'{limit}\nexec {shell} {script} "$@"', shell,  # noqa: S603
                           *command],
                          capture_output=True, text=True, check=False, timeout=30)


@pytest.mark.parametrize("shell", SHELLS)
def test_nginx_raises_its_soft_open_file_limit_up_to_the_hard_one(shell, tmp_path):
    hard = hard_limit()
    if hard < 4096:
        pytest.skip("this machine's hard limit is too low")
    result = run_open_files(shell, "ulimit -Sn 1024", tmp_path, connections=2048)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == min(hard, 65536)


@pytest.mark.parametrize("shell", SHELLS)
def test_nginx_fits_its_connections_to_a_hard_open_file_limit_below_them(shell, tmp_path):
    """A host that allows containers 20,000 open files (seen on a real Docker engine): nginx
    starts, through the image's entrypoint, with a configuration holding fewer connections,
    and says so; it used to refuse, leaving the stack without its front door."""
    if hard_limit() < 20000:
        pytest.skip("this machine's hard limit is below 20,000")
    entrypoint = tmp_path / "docker-entrypoint.sh"  # prints what it was asked to run
    entrypoint.write_text('#!/bin/sh\nprintf "%s\\n" "$@"; ulimit -Sn\n')
    entrypoint.chmod(0o755)
    result = run_open_files(shell, "ulimit -n 20000", tmp_path, connections=24576,
                            command=(str(entrypoint), "nginx", "-g", "daemon off;"))
    assert result.returncode == 0, result.stderr
    fitted = tmp_path / "nginx-fitted.conf"
    assert result.stdout.splitlines() == ["nginx", "-c", str(fitted), "-g", "daemon off;",
                                          "20000"]
    assert "hard open-file limit is 20000, below the 24576 connections" in result.stderr
    assert "nginx runs with 19872" in result.stderr
    assert re.findall(r"worker_connections\s+(\d+);", fitted.read_text()) == ["19872"]
    assert fitted.read_text().replace("19872", "24576") == (tmp_path / "nginx.conf").read_text()


@pytest.mark.parametrize("shell", SHELLS)
def test_nginx_refuses_a_hard_open_file_limit_below_a_thousand_connections(shell, tmp_path):
    result = run_open_files(shell, "ulimit -n 1024", tmp_path, connections=24576)
    assert result.returncode == 1
    assert result.stdout == ""  # nginx would never start
    assert "hard open-file limit is 1024, too low for nginx" in result.stderr
    assert "ulimits: nofile" in result.stderr


def test_web_waits_for_gunicorns_graceful_timeout_before_a_sigkill():
    """compose's default grace is 10 s: gunicorn's workers would be killed mid-request."""
    source = (ROOT / "deploy" / "gunicorn.conf.py").read_text()
    graceful = int(re.search(r"^graceful_timeout = (\d+)$", source, re.MULTILINE).group(1))
    for name in ("web", "sealer", "websub"):
        assert SERVICES[name].get("stop_grace_period") == f"{graceful}s", name


# Health checks ------------------------------------------------------------------------------

def test_every_long_running_service_has_a_health_check():
    for name, service in SERVICES.items():
        check = service.get("healthcheck", {})
        if name == "migrate":  # a one-shot: what counts is that it completed
            assert check == {"disable": True}
            continue
        assert not check.get("disable"), name
        assert check["test"][0] in {"CMD", "CMD-SHELL"}, name


@pytest.mark.parametrize("name", ["sealer", "websub"])
def test_the_services_without_a_port_check_their_database(name, db):
    assert SERVICES[name]["healthcheck"]["test"] == [*HEALTHCHECK, "--database"]
    assert healthcheck_module().main(["--database"]) == 0
    with mock.patch("django.db.backends.utils.CursorWrapper.execute",
                    side_effect=DatabaseError("connection refused")):
        assert healthcheck_module().main(["--database"]) == 1


def test_the_long_poll_service_is_checked_at_its_own_port():
    port = SERVICES["longpoll"]["environment"]["LONGPOLL_PORT"]
    assert SERVICES["longpoll"]["healthcheck"]["test"] == [*HEALTHCHECK, f"127.0.0.1:{port}"]
    assert healthcheck_module().health_url(f"127.0.0.1:{port}") == \
        f"http://127.0.0.1:{port}/healthz"


def test_the_nginx_health_check_passes_against_the_deploy_nginx(tmp_path):
    """docker-compose.yml's command, run against the deploy's nginx on a port of this machine
    (bash and the tools it uses are in the nginx image, as in every Debian image)."""
    require_nginx()
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9").start()  # no upstream needed
    try:
        command = [part.replace("/127.0.0.1/80 ", f"/127.0.0.1/{nginx.port} ")
                   for part in SERVICES["nginx"]["healthcheck"]["test"][1:]]
        assert command != SERVICES["nginx"]["healthcheck"]["test"][1:]
        assert subprocess.run(command, check=False, timeout=10).returncode == 0  # noqa: S603
    finally:
        nginx.stop()
    assert subprocess.run(command, check=False, timeout=10,  # noqa: S603
                          capture_output=True).returncode != 0  # and fails when it is down


# Sizes, pins, static files, gunicorn ------------------------------------------------------

def test_every_file_gives_one_page_cache_size_and_the_code_agrees():
    from archives.documents import base, feeds
    from archives.html import activity, pages

    caches = [base.final_pages, base.subscription_bodies, base.gzipped_bodies,
              pages.rendered, feeds.sealed_pages_by_date, activity.charts]
    default = 64 * 1024 * 1024
    scale = default / base.final_pages.max_bytes  # the tests may run with another size
    mib = round(sum(cache.max_bytes for cache in caches) * scale / 2**20)
    assert mib == 97
    for path in (".env.example", "docker-compose.yml", "archives/conf.py",
                 "docs/deploying/compose.md", "docs/deploying/settings.md",
                 "docs/how-it-works/caching.md"):
        text = " ".join((ROOT / path).read_text().split())
        figures = re.findall(r"(\d+) MiB (?:a (?:gunicorn )?worker|by default)", text)
        assert figures, path
        assert {int(figure) for figure in figures} == {mib}, path


def requirement_name(line: str) -> str:
    return re.split(r"[\[=<>!~;\s]", line, maxsplit=1)[0].lower().replace("_", "-")


def constraint_pins() -> dict[str, str]:
    """deploy/constraints.txt: package name (normalised) -> its pinned version."""
    return dict(line.lower().replace("_", "-").split("==") for line in
                (ROOT / "deploy" / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))


# The consumer tools are neither a range nor pinned here: the server requires them at its own
# version (the two are released together) and the image installs them from consumer/; what
# they pull in is pinned.
OURS = {"feedpub-consumer"}


def direct_dependencies(*, ours: bool = True) -> list[str]:
    """Both distributions' dependencies (pyproject.toml and consumer/pyproject.toml); without
    `ours`, leaving out the consumer tools themselves."""
    import tomllib

    from packaging.requirements import Requirement

    return [line for path in ("pyproject.toml", "consumer/pyproject.toml")
            for line in tomllib.loads((ROOT / path).read_text())["project"]["dependencies"]
            if ours or Requirement(line).name not in OURS]


def test_the_package_asks_for_ranges_and_only_the_image_pins():
    from packaging.requirements import Requirement

    for line in direct_dependencies(ours=False):
        requirement = Requirement(line)
        operators = {spec.operator for spec in requirement.specifier}
        # A lower bound (the oldest release series CI tests) and an upper one (the next
        # release not tested).
        assert ">=" in operators, f"{line}: no lower bound"
        assert "<" in operators, f"{line}: no upper bound"
        assert not operators & {"==", "===", "~="}, f"{line}: pinned in pyproject.toml"


def test_every_pin_of_the_image_is_inside_the_supported_range():
    from packaging.requirements import Requirement

    pins = constraint_pins()
    for line in direct_dependencies(ours=False):
        requirement = Requirement(line)
        pin = pins[requirement.name.lower()]
        assert requirement.specifier.contains(pin), \
            f"deploy/constraints.txt pins {requirement.name}=={pin}, outside {line!r}"


def test_the_image_pins_every_package_it_installs():
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "-c deploy/constraints.txt" in dockerfile
    pins = constraint_pins()
    direct = direct_dependencies()
    # ...and everything they pull in here, with their extras (psycopg[binary], ...).
    seen, todo = set(), [Requirement(line) for line in direct]
    while todo:
        requirement = todo.pop()
        name = requirement.name.lower().replace("_", "-")
        assert name in pins or name in OURS, (
            f"{name} is installed but not pinned in deploy/constraints.txt")
        for extra in [*requirement.extras, ""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for line in requires(name) or []:
                dependency = Requirement(line)
                if dependency.marker is None or dependency.marker.evaluate(
                        {"extra": extra} if extra else {"extra": ""}):
                    todo.append(dependency)


def test_static_files_are_collected_with_gzip_twins(tmp_path):
    collect = ("import django, sys; django.setup(); from django.conf import settings; "
               "settings.STATIC_ROOT = sys.argv[1]; from django.core.management import "
               "call_command; call_command('collectstatic', '--noinput', '-v0', "
               "'-i', 'swagger-ui-dist', '-i', 'redoc')")
    result = subprocess.run([sys.executable, "-c", collect, str(tmp_path)], cwd=ROOT,  # noqa: S603
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": "feedpub.settings"},
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    script = tmp_path / "admin" / "js" / "core.js"
    assert script.exists()
    assert (tmp_path / "admin" / "js" / "core.js.gz").exists()
    assert (tmp_path / "admin" / "css" / "base.css.gz").exists()


def test_gunicorn_starts_without_a_control_socket_unless_given_one():
    import runpy

    with mock.patch.dict(os.environ, {}, clear=False):
        os.environ.pop("GUNICORN_CONTROL_SOCKET", None)
        config = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))
        assert config["control_socket_disable"] is True
        os.environ["GUNICORN_CONTROL_SOCKET"] = "/run/feedpub/gunicorn.ctl"
        config = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))
        assert config["control_socket_disable"] is False
        assert config["control_socket"] == "/run/feedpub/gunicorn.ctl"


def test_the_laptop_instructions_name_allowed_hosts():
    for path in (".env.example", "docs/deploying/compose.md"):
        text = " ".join((ROOT / path).read_text().split())
        laptop = re.search(r"on a laptop[^.]*\.[^.]*\.", text)
        assert laptop, path
        assert "ALLOWED_HOSTS" in laptop.group(0), path


def test_the_wsgi_module_loads_what_workers_would_each_load_on_their_first_request(tmp_path):
    """gunicorn preloads feedpub.wsgi in its master (preload_app): the URLconf, the URL maps
    and the sealer loaded there are shared by every worker, not loaded in each after a start
    (the URLconf alone ~300 ms of a worker's first request)."""
    probe = ("import sys, feedpub.wsgi\n"
             "from django.urls import get_resolver\n"
             "resolver = get_resolver()\n"
             "print('feedpub.urls' in sys.modules, 'archives.log.sealing' in sys.modules,\n"
             "      resolver._populated, 'archives' in resolver.namespace_dict)\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "feedpub.settings",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'none.sqlite3'}"}
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,  # noqa: S603
                            capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.split() == ["True", "True", "True", "True"]
    assert not (tmp_path / "none.sqlite3").exists()  # and no database was touched


# HTTPS (docs/deploying/https.md) -------------------------------------------------------------

def test_nginx_runs_the_tls_script_and_shares_certbot_volumes():
    nginx, certbot = SERVICES["nginx"], SERVICES["certbot"]
    # The image runs /docker-entrypoint.d/*.sh before nginx only if they are executable.
    assert "./deploy/nginx/tls.sh:/docker-entrypoint.d/40-feedpub-tls.sh:ro" in nginx["volumes"]
    mode = subprocess.run(["git", "ls-files", "-s", "deploy/nginx/tls.sh"], cwd=ROOT,  # noqa: S607
                          capture_output=True, text=True, check=True).stdout.split()[0]
    assert mode == "100755"
    # certbot writes its challenges where nginx serves them, and its certificate where .env
    # names it (--cert-name feedpub), both read-only in nginx.
    webroot = nginx["environment"]["NGINX_ACME_ROOT"]
    assert f"acme:{webroot}:ro" in nginx["volumes"]
    assert f"acme:{webroot}" in certbot["volumes"]
    assert "letsencrypt:/etc/letsencrypt:ro" in nginx["volumes"]
    assert "letsencrypt:/etc/letsencrypt" in certbot["volumes"]
    loop = certbot["command"][0]
    assert f"--webroot --webroot-path {webroot} --cert-name feedpub" in loop
    assert "--keep-until-expiring" in loop  # every pass renews only when due
    example = (ROOT / ".env.example").read_text()
    assert "# FEEDPUB_TLS_CERT=/etc/letsencrypt/live/feedpub/fullchain.pem" in example
    assert "# FEEDPUB_TLS_KEY=/etc/letsencrypt/live/feedpub/privkey.pem" in example
    # Only on demand, and https published where nginx listens for it.
    assert certbot["profiles"] == ["letsencrypt"]
    assert nginx["environment"]["NGINX_TLS_PORT"] == "443"
    assert "${HTTPS_PORT:-8443}:443" in OVERRIDES["https"]["services"]["nginx"]["ports"]
    assert nginx["environment"]["FEEDPUB_TLS_CERT"] == "${FEEDPUB_TLS_CERT:-}"  # none: http


# Releases and upgrades followed literally --------------------------------------------

OVERRIDES = {path.stem: yaml.safe_load(path.read_text())
             for path in sorted((ROOT / "deploy" / "compose").glob("*.yml"))}
UPGRADES = (ROOT / "docs" / "operating" / "upgrades.md").read_text()


def test_https_is_published_only_by_the_override_that_goes_with_a_certificate():
    assert SERVICES["nginx"]["ports"] == ["${HTTP_PORT:-8080}:80"]
    assert OVERRIDES["https"]["services"]["nginx"]["ports"] == ["${HTTPS_PORT:-8443}:443"]
    line = "COMPOSE_FILE=docker-compose.yml:deploy/compose/https.yml"
    assert f"# {line}\n" in (ROOT / ".env.example").read_text()
    assert line in (ROOT / "docs" / "deploying" / "https.md").read_text()
    assert line in UPGRADES


def test_every_published_port_is_named_on_the_upgrade_page():
    section = UPGRADES[UPGRADES.index("### Published ports"):]
    section = section[:section.index("\n## ")]
    published = [(name, port) for compose in (COMPOSE, *OVERRIDES.values())
                 for name, service in compose["services"].items()
                 for port in service.get("ports", [])]
    assert len(published) == 3, published
    for name, port in published:
        variable = re.search(r"\$\{(\w+):-(\d+)\}", port)
        assert f"`{variable[1]}` (`{variable[2]}`)" in section, (name, port)


def test_nginx_starts_once_web_and_longpoll_answer_their_health_checks():
    for name in ("web", "longpoll"):
        assert SERVICES["nginx"]["depends_on"][name] == {"condition": "service_healthy"}
        check = SERVICES[name]["healthcheck"]
        assert "deploy/healthcheck.py" in check["test"]
        assert check["start_interval"] == "2s"  # nginx starts within 2 s of web answering
    assert SERVICES["nginx"]["environment"]["NGINX_RESOLVER"].split()[1] == "valid=2s"


def test_the_tls_check_interval_of_env_reaches_nginx():
    nginx = SERVICES["nginx"]["environment"]
    assert nginx["FEEDPUB_TLS_CHECK_SECONDS"] == "${FEEDPUB_TLS_CHECK_SECONDS:-300}"
    assert "\nFEEDPUB_TLS_CHECK_SECONDS=300\n" in (ROOT / ".env.example").read_text()
    assert "interval=${FEEDPUB_TLS_CHECK_SECONDS:-300}" in (
        ROOT / "deploy" / "nginx" / "tls.sh").read_text()


def test_where_the_deploy_starts_the_docs_ask_for_compose_v2():
    """The compose file uses what Compose v1 (Debian's docker-compose 1.29) refuses."""
    assert any("start_interval" in service.get("healthcheck", {})
               for service in SERVICES.values())
    for page in ("README.md", "docs/deploying/compose.md", "docs/operating/upgrades.md"):
        text = (ROOT / page).read_text()
        assert "docker compose version" in text, page
        assert "v2.20 or later" in text, page


def test_the_prometheus_override_lets_its_one_address_in_and_nothing_wider():
    override = OVERRIDES["prometheus"]
    prometheus = override["services"]["prometheus"]
    address = ipaddress.ip_address(prometheus["networks"]["metrics"]["ipv4_address"])
    (subnet,) = [ipaddress.ip_network(config["subnet"])
                 for config in override["networks"]["metrics"]["ipam"]["config"]]
    assert address in subnet
    assert address != next(subnet.hosts())  # not the gateway: the host, Docker's proxy
    for name in ("web", "longpoll"):
        allowed = override["services"][name]["environment"]["FEEDPUB_METRICS_NETWORKS"]
        assert [ipaddress.ip_network(item) for item in allowed.split(",")] == [
            ipaddress.ip_network(address)]
        assert "metrics" in override["services"][name]["networks"]
    assert "nginx" not in override["services"]  # nginx, where every client comes from
    assert prometheus["ports"] == ["127.0.0.1:${PROMETHEUS_PORT:-9090}:9090"]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"]
               for job in scrape["scrape_configs"]}
    assert targets == {"feedpub": [f"web:{SERVICES['web']['expose'][0]}"],
                       "feedpub-longpoll": [f"longpoll:{SERVICES['longpoll']['expose'][0]}"]}


def env_lines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+)=(.*)$", text, re.MULTILINE))


def test_the_readme_deploy_over_plain_http_is_not_redirected_to_https():
    """The README's lines, set in the .env made from the example, as compose gives them to
    web (env_file) and to nginx: over plain http a page is answered, not redirected."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("To try the\nstack over plain http"):]
    lines = env_lines(re.search(r"```\n(.*?)```", section, re.DOTALL)[1])
    env = {**env_lines((ROOT / ".env.example").read_text()), **lines}
    host = urllib.parse.urlsplit(env["FEEDPUB_BASE_URL"])
    assert host.port == int(env["HTTP_PORT"])
    assert validate_host(host.hostname, env["ALLOWED_HOSTS"].split(","))
    ask = ("from django.test import Client; "
           f"r = Client().get('/no-such-page', HTTP_HOST={host.netloc!r}); "
           "print('answer:', r.status_code, r.get('Location'))")

    def answer(values):
        chosen = {name: value for name, value in values.items()
                  if name.startswith(("SECURE_", "FEEDPUB_BASE_URL", "ALLOWED_HOSTS"))}
        result = manage("shell", "-c", ask, env=production_environment(**chosen))
        return result.stdout.strip().splitlines()[-1] if result.stdout else result.stderr

    assert answer(env) == "answer: 404 None"
    # The example alone (an https site): the redirect the README's lines turn off.
    example = env_lines((ROOT / ".env.example").read_text())
    assert answer({**example, "ALLOWED_HOSTS": "localhost"}).startswith("answer: 301 https://")
    # nginx redirects only for an https base URL (feedpub.conf.template's maps)
    assert env["FEEDPUB_BASE_URL"].startswith("http://")


def test_the_prometheus_override_is_added_to_compose_file_not_in_place_of_it():
    """`-f` files replace COMPOSE_FILE: on a site with TLS in nginx, `docker compose -f
    docker-compose.yml -f deploy/compose/prometheus.yml up -d` recreated nginx without
    https.yml, and https went down. The override goes after what COMPOSE_FILE names."""
    line = "COMPOSE_FILE=docker-compose.yml:deploy/compose/https.yml:deploy/compose/prometheus.yml"
    metrics = (ROOT / "docs" / "operating" / "metrics.md").read_text()
    assert f"```sh\n{line}\n```" in metrics
    assert line in (ROOT / "deploy" / "compose" / "prometheus.yml").read_text()
    for block in re.findall(r"```sh\n(.*?)```", metrics, re.DOTALL):
        assert not re.search(r"^docker compose -f", block, re.MULTILINE), block


def upgrade_blocks() -> list[str]:
    section = UPGRADES[UPGRADES.index("## With Docker Compose"):UPGRADES.index("### Published")]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


def test_the_upgrade_recreates_the_app_services_by_name_and_leaves_nginx_up():
    """Compose v2 recreates every service that depends on one it recreates: a bare `up -d`
    with a new image stopped nginx too (nothing answered for 17 s). The upgrade names the
    services that run the new image, those that wait for `migrate`; then a bare `up -d`
    recreates only what changed in its own definition."""
    after_migrate = {name for name, service in SERVICES.items()
                     if "migrate" in service.get("depends_on", {})}
    assert after_migrate == {"web", "longpoll", "sealer", "websub"}
    upgrade = upgrade_blocks()[0].splitlines()
    named = [line.split("#")[0].split()[4:] for line in upgrade
             if line.startswith("docker compose up -d ")]
    assert set(named[0]) == after_migrate, named
    assert upgrade[-1].split("#")[0].strip() == "docker compose up -d"


def test_the_upgrade_without_a_502_leaves_nothing_for_a_later_up_to_recreate():
    """Measured: 0 502s at 10 requests a second. `--no-deps` (which drops depends_on from
    the containers it makes) or a `migrate` left on the old image made the next bare
    `up -d` recreate web, longpoll and so nginx."""
    rolling = upgrade_blocks()[1].splitlines()
    commands = [line.split("  #")[0].strip() for line in rolling]
    ups = [command for command in commands if command.startswith("docker compose up")]
    assert not any("--no-deps" in command for command in ups)
    scale = next(i for i, command in enumerate(commands) if "--scale web=2" in command)
    assert commands.index("docker compose up -d migrate") < scale
    assert "--no-recreate" in commands[scale]
    assert "--wait" in commands[scale]
    assert commands.index("old=$(docker compose ps -q web longpoll)") < scale
    assert commands[scale + 1] == "docker stop $old && docker rm $old"
    check = next(command for command in commands if "migrate --check" in command)
    assert commands.index(check) < commands.index("docker compose up -d migrate")
