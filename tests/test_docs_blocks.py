"""The docs work when followed literally: the code blocks a reader runs in order are run here,
as written, against a fresh server, and the health-check table says what docker-compose.yml
does.

Which blocks run: those right after a comment `<!-- docs-test: SESSION [numbers-vary] -->`
(invisible on the site). Every block of one SESSION runs in one shell, in the order of the
pages in SESSIONS and of the blocks on each page, from one directory, against one server
started for it on a fresh SQLite database:

- a `sh` block runs as it is, with `set -euo pipefail`; `curl` fails on an HTTP error
  (`--fail-with-body`) and ends its output with a line break, and every `# HTTP/1.1 201 ...`
  comment of the block must be a status line of its output;
- a `console` block's `$ ` lines run one by one and what each prints (stdout and stderr) must
  be the lines shown under it, exactly (`numbers-vary`: every number may differ); there
  `curl` does not fail on an HTTP error, since what it prints is checked: a refusal's answer
  can be shown as it is.

As a reader runs them: in a directory with the checkout's `manage.py` and a `.venv/bin/`
holding the interpreter and the console scripts running these tests, against a server on
the Quick start's address (`http://127.0.0.1:8000` in the text is this server's address).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from lxml import etree

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
QUICK_START_URL = "http://127.0.0.1:8000"
BASH = shutil.which("bash") or "/bin/bash"

# Each session's pages, in the order a reader meets them.
SESSIONS = {
    # docs/publishing/api.md's walkthrough, continued by batches and import errors, after
    # Swagger UI's examples (archives/api/examples.py) on the same server: both can be
    # followed, in either order, without one's feed colliding with the other's.
    # describing-records.md's worked example of a schema, in a feed of its own, follows them.
    # write-access.md's colleague writes to the walkthrough's feed with a token of
    # their own, makes, uses, lists and revokes more (roles-and-tokens.md), and reads who
    # changed what (who-changed-what.md).
    "api-walkthrough": ("publishing/api.md", "publishing/batch.md", "publishing/import.md",
                        "describing-records.md", "publishing/write-access.md",
                        "publishing/roles-and-tokens.md", "publishing/who-changed-what.md"),
    # The Quick start's demo feed, harvested as Atom (getting-started.md), then over OAI-PMH.
    "quick-start": ("getting-started.md", "consuming/oai-pmh.md"),
}
MARKER = re.compile(r"^<!--\s*docs-test:\s*([\w-]+)((?:\s+[\w-]+)*)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
STATUS_COMMENT = re.compile(r"^# (HTTP/1\.1 \d{3})\b", re.MULTILINE)
NUMBER = re.compile(r"\d[\d,.]*")


@dataclass
class Block:
    page: str
    line: int
    language: str
    text: str
    options: set[str] = field(default_factory=set)


def marked_blocks(page: str) -> list[tuple[str, Block]]:
    """(session, block) for every marked block of a page of docs/."""
    lines = (DOCS / page).read_text().splitlines()
    found = []
    for number, line in enumerate(lines):
        marker = MARKER.match(line)
        if marker is None:
            continue
        fence = FENCE.match(lines[number + 1]) if number + 1 < len(lines) else None
        assert fence, f"{page}:{number + 1}: a docs-test marker must precede a fenced block"
        end = next(i for i in range(number + 2, len(lines)) if lines[i].startswith("```"))
        found.append((marker.group(1), Block(
            page, number + 2, fence.group(1), "\n".join(lines[number + 2:end]) + "\n",
            set(marker.group(2).split()))))
    return found


def session_blocks(session: str) -> list[Block]:
    return [block for page in SESSIONS[session] for name, block in marked_blocks(page)
            if name == session]


def test_every_marker_names_a_session_and_every_session_runs_blocks():
    pages = [path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")]
    for page in pages:
        for session, block in marked_blocks(page):
            assert session in SESSIONS, f"{page}:{block.line}: unknown session {session!r}"
            assert page in SESSIONS[session], f"{page} is not in SESSIONS[{session!r}]"
            assert block.language in {"sh", "console"}, f"{page}:{block.line}"
    for session in SESSIONS:
        assert session_blocks(session), session


# Running a session.

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def console_commands(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) of each `$ ` line of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.page}:{block.line}: output before any `$ ` command"
            commands[-1][1].append(line)
    return commands


def script(blocks: list[Block], url: str, outputs: Path) -> tuple[str, list[tuple]]:
    """One bash script running every block, and what each console command must print."""
    parts = ["set -euo pipefail",
             'trap \'echo "failed: $BASH_COMMAND" >&2\' ERR',
             # Each answer on lines of its own (a -w of the block's own wins: it comes later);
             # failing on an HTTP error except in a console block (DOCS_CURL_FAIL empty).
             "DOCS_CURL_FAIL=--fail-with-body",
             'curl() { command curl $DOCS_CURL_FAIL --silent --show-error -w "\\n" "$@"; }']
    expected = []
    for block in blocks:
        text = block.text.replace(QUICK_START_URL, url)
        parts.append(f"# {block.page}:{block.line}")
        if block.language == "sh":
            parts.append(text)
            continue
        for command, lines in console_commands(Block(block.page, block.line, "console", text)):
            out = outputs / str(len(expected))
            expected.append((block, command, lines, out))
            parts.append(f"DOCS_CURL_FAIL=; {{ {command}\n}} > {shlex.quote(str(out))} 2>&1 "
                         "|| true; DOCS_CURL_FAIL=--fail-with-body")
    return "\n".join(parts) + "\n", expected


def normalized(text: str, block: Block) -> str:
    text = text.rstrip("\n")
    return NUMBER.sub("N", text) if "numbers-vary" in block.options else text


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A migrated SQLite database, copied for each session."""
    database = tmp_path_factory.mktemp("docs-db") / "db.sqlite3"
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"],  # noqa: S603
                   env=environment(database, QUICK_START_URL), check=True, timeout=300)
    return database


