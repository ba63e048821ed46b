"""Releases and the licence: one version, written in feedpub/__init__.py, is the one the
package is built with, the one `manage.py version`, /healthz and the admin say with the
commit (from git in a checkout, from feedpub/COMMIT in a release archive and in the image),
and the newest release of CHANGELOG.md, which names each release's commit: a clone without
tags finds it, as the upgrade page's commands do. The package says BSD-3-Clause, as LICENSE
does."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

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


def git(*arguments: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", "-c", "advice.detachedHead=false", *arguments],  # noqa: S603, S607
                          cwd=cwd, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def head() -> str:
    """The checkout's commit, as feedpub shows it (feedpub/release.py: 12 hex digits)."""
    return git("rev-parse", "HEAD")[:12]


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
    assert manage("version") == f"{metadata['Version']} (commit {head()})\n"
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
    assert response.content.decode() == f"ok feedpub {feedpub.__version__} (commit {head()})\n"


def test_the_admins_footer_shows_the_version(admin_client):
    from lxml import html

    page = html.fromstring(admin_client.get("/admin/").content)
    assert page.xpath("normalize-space(//footer)") == (
        f"feedpub {feedpub.__version__} (commit {head()})")


# Where the commit comes from without a .git --------------------------------------------


def commit_in(directory: Path) -> str:
    """What feedpub/release.py finds in a copy of the code at `directory` (no checkout)."""
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", "import feedpub.release as r; print(r.__file__, r.commit())"],
        cwd=directory, capture_output=True, text=True, check=True, timeout=60)
    where, commit = result.stdout.split()
    assert Path(where).is_relative_to(directory), where
    return commit


def test_a_release_archive_names_the_commit_it_was_made_from(tmp_path):
    archive = tmp_path / "feedpub.tar"
    git("archive", "--format=tar", "-o", str(archive), "HEAD", "feedpub")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "release", filter="data")
    assert commit_in(tmp_path / "release") == head()


def test_the_image_names_the_commit_it_is_built_with(tmp_path):
    """As the Dockerfile builds it: the code copied without .git, then FEEDPUB_COMMIT, the
    build argument docker-compose.yml passes on from the shell, written by its RUN line."""
    shutil.copytree(ROOT / "feedpub", tmp_path / "feedpub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert commit_in(tmp_path) == "unknown"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "\nARG FEEDPUB_COMMIT=\n" in dockerfile
    (line,) = [line for line in dockerfile.splitlines()
               if line.startswith("RUN ") and "FEEDPUB_COMMIT" in line]
    built_with = "0d3b985e70aa51d4c3bd36c3f5cc8bd4ae0e5bd4"
    subprocess.run(["/bin/sh", "-c", line.removeprefix("RUN ")], cwd=tmp_path, check=True,  # noqa: S603
                   env={"FEEDPUB_COMMIT": built_with, "PATH": "/usr/bin:/bin"})
    assert commit_in(tmp_path) == built_with[:12]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["x-app"]["build"]["args"] == ["FEEDPUB_COMMIT"]


# Each release found from main alone ----------------------------------------------------


def release_commits() -> dict[str, str]:
    """Each release of CHANGELOG.md and the commit its entry names ("Commit `0d3b985`.")."""
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = list(RELEASE.finditer(text))
    commits = {}
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        if heading["version"] == "Unreleased":
            continue
        entry = text[heading.end():following.start() if following else len(text)]
        named = re.search(r"Commit\s+`([0-9a-f]{7,40})`", entry)
        assert named, f"CHANGELOG.md's {heading['version']} names no commit"
        commits[heading["version"]] = named[1]
    return commits


@pytest.fixture
def clone_without_tags(tmp_path) -> Path:
    """A clone of this repository as a newcomer makes one: no tags."""
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone lacks the releases' commits")
    clone = tmp_path / "clone"
    git("clone", "--quiet", "--no-tags", str(ROOT), str(clone))
    assert git("tag", cwd=clone) == ""
    return clone


def test_every_release_names_a_commit_of_main_that_a_clone_without_tags_finds(
        clone_without_tags):
    commits = release_commits()
    assert {"0.1.0", "0.2.0", feedpub.__version__} <= set(commits)
    for version, commit in commits.items():
        found = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}",
                    cwd=clone_without_tags)
        git("merge-base", "--is-ancestor", found, "HEAD", cwd=clone_without_tags)
        source = git("show", f"{found}:feedpub/__init__.py", cwd=clone_without_tags)
        if "__version__" in source:  # written from 0.3.0 on
            assert f'__version__ = "{version}"' in source, version


def test_the_upgrade_pages_commands_get_the_release_from_a_clone_without_tags(
        clone_without_tags):
    page = (ROOT / "docs" / "operating" / "upgrades.md").read_text()
    commands = re.findall(r"git fetch origin main && git checkout (\w+)", page)
    release = release_commits()[feedpub.__version__]
    assert commands, "the upgrade page fetches and checks out a release"
    assert set(commands) == {release}
    assert "v" + feedpub.__version__ not in " ".join(re.findall(r"git checkout \S+", page))
    git("fetch", "--quiet", "origin", "main", cwd=clone_without_tags)
    git("checkout", "--quiet", release, cwd=clone_without_tags)
    assert git("rev-parse", "HEAD", cwd=clone_without_tags).startswith(release)
    assert f'__version__ = "{feedpub.__version__}"' in (
        clone_without_tags / "feedpub" / "__init__.py").read_text()
    assert f"ok feedpub {feedpub.__version__} (commit {release}" in page


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
