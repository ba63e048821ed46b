"""The documentation keeps up with the code: the settings reference (docs/deploying/
settings.md) names every environment variable feedpub reads, each once, and none that is
no longer read; README.md stays a front door that starts with the two Quick start commands.

The reference is divided by comments `<!-- settings-reference: PATH ... -->`: the table rows
after one (a first cell of one `NAME`) document what those files read, until the next one.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "deploying" / "settings.md"
README = ROOT / "README.md"

# The Quick start, byte for byte: the README's first two fenced commands.
# Each installs the consumer tools (consumer/) beside the server, which requires them.
SERVE_THE_DEMO = (
    "python3 -m venv .venv && .venv/bin/pip install -e ./consumer -e . && .venv/bin/python"
    " manage.py migrate && .venv/bin/python manage.py demo_feed && .venv/bin/python manage.py"
    " runserver 127.0.0.1:8000"
)
RUN_THE_TESTS = (
    "python3 -m venv .venv && .venv/bin/pip install -e ./consumer -e '.[test]' && .venv/bin/pytest"
)
README_MAX_BYTES = 15_000

NAME = r"[A-Z][A-Z0-9_]*"
MARKER = re.compile(r"<!--\s*settings-reference:\s*(.*?)\s*-->")
ROW = re.compile(r"^\|([^|]*)\|")
# Variables a shell script, the compose file or the nginx template reads: ${NAME...}.
SHELL_READ = re.compile(rf"\$\{{({NAME})")
# Variables of the environment that are not ours to document (PATH, pip's own).
NOT_OURS = {"PATH", "PIP_DISABLE_PIP_VERSION_CHECK"}


# What the reference documents.

def reference_sections(text: str) -> dict[str, list[str]]:
    """Each marker's sources (a space-separated string) -> the names its rows document."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        marker = MARKER.search(line)
        if marker:
            current = marker.group(1)
            sections[current] = []
            continue
        row = ROW.match(line)
        if row is None or current is None:
            continue
        names = re.findall(rf"`({NAME})`", row.group(1))
        if not names:
            continue  # a header or a separator
        assert len(names) == 1, f"one variable a row, not {names} ({line[:60]}...)"
        sections[current].append(names[0])
    return sections


def documented() -> dict[str, list[str]]:
    return reference_sections(REFERENCE.read_text())


# What the code reads.

def settings_reads(source: str) -> set[str]:
    """Every environment variable a settings module reads: the constant first argument of
    each call to one of its env helpers and of os.environ.get / os.getenv / os.environ[...].
    A helper is a module function that reads the environment, or calls a helper, with a
    name it was given (`env(name, default)`). A read whose name is not a constant, outside
    a helper's own body, is an error: that variable could never be checked."""
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    helpers: set[str] = set()
    while True:  # the helpers, and the helpers of helpers
        found = {name for name, function in functions.items()
                 if any(_name_of(node) is None for node in _reads(function, helpers))}
        if found <= helpers:
            break
        helpers |= found
    inside_helpers = {id(node) for name in helpers for node in ast.walk(functions[name])}
    names = set()
    for node in _reads(tree, helpers):
        name = _name_of(node)
        if name is not None:
            names.add(name)
        elif id(node) not in inside_helpers:
            raise AssertionError(f"line {node.lineno}: an environment variable whose name "
                                 f"is not a constant: {ast.unparse(node)}")
    return names


def direct_reads(source: str) -> set[str]:
    """The variables a script reads by name from os.environ (its other reads unchecked)."""
    return {name for node in _reads(ast.parse(source), set())
            if (name := _name_of(node)) is not None}


def _reads(tree: ast.AST, helpers: set[str]) -> list[ast.AST]:
    return [node for node in ast.walk(tree) if _reads_environ(node) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in helpers)]


def _name_of(node: ast.AST) -> str | None:
    """The variable a read names, if it is a constant."""
    argument = node.slice if isinstance(node, ast.Subscript) else (
        node.args[0] if node.args else None)
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    return None


