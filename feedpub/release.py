"""Which code is running: the release (`feedpub.__version__`) and the commit it was built
from, as `manage.py version`, /healthz and the admin's footer say them.

A version names a release; only the commit says which code, between releases too, and it
is what the CHANGELOG names for each release (a clone of main has no tags). Found, first
that answers:

1. `feedpub/COMMIT`: in a release archive (`git archive` writes the commit into it, its
   `export-subst` attribute in .gitattributes) and in the Docker image (the Dockerfile writes
   its FEEDPUB_COMMIT build argument into it; there is no .git in an image);
2. git itself, in a checkout (`git rev-parse HEAD`; a checkout's COMMIT holds the
   unexpanded placeholder);
3. else "unknown" (a wheel built from a checkout, an image built without the argument).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

from feedpub import __version__

PACKAGE = Path(__file__).resolve().parent
COMMIT_FILE = PACKAGE / "COMMIT"
# As the CHANGELOG and `git log --oneline` abbreviate, with room for a larger history.
SHOWN = 12
HASH = re.compile(r"[0-9a-f]{7,40}")


@functools.cache
def commit() -> str:
    """The running code's commit, abbreviated to SHOWN hex digits; "unknown" if none says."""
    try:
        written = COMMIT_FILE.read_text().strip().lower()
    except OSError:
        written = ""
    if HASH.fullmatch(written):
        return written[:SHOWN]
    return from_git(PACKAGE.parent) or "unknown"


def from_git(directory: Path) -> str | None:
    if not (directory / ".git").exists() or shutil.which("git") is None:
        return None
    result = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"],  # noqa: S607
                            cwd=directory, capture_output=True, text=True, timeout=10,
                            check=False)
    found = result.stdout.strip()
    return found[:SHOWN] if result.returncode == 0 and HASH.fullmatch(found) else None


def described() -> str:
    """"0.4.0 (commit ad86d2ba3c95)": what `manage.py version` prints and /healthz answers."""
    return f"{__version__} (commit {commit()})"
