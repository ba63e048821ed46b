"""The two distributions as pip installs them from wheels (`pipx install`, a non-editable
install): the server, feedpub, and the consumer tools, feedpub-consumer (consumer/). Each
carries every file its code reads at run time besides its modules; the consumer requires
nothing of the server, and the server requires the consumer at its own version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

import feedpub

ROOT = Path(__file__).resolve().parent.parent
SERVER_VERSION = feedpub.__version__


def build_wheel(tmp_path: Path, project: Path, names: list[str]) -> zipfile.ZipFile:
    """A wheel built as pip builds it (setuptools from pyproject.toml's build-system,
    isolated), from a copy of `names` in `project`: setuptools leaves a build/ folder."""
    source = tmp_path / project.name / "source"
    for name in names:
        if (project / name).is_dir():
            shutil.copytree(project / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(project / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",  # noqa: S603
                    "--wheel-dir", str(source.parent), str(source)], check=True, cwd=tmp_path)
    (wheel,) = source.parent.glob("*.whl")
    return zipfile.ZipFile(wheel)


def metadata(wheel: zipfile.ZipFile):
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode())


def run_time_files(patterns: list[str], under: Path) -> set[str]:
    return {str(path.relative_to(under)) for pattern in patterns for path in under.glob(pattern)}


def test_the_consumer_wheel_carries_its_schemas_and_requires_nothing_of_the_server(tmp_path):
    wheel = build_wheel(tmp_path, ROOT / "consumer",
                        ["feedpub_consumer", "pyproject.toml", "README.md", "LICENSE"])
    names = set(wheel.namelist())
    # The checker validates documents against these (consumer/feedpub_consumer/check.py).
    wanted = run_time_files(["feedpub_consumer/schema/*.rng", "feedpub_consumer/schema/*.sch"],
                            ROOT / "consumer")
    assert len(wanted) >= 2
    assert wanted <= names, wanted - names
    assert {name.split("/")[0] for name in names} == {
        "feedpub_consumer", f"feedpub_consumer-{SERVER_VERSION}.dist-info"}
    info = metadata(wheel)
    assert info["Name"] == "feedpub-consumer"
    assert info["Version"] == SERVER_VERSION  # released with the server, in step
    assert sorted(Requirement(line).name for line in info.get_all("Requires-Dist")) == [
        "jsonschema-rs", "lxml", "tqdm"]
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    scripts = wheel.read(entry_points).decode()
    assert "feedpub-harvest = feedpub_consumer.cli:harvest_main" in scripts
    assert "feedpub-checkfeed = feedpub_consumer.cli:checkfeed_main" in scripts


def test_the_server_wheel_carries_its_schema_and_requires_the_consumer_at_its_version(tmp_path):
    wheel = build_wheel(tmp_path, ROOT, ["archives", "feedpub", "pyproject.toml", "README.md",
                                         "LICENSE"])
    names = set(wheel.namelist())
    # /oai/feedpub-record.xsd serves the OAI format's schema from beside the code.
    wanted = run_time_files(["archives/oai/*.xsd"], ROOT)
    assert len(wanted) >= 1
    assert wanted <= names, wanted - names
    assert not [name for name in names if name.startswith("feedpub_consumer")]  # no copy
    requirements = {Requirement(line).name: Requirement(line)
                    for line in metadata(wheel).get_all("Requires-Dist")}
    assert str(requirements["feedpub-consumer"].specifier) == f"=={SERVER_VERSION}"


def test_both_distributions_carry_the_same_licence():
    assert (ROOT / "consumer" / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