def _reads_environ(node: ast.AST) -> bool:
    """os.environ.get(...), os.environ.setdefault(...), os.getenv(...), os.environ[...]."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = ast.unparse(node.func.value)
        return ((owner == "os.environ" and node.func.attr in {"get", "setdefault"})
                or (owner == "os" and node.func.attr == "getenv"))
    return (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value) == "os.environ")


def reads(path: Path) -> set[str]:
    """The environment variables one file reads (a directory: its files)."""
    if path.is_dir():
        return set().union(*(reads(file) for file in sorted(path.glob("*.py"))))
    text = path.read_text()
    if path == ROOT / "feedpub" / "settings.py":
        return settings_reads(text)
    if path.suffix == ".py":
        return direct_reads(text) - NOT_OURS
    return set(SHELL_READ.findall(text)) - NOT_OURS


def reads_of(sources: str) -> set[str]:
    return set().union(*(reads(ROOT / source) for source in sources.split()))


# The tests.

def test_every_variable_settings_py_reads_is_in_the_reference():
    missing = reads(ROOT / "feedpub" / "settings.py") - set().union(*documented().values())
    assert not missing, ("feedpub/settings.py reads these, and docs/deploying/settings.md "
                         f"does not document them: {', '.join(sorted(missing))}")


def test_the_reference_lists_nothing_settings_py_no_longer_reads():
    stale = set(documented()["feedpub/settings.py"]) - reads(ROOT / "feedpub" / "settings.py")
    assert not stale, ("docs/deploying/settings.md documents these as read by "
                       f"feedpub/settings.py, which no longer reads them: "
                       f"{', '.join(sorted(stale))}")


def test_each_variable_is_documented_once():
    counts = Counter(name for names in documented().values() for name in names)
    twice = sorted(name for name, count in counts.items() if count > 1)
    assert not twice, f"documented more than once: {', '.join(twice)}"


@pytest.mark.parametrize("sources", list(documented()))
def test_every_variable_read_by_the_deployment_is_in_the_reference(sources):
    missing = reads_of(sources) - set().union(*documented().values())
    assert not missing, (f"{sources} read these, and docs/deploying/settings.md does not "
                         f"document them: {', '.join(sorted(missing))}")


@pytest.mark.parametrize("sources", [sources for sources in documented()
                                     if sources != "tests .ci/run"])
def test_the_reference_lists_only_what_its_sources_read(sources):
    stale = set(documented()[sources]) - reads_of(sources)
    assert not stale, (f"docs/deploying/settings.md documents these as read by {sources}, "
                       f"which do not read them: {', '.join(sorted(stale))}")


def test_the_test_variables_it_lists_are_named_by_the_tests_or_ci():
    # Tests name some of theirs in pieces (FEEDPUB_REQUIRE_<NAME>): look for the whole name
    # anywhere in the tests or in .ci/run, rather than for a read.
    text = (ROOT / ".ci" / "run").read_text() + "".join(
        path.read_text() for path in (ROOT / "tests").glob("*.py") if path != Path(__file__))
    stale = [name for name in documented()["tests .ci/run"] if name not in text]
    assert not stale, f"no test nor .ci/run names {', '.join(stale)}"


def test_it_finds_the_variables_read_through_settings_helpers_and_os_environ():
    source = '''
import os
def env(name, default=None):
    return os.environ.get(f"{name}_FILE") or os.environ.get(name, default)
def envint(name, default):
    return int(env(name, default))
A = env("A_VAR")
B = envint("B_VAR", "1")
C = os.getenv("C_VAR")
D = os.environ["D_VAR"]
'''
    assert settings_reads(source) == {"A_VAR", "B_VAR", "C_VAR", "D_VAR"}


def test_it_refuses_a_variable_whose_name_it_cannot_read():
    source = "import os\ndef env(name):\n    return os.environ.get(name)\nX = env(PREFIX + 'X')\n"
    with pytest.raises(AssertionError, match="not a constant"):
        settings_reads(source)


def test_the_readme_is_a_front_door_of_at_most_15000_bytes():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (f"README.md is {size:,} bytes; at most "
                                      f"{README_MAX_BYTES:,}: move the rest into docs/")


def test_the_readme_starts_with_the_two_quick_start_commands():
    fenced = re.findall(r"^```[a-z]*\n(.*?)\n```$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert fenced[:2] == [SERVE_THE_DEMO, RUN_THE_TESTS]


GETTING_STARTED = ROOT / "docs" / "getting-started.md"
DEMO_PORT = re.search(r"runserver 127\.0\.0\.1:(\d+)$", SERVE_THE_DEMO).group(1)
# "On another port than 8000": the one other port the Quick start names.
OTHER_PORT = "8008"
# The compose stack's nginx (HTTP_PORT), for the README's lines to try it over plain http.
COMPOSE_HTTP_PORT = "8080"


def section(text: str, heading: str) -> str:
    """The text under `heading` (a `## ` line), up to the next heading of that level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


@pytest.mark.parametrize(("path", "heading"), [(README, "Quick start"),
                                               (GETTING_STARTED, "Serve the demo")])
def test_the_quick_start_says_what_to_open_next_and_that_the_admin_needs_a_user(path, heading):
    said = " ".join(section(path.read_text(), heading).split())
    base = f"http://127.0.0.1:{DEMO_PORT}"

    assert f"<{base}/feeds/demo/>" in said
    assert f"{base}/api/schema/swagger-ui/" in said
    admin = said.index(f"<{base}/admin/>")
    assert "needs a user" in said[admin:]
    assert "`.venv/bin/python manage.py createsuperuser`" in said[admin:] or (
        ".venv/bin/python manage.py createsuperuser\n" in path.read_text())


# The front pages, and the pages whose examples run against the Quick start's demo.
DEMO_PAGES = [README, GETTING_STARTED, *(ROOT / "docs" / "consuming" / name for name in (
    "linked-pages.md", "complete-and-paged.md", "oai-pmh.md"))]


@pytest.mark.parametrize("path", DEMO_PAGES, ids=lambda path: path.name)
def test_the_demo_is_at_one_port_and_manage_py_called_one_way(path):
    """The app is at the Quick start's port throughout; only the database (5432) and the
    documentation site (`mkdocs serve`, beside the demo) have ports of their own."""
    for paragraph in re.split(r"\n\s*\n", path.read_text()):
        ports = set(re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", paragraph)) - {"5432"}
        allowed = {DEMO_PORT, "8001"} if "mkdocs serve" in paragraph else {DEMO_PORT}
        if re.search(rf"FEEDPUB_BASE_URL=http://127\.0\.0\.1:{OTHER_PORT}|runserver "
                     rf"127\.0\.0\.1:{OTHER_PORT}", paragraph):  # "On another port than 8000"
            allowed |= {OTHER_PORT}
        if "SECURE_SSL_REDIRECT=false" in paragraph:  # the compose stack over plain http
            allowed |= {COMPOSE_HTTP_PORT}
        assert ports <= allowed, paragraph
        # A command run (not just named, as `manage.py snapshot` in a sentence) is run so.
        runs = re.findall(r"([^\s`]*)python3? manage\.py", paragraph)
        assert set(runs) <= {".venv/bin/"}, paragraph
