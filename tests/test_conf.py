"""The app's settings (archives/conf.py): every FEEDPUB_* setting the app reads has its default
there and a row in the settings reference (docs/deploying/settings.md) that gives the same
default; the host project's value wins, read when asked for; and the app runs in a project
that sets nothing of it but FEEDPUB_BASE_URL.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from archives import conf
from archives.conf import AppSettings, Setting

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = ROOT / "archives"
REFERENCE = ROOT / "docs" / "deploying" / "settings.md"
READ = re.compile(r"""settings\.(FEEDPUB_[A-Z0-9_]+)|getattr\(settings, ["'](FEEDPUB_[A-Z0-9_]+)""")
IMPORTS_CONF = re.compile(r"^\s*from (archives|\.+)\.?conf import settings$", re.MULTILINE)


def app_modules() -> list[Path]:
    return [path for path in sorted(ARCHIVES.rglob("*.py")) if path.name != "conf.py"]


def settings_the_app_reads() -> set[str]:
    return {next(filter(None, match.groups()))
            for path in app_modules() for match in READ.finditer(path.read_text())}


def reference_rows() -> dict[str, str]:
    """Each documented variable -> its row's default cell."""
    rows = {}
    for line in REFERENCE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (name := re.fullmatch(r"`([A-Z][A-Z0-9_]*)`", cells[0])):
            rows[name.group(1)] = cells[1]
    return rows


def as_documented(value: object) -> str:
    """A default as the reference writes it, in its first `code`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "off"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def test_every_setting_the_app_reads_has_a_default_in_conf_and_conf_no_other():
    read = settings_the_app_reads()
    assert "FEEDPUB_BASE_URL" in read  # the grep finds them
    assert len(read) > 25
    assert read - set(AppSettings.names()) == set(), "read, and no default in archives/conf.py"
    assert set(AppSettings.names()) - read == set(), "in archives/conf.py, and never read"


def test_every_module_that_reads_one_reads_it_through_conf():
    """`django.conf.settings.FEEDPUB_X` would miss the default the host project did not set."""
    modules = [path.relative_to(ROOT) for path in app_modules() + [ROOT / "feedpub" / "metrics.py"]
               if READ.search(path.read_text()) and not IMPORTS_CONF.search(path.read_text())]
    assert modules == []


@pytest.mark.parametrize("name", sorted(AppSettings.names()))
def test_the_reference_gives_each_setting_the_default_conf_has(name, settings):
    setting = AppSettings.names()[name]
    documented = reference_rows().get(name)
    assert documented is not None, f"docs/deploying/settings.md has no row for {name}"
    if setting.required:
        assert "required" in documented, documented
    elif setting.derive is not None:
        # Said in words; what it quotes is another setting, or the value (or its start) that
        # conf derives for a base URL whose host is no domain name.
        for name_ in ("FEEDPUB_OAI_REPOSITORY_ID", "FEEDPUB_OAI_ADMIN_EMAIL"):
            if hasattr(settings, name_):
                delattr(settings, name_)
        settings.FEEDPUB_BASE_URL = "http://127.0.0.1:8000"
        derived = setting.derive(conf.settings)
        quoted = re.findall(r"`([^`]*)`", documented)
        assert quoted, documented
        for literal in quoted:
            assert literal in AppSettings.names() or derived.startswith(literal), documented
    else:
        first = re.search(r"`([^`]*)`", documented)
        assert first is not None, documented
        assert first.group(1) == as_documented(setting.default), documented


def test_the_reference_says_where_the_apps_defaults_live():
    assert "archives/conf.py" in REFERENCE.read_text()


def test_a_setting_the_host_project_leaves_out_is_confs_default(settings):
    del settings.FEEDPUB_PAGE_SIZE
    del settings.FEEDPUB_MAX_AGE
    assert conf.settings.FEEDPUB_PAGE_SIZE == 100
    assert conf.settings.FEEDPUB_MAX_AGE == 60


def test_the_host_projects_value_wins_at_once(settings):
    settings.FEEDPUB_MAX_AGE = 5
    assert conf.settings.FEEDPUB_MAX_AGE == 5
    settings.FEEDPUB_MAX_AGE = 7
    assert conf.settings.FEEDPUB_MAX_AGE == 7


def test_other_names_are_djangos_settings(settings):
    settings.TIME_ZONE = "Europe/Lisbon"
    assert conf.settings.TIME_ZONE == "Europe/Lisbon"
    with pytest.raises(AttributeError):
        conf.settings.NO_SUCH_SETTING  # noqa: B018


def test_the_oai_identity_is_derived_from_the_base_url_unless_set(settings):
    for name in ("FEEDPUB_OAI_REPOSITORY_ID", "FEEDPUB_OAI_ADMIN_EMAIL"):
        if hasattr(settings, name):
            delattr(settings, name)
    settings.FEEDPUB_BASE_URL = "https://feeds.example.org/"
    assert conf.settings.FEEDPUB_BASE_URL == "https://feeds.example.org"
    assert conf.settings.FEEDPUB_OAI_REPOSITORY_ID == "feeds.example.org"
    assert conf.settings.FEEDPUB_OAI_ADMIN_EMAIL == "feedpub@feeds.example.org"
    settings.FEEDPUB_BASE_URL = "http://127.0.0.1:8000"
    assert conf.settings.FEEDPUB_OAI_REPOSITORY_ID == "feedpub.localhost"


def test_a_missing_base_url_is_improperly_configured_naming_it(settings):
    del settings.FEEDPUB_BASE_URL
    with pytest.raises(ImproperlyConfigured, match="FEEDPUB_BASE_URL must be set"):
        conf.settings.FEEDPUB_BASE_URL  # noqa: B018
    with pytest.raises(ImproperlyConfigured, match="FEEDPUB_BASE_URL must be set"):
        conf.settings.check()


@pytest.mark.parametrize(("name", "value", "message"), [
    ("FEEDPUB_BASE_URL", "feeds.example.org", "must be an absolute http"),
    ("FEEDPUB_OAI_PAGE_SIZE", 0, "must be at least 1"),
    ("FEEDPUB_LONG_POLL_DB_CONNECTIONS", 0, "must be at least 1"),
    ("FEEDPUB_OAI_REPOSITORY_ID", "localhost", "must be a domain name"),
    ("FEEDPUB_OAI_ADMIN_EMAIL", "nobody", "must be an e-mail address"),
])
def test_an_unusable_value_is_improperly_configured_naming_it(settings, name, value, message):
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=f"{name} {message}"):
        conf.settings.check()


def test_exporting_pages_needs_a_storage_for_them(settings):
    settings.STORAGES = {name: backend for name, backend in settings.STORAGES.items()
                         if name != "feedpub_pages"}
    with pytest.raises(ImproperlyConfigured, match="STORAGES has no 'feedpub_pages'"):
        conf.settings.check()
    settings.FEEDPUB_EXPORT_PAGES = False
    conf.settings.check()


def test_a_setting_is_typed_for_the_modules_that_read_it():
    assert isinstance(AppSettings.FEEDPUB_PAGE_SIZE, Setting)
    assert AppSettings.FEEDPUB_PAGE_SIZE.default == 100


# A project of its own: the app and what it needs, nothing of feedpub's settings.
MINIMAL_SETTINGS = '''
SECRET_KEY = "another-project"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "rest_framework",
                  "archives"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB}}
ROOT_URLCONF = "minimal_urls"
USE_TZ = True
ALLOWED_HOSTS = ["testserver"]
'''
SERVE_A_FEED = '''
import django
django.setup()
from django.core.management import call_command
from django.test import Client
from archives.conf import settings
from archives.log import publishing
from archives.models import Feed
call_command("migrate", verbosity=0)
feed = Feed.objects.create(slug="books", title="Books")
publishing.put_record(feed=feed, key="k1", data={"title": "One", "summary": "S"})
answer = Client().get("/feeds/books/")
print(answer.status_code, answer["Cache-Control"], feed.page_size, feed.language)
put = Client().put("/api/feeds/books/records/k2", '{"title": "Two"}', "application/json")
print(put.status_code, sorted(put.json()))
print(answer.content.decode())
'''


def run_project(tmp_path: Path, settings_text: str) -> subprocess.CompletedProcess:
    (tmp_path / "minimal_urls.py").write_text(
        "from django.urls import include, path\n"
        "urlpatterns = [path('api/', include('archives.api.urls')), "
        "path('', include('archives.urls'))]\n")
    (tmp_path / "minimal_settings.py").write_text(
        f"DB = {str(tmp_path / 'db.sqlite3')!r}\n" + settings_text)
    return subprocess.run(  # noqa: S603
        [sys.executable, "-c", SERVE_A_FEED], cwd=tmp_path, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}",
             "DJANGO_SETTINGS_MODULE": "minimal_settings"}, check=False, timeout=120)


def test_the_app_serves_a_feed_in_a_project_that_sets_only_its_base_url(tmp_path):
    done = run_project(tmp_path, MINIMAL_SETTINGS + (
        'FEEDPUB_BASE_URL = "https://feeds.example.org"\nFEEDPUB_EXPORT_PAGES = False\n'))
    assert done.returncode == 0, done.stderr[-3000:]
    status, api, document = done.stdout.split("\n", 2)
    # conf's FEEDPUB_MAX_AGE, FEEDPUB_PAGE_SIZE and FEEDPUB_LANGUAGE
    assert status == "200 public, max-age=60 100 en"
    # The API's policy is its own, not DRF's defaults (which let anyone write): an
    # anonymous write is refused, as JSON in the API's shape.
    assert api == "401 ['detail']"
    assert 'href="https://feeds.example.org/feeds/books/"' in document


def test_a_project_without_a_base_url_is_refused_at_start_naming_it(tmp_path):
    done = run_project(tmp_path, MINIMAL_SETTINGS)
    assert done.returncode != 0
    assert "ImproperlyConfigured: FEEDPUB_BASE_URL must be set" in done.stderr
