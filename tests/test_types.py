"""The code's types, as mypy with the Django and DRF plugins reads them ([tool.mypy] in
pyproject.toml, which also lists the error codes each module is still excused from).

mypy keeps its cache in the checkout (.mypy_cache): ~25 s the first time, ~2 s after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_type_error():
    result = subprocess.run(  # noqa: S603 (our own tool, on our own tree)
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
