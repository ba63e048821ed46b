"""Releases and the licence: one version, written in feedpub/__init__.py, is the one the
package is built with, the one `manage.py version`, /healthz and the admin say, and the
newest release of CHANGELOG.md; the package says BSD-3-Clause, as LICENSE does."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import feedpub

ROOT = Path(__file__).resolve().parent.parent
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$",
                     re.MULTILINE)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The METADATA of the wheel pip builds from this checkout (as `pip install .` would:
    setuptools from pyproject's build-system, isolated), and the wheel's file names."""
    where = tmp_path_factory.mktemp("wheel")
    source = where / "source"
    for name in ("archives", "feedpub"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",  # noqa: S603
                    "--wheel-dir", str(where), str(source)], check=True, cwd=where)
    (wheel,) = where.glob("feedpub-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(metadata).decode()), names


def manage(*arguments: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *arguments], cwd=ROOT,  # noqa: S603
                            capture_output=True, text=True, check=True, timeout=60)
    return result.stdout


def test_pyproject_reads_the_version_from_the_one_place_it_is_written():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "feedpub.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", feedpub.__version__)


def test_manage_py_version_prints_the_version_the_package_is_built_with(built):
    metadata, _ = built
    assert manage("version") == f"{metadata['Version']}\n"
    assert metadata["Version"] == feedpub.__version__


def test_manage_py_dash_dash_version_is_still_djangos():
    import django

    assert manage("--version") == f"{django.get_version()}\n"


def test_the_package_says_bsd_3_clause_and_carries_the_licence(built):
    metadata, names = built
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert metadata["License-File"] == "LICENSE"
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_the_licence_is_the_bsd_3_clause_text_of_the_feedpub_authors():
    text = " ".join((ROOT / "LICENSE").read_text().split())
    assert text.startswith("Copyright (c) the feedpub authors. All rights reserved.")
    for clause in ("Redistributions of source code must retain the above copyright notice",
                   "Redistributions in binary form must reproduce the above copyright notice",
                   "Neither the name of feedpub nor the names of its contributors may be used"):
        assert clause in text
    assert 'THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"' in text


def test_the_changelog_starts_with_unreleased_then_this_version():
    releases = RELEASE.findall((ROOT / "CHANGELOG.md").read_text())
    assert releases[0] == ("Unreleased", "")
    assert releases[1][0] == feedpub.__version__
    assert releases[1][1], "a release has a date"


def test_the_changelog_lists_each_release_once_newest_first():
    versions = [tuple(int(part) for part in version.split("."))
                for version, _ in RELEASE.findall((ROOT / "CHANGELOG.md").read_text())[1:]]
    assert versions == sorted(set(versions), reverse=True)
    assert (0, 1, 0) in versions


def test_healthz_answers_the_version_that_serves(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content.decode() == f"ok feedpub {feedpub.__version__}\n"


def test_the_admins_footer_shows_the_version(admin_client):
    from lxml import html

    page = html.fromstring(admin_client.get("/admin/").content)
    assert page.xpath("normalize-space(//footer)") == f"feedpub {feedpub.__version__}"


PLACEHOLDERS = re.compile(r"<repository URL>|example\.com/your|git\+<|your-org|\bTODO\b|\bXXX\b")


def test_nothing_tracked_holds_a_placeholder():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,  # noqa: S607
                             text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if path == Path(__file__) or path.suffix in {".png", ".sqlite3"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found += [f"{name}: {match.group()}" for match in PLACEHOLDERS.finditer(text)]
    assert not found


# A release named in the docs ("ok feedpub 0.3.0", "v0.3.0", "feedpub-0.3.0.tar.gz"), as
# what runs now: moved with the version, never left behind.
NAMED_RELEASE = re.compile(r"(?:\bfeedpub[ -]|\bv)(\d+\.\d+\.\d+)\b")


def test_the_docs_name_the_current_release():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale = [f"{path.relative_to(ROOT)}: {match.group()}" for path in pages
             for match in NAMED_RELEASE.finditer(path.read_text())
             if match.group(1) != feedpub.__version__]
    assert not stale
    upgrades = (ROOT / "docs" / "operating" / "upgrades.md").read_text()
    assert f"ok feedpub {feedpub.__version__}" in upgrades
