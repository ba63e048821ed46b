"""A fresh database for a benchmark, migrated by a checkout: PostgreSQL at 127.0.0.1:5432
(user postgres, trust), or a SQLite file in /tmp."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def fresh_database(name: str, *, sqlite: bool = False) -> str:
    """Drop and create the database `name`; its DATABASE_URL."""
    if sqlite:
        path = Path(f"/tmp/{name}.sqlite3")
        path.unlink(missing_ok=True)
        return f"sqlite:///{path}"
    postgres = ["-h", "127.0.0.1", "-U", "postgres"]
    subprocess.run(["dropdb", *postgres, "--if-exists", name], check=True)
    subprocess.run(["createdb", *postgres, name], check=True)
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def migrate(checkout: Path, env: dict[str, str], python: str = sys.executable) -> None:
    """Migrate the database of `env` (its DATABASE_URL) with `checkout`'s manage.py."""
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=checkout, check=True, env=env)
