"""The package as pip installs it from a wheel (`pipx install`, a non-editable install)
carries every file the code reads at run time besides its modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Files read from beside the code at run time (archives/consumer/check.py validates against
# the schemas; /oai/feedpub-record.xsd serves the OAI format's schema).
RUN_TIME_FILES = ["archives/consumer/schema/*.rng", "archives/consumer/schema/*.sch",
                  "archives/oai/*.xsd"]


def test_a_wheel_carries_the_schemas_the_code_reads(tmp_path):
    # Built as pip builds it (setuptools from pyproject.toml's build-system, isolated), from
    # a copy: setuptools leaves a build/ folder beside the sources.
    source = tmp_path / "source"
    for name in ("archives", "feedpub"):
        shutil.copytree(ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",  # noqa: S603
                    "--wheel-dir", str(tmp_path), str(source)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("feedpub-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(path.relative_to(ROOT)) for pattern in RUN_TIME_FILES
              for path in ROOT.glob(pattern)}
    assert len(wanted) >= 3
    assert wanted <= names, wanted - names
