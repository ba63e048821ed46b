"""The shape of the house (archives/__init__.py): layers that only import downwards, no
import cycle, and consumer tools that import nothing of Django or the server.

The rules are import-linter contracts in pyproject.toml ([tool.importlinter]), checked by
`lint-imports` as a developer runs it; here the suite runs it too, and shows that each
contract fails on a tree that breaks it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` run in the checkout `root` on its own packages (not an installed copy)."""
    return subprocess.run(  # noqa: S603 (our own tool, on our own tree)
        [LINT_IMPORTS, "--no-cache", "--no-logo"], cwd=root, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(root)}, timeout=120, check=False)


def contracts() -> list[dict]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["tool"]["importlinter"]["contracts"]


def test_the_house_keeps_every_import_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in result.stdout


@pytest.fixture
def copy_of_the_house(tmp_path: Path) -> Path:
    for package in ("archives", "feedpub"):
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


# A module of the copy, a line added to it, and the contract that line breaks.
VIOLATIONS = {
    "a document renderer importing sealing (a higher layer)": (
        "archives/documents/rss.py", "from archives.log import sealing", "layers"),
    "html importing storage (its independent sibling)": (
        "archives/html/pages.py", "from archives.storage import export", "layers"),
    "a module with no place in the layers": (
        "archives/newconcern.py", "import archives.models", "layers"),
    "a lazy import back from the Atom renderer to the documents' base": (
        "archives/documents/atom.py",
        "def _lazy():\n    from archives.documents import base", "no-cycles"),
    "the app importing the project's settings": (
        "archives/formats.py", "import feedpub.settings", "project-on-top"),
    "a consumer tool importing Django": (
        "archives/consumer/http.py", "from django.conf import settings", "consumer"),
    "a consumer tool importing a server dependency": (
        "archives/consumer/check.py", "import redis", "consumer"),
}


@pytest.mark.parametrize("violation", list(VIOLATIONS))
def test_lint_imports_fails_on_a_tree_that_breaks_a_contract(copy_of_the_house, violation):
    module, line, contract = VIOLATIONS[violation]
    path = copy_of_the_house / module
    path.write_text((path.read_text() if path.exists() else "") + f"\n{line}\n")
    result = lint_imports(copy_of_the_house)
    assert result.returncode != 0
    name = next(c["name"] for c in contracts() if c["id"] == contract)
    assert re.search(rf"^{re.escape(name)} BROKEN$", result.stdout, re.MULTILINE), \
        result.stdout + result.stderr


def test_the_consumer_contract_forbids_every_server_dependency_the_tools_do_not_use():
    """What the consumer tools may import besides themselves and the standard library:
    lxml, a caller's tqdm progress bar, and jsonschema_rs for record schemas. Every other
    package the server requires is in the contract's forbidden list."""
    may_use = {"lxml", "tqdm", "jsonschema_rs"}
    requirements = {re.split(r"[\[=<>; ]", requirement)[0].lower().replace("_", "-")
                    for requirement in importlib.metadata.requires("feedpub")
                    if "extra ==" not in requirement}
    imported_as = {name for name, distributions in
                   importlib.metadata.packages_distributions().items()
                   if any(d.lower().replace("_", "-") in requirements for d in distributions)
                   and not name.startswith("_") and name.isidentifier()}
    consumer = next(c for c in contracts() if c["id"] == "consumer")
    assert imported_as - may_use - {"archives", "feedpub"} <= set(consumer["forbidden_modules"])