def environment(database: Path, url: str) -> dict[str, str]:
    """A process of the checkout as the Quick start runs it: DEBUG, SQLite, this address."""
    keep = {"PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT"}
    env = {name: value for name, value in os.environ.items() if name in keep}
    env.update(DJANGO_SETTINGS_MODULE="feedpub.settings", PYTHONPATH=str(ROOT),
               DATABASE_URL=f"sqlite:///{database}", FEEDPUB_BASE_URL=url, DEBUG="true",
               HOME=str(database.parent))
    return env


def reader_directory(directory: Path) -> None:
    """manage.py and .venv/bin/ as in a checkout, in a directory of the session's own."""
    (directory / "manage.py").symlink_to(ROOT / "manage.py")
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    for name, main in (("feedpub-harvest", "harvest_main"),
                       ("feedpub-checkfeed", "checkfeed_main")):
        (bin_dir / name).write_text(
            f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c 'import sys; from "
            f"feedpub_consumer.cli import {main}; sys.exit({main}(sys.argv[1:]))' \"$@\"\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)


def start_server(env: dict[str, str], port: int, directory: Path) -> subprocess.Popen:
    log = (directory / "server.log").open("wb")
    server = subprocess.Popen(  # noqa: S603
        [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload",
         f"127.0.0.1:{port}"], env=env, cwd=directory, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError((directory / "server.log").read_text())
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("runserver did not start")


def run_session(session: str, migrated: Path, directory: Path, before: str = "") -> str:
    """Run a session's blocks; return what they printed."""
    database = directory / "db.sqlite3"
    shutil.copy(migrated, database)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = environment(database, url)
    reader_directory(directory)
    outputs = directory / ".outputs"
    outputs.mkdir()
    text, expected = script(session_blocks(session), url, outputs)
    server = start_server(env, port, directory)
    try:
        if before:
            subprocess.run([BASH, "-c", before], env=env, cwd=directory,  # noqa: S603
                           check=True, timeout=120)
        done = subprocess.run([BASH, "-c", text], env=env, cwd=directory,  # noqa: S603
                              timeout=300, capture_output=True, text=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, (
        f"{session}: {done.stderr}\n{done.stdout}\n--- server ---\n"
        f"{(directory / 'server.log').read_text()[-3000:]}")
    for block, command, lines, out in expected:
        printed = out.read_text()
        assert normalized(printed, block) == normalized("\n".join(lines), block), (
            f"{block.page}:{block.line}: `{command}` printed\n{printed}")
    for block in session_blocks(session):
        for status in STATUS_COMMENT.findall(block.text):
            assert re.search(rf"^{re.escape(status)}\b", done.stdout, re.MULTILINE), (
                f"{block.page}:{block.line}: no `{status}` answer in\n{done.stdout}")
    return done.stdout


def test_the_api_walkthrough_runs_as_written_after_swagger_ui_examples(migrated, tmp_path):
    """api.md, batch.md and import.md, after "Create a feed" of Swagger UI: the examples
    create their own feed, which the walkthrough's must not be."""
    from archives.api.examples import FEED_BODY

    swagger = (f"{sys.executable} manage.py createsuperuser --noinput --username swagger "
               "--email swagger@example.org && "
               f"T=$({sys.executable} manage.py create_token swagger --name ui | tail -n1) && "
               f"curl --fail-with-body -sS -H \"Authorization: Bearer $T\" "
               "-H 'Content-Type: application/json' -X POST "
               f"\"$FEEDPUB_BASE_URL/api/feeds/\" -d {shlex.quote(json.dumps(FEED_BODY))}")
    run_session("api-walkthrough", migrated, tmp_path, before=swagger)


def test_the_quick_start_harvests_run_as_written(migrated, tmp_path):
    """The Quick start's demo feed (`manage.py demo_feed`), harvested as getting-started.md
    and then oai-pmh.md say, one after the other in one directory."""
    run_session("quick-start", migrated, tmp_path,
                before=f"{sys.executable} manage.py demo_feed > /dev/null")


# The health-check table of docs/operating/monitoring.md.

def test_the_quick_start_on_another_port_serves_links_to_that_port(migrated, tmp_path):
    """The README's and Getting started's line for another port than 8000, in the checkout's
    .env before `demo_feed` and `runserver` on that port, as they say."""
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        text = page.read_text()
        line = re.search(r"echo (FEEDPUB_BASE_URL=http://127\.0\.0\.1:(\d+)) >> \.env", text)
        assert line, f"{page.name} says what to set for another port"
        assert f"`runserver 127.0.0.1:{line[2]}`" in text
    port = free_port()  # the page's own port may be taken on this machine
    (tmp_path / ".env").write_text(line[1].replace(line[2], str(port)) + "\n")
    database = tmp_path / "db.sqlite3"
    shutil.copy(migrated, database)
    env = environment(database, QUICK_START_URL)
    del env["FEEDPUB_BASE_URL"]  # from .env alone, as in a checkout
    env["FEEDPUB_DOTENV"] = str(tmp_path / ".env")
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "demo_feed"], env=env,  # noqa: S603
                   cwd=tmp_path, check=True, timeout=300, capture_output=True)
    server = start_server(env, port, tmp_path)
    try:
        with urllib.request.urlopen(  # noqa: S310
                f"http://127.0.0.1:{port}/feeds/demo/?format=atom", timeout=30) as response:
            feed = etree.fromstring(response.read())
    finally:
        server.terminate()
        server.wait(timeout=10)
    atom = {"atom": "http://www.w3.org/2005/Atom"}
    assert feed.xpath("/atom:feed/atom:link[@rel='self']/@href", namespaces=atom) == [
        f"http://127.0.0.1:{port}/feeds/demo/"]
    ours = [link for link in feed.xpath("//atom:link/@href", namespaces=atom)
            if link.startswith("http://127.0.0.1:")]  # (records link elsewhere too)
    assert ours
    assert all(link.startswith(f"http://127.0.0.1:{port}/") for link in ours), ours


def test_the_health_check_table_covers_every_compose_service_as_it_is():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    text = (DOCS / "operating" / "monitoring.md").read_text()
    section = text[text.index("## Docker's health checks"):text.index("## What else to watch")]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 2:
            for name in re.findall(r"`([\w-]+)`", cells[0]):
                rows[name] = cells[1]
    defaults = compose["x-app"]["healthcheck"]
    for name, service in compose["services"].items():
        assert name in rows, f"{name} has no row in monitoring.md's health-check table"
        check = service.get("healthcheck", defaults)
        if check.get("disable"):
            assert rows[name].startswith("none"), name
            continue
        test = check["test"]
        command = test[1] if test[0] == "CMD-SHELL" else shlex.join(test[1:])
        if name == "nginx":  # a shell one-liner: the table names what it asks
            assert "/nginx-health" in rows[name]
            assert "/nginx-health" in command
        elif name == "db":
            assert "pg_isready" in rows[name]
            assert "pg_isready" in command
        else:
            assert f"`{command}`" in rows[name], f"{name}: the table does not say `{command}`"
        every = check["interval"].removesuffix("s")
        assert f"every {every} s" in rows[name], f"{name}: not every {every} s"


# The compose override of docs/deploying/compose.md's "Secrets in files".

def test_the_secrets_override_mounts_the_files_in_every_service_that_reads_them():
    """With `SECRET_KEY_FILE` and `POSTGRES_PASSWORD_FILE` in .env, every service reading
    .env must have both files mounted, or it stops at start; and db needs the password."""
    text = (DOCS / "deploying" / "compose.md").read_text()
    section = text[text.index("## Secrets in files"):text.index("## Scaling on one host")]
    override = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))
    env = re.findall(r"^(\w+)=(\S*)$", re.search(r"```sh\n(SECRET_KEY=.*?)```", section,
                                                  re.DOTALL).group(1), re.MULTILINE)
    files = {value.removeprefix("/run/secrets/") for name, value in env if value}
    assert files == set(override["secrets"])
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    readers = {name for name, service in compose["services"].items()
               if service.get("env_file") == ".env"}
    assert readers, "no service reads .env"
    for name in readers:
        assert set(override["services"][name]["secrets"]) == files, name
    assert override["services"]["db"]["secrets"] == ["postgres_password"]
    assert set(override["services"]) <= set(compose["services"])
    # The image's user, who must be able to read them (docs say uid 10001).
    assert "useradd --system --uid 10001" in (ROOT / "Dockerfile").read_text()
    assert "chown 10001:10001" in section
