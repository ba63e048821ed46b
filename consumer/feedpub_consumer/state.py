"""What a harvest keeps between runs, in one SQLite file: the live records, the staged
pages of a walk, and the position each format resumes from (a version-1 JSON state is
converted when met).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atom import AtomDocument, Row, document_rows
from .http import ATOM
from .records import shaped

if TYPE_CHECKING:
    pass  # the caller's progress bar, if any


STATE_VERSION = 2  # 1 was a JSON file, converted when met
STATE_LOCK_WAIT = 5.0  # seconds a run waits for another one to release the state file


def _connect(path: str | os.PathLike | None) -> sqlite3.Connection:
    """A SQLite connection in autocommit mode (transactions are explicit); no path: a private
    temporary database on disk, deleted when the connection closes."""
    db = sqlite3.connect("" if path is None else path, isolation_level=None,
                         timeout=STATE_LOCK_WAIT)
    db.execute("PRAGMA temp_store = FILE")  # the staged pages: on disk, not in memory
    return db


class RecordStore:
    """The winning entry of every atom:id (live records and tombstones), in SQLite.

    On disk, not in memory: a feed of a million entries has up to a million records, about
    a kilobyte each as Python objects. SQLite keeps a bounded cache of them in memory.
    """

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, updated TEXT NOT "
                   "NULL, doc_updated TEXT NOT NULL, deleted INTEGER NOT NULL, record TEXT NOT "
                   "NULL)")
        # live(): the live records, oldest update first, read in index order.
        db.execute("CREATE INDEX IF NOT EXISTS records_live ON records (deleted, updated, id)")

    @classmethod
    def temporary(cls) -> RecordStore:
        return cls(_connect(None))

    def current(self, atom_id: str) -> tuple[str, str, str] | None:
        """(updated, document's updated, record as JSON) of the entry that won so far."""
        return self.db.execute("SELECT updated, doc_updated, record FROM records WHERE id = ?",
                               (atom_id,)).fetchone()

    def put(self, row: Row) -> None:
        self.db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?)", row)

    def clear(self) -> None:
        self.db.execute("DELETE FROM records")

    def live(self) -> Iterator[dict[str, Any]]:
        """The live records, oldest update first; without the bookkeeping fields."""
        for (text,) in self.db.execute(
                "SELECT record FROM records WHERE deleted = 0 ORDER BY updated, id"):
            record = json.loads(text)
            del record["doc_updated"], record["deleted"]
            record.pop("fetched", None)
            yield shaped(record, atom_id=record["id"])  # Atom names a record by its atom:id

    def unfetched(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The live records with an alternate link whose JSON was not fetched since they
        last changed (a change replaces the row, and with it the mark)."""
        for atom_id, text in self.db.execute(
                "SELECT id, record FROM records WHERE deleted = 0 "
                "AND json_extract(record, '$.fetched') IS NULL "
                "AND json_extract(record, '$.alternate') IS NOT NULL ORDER BY updated, id"
        ).fetchall():
            yield atom_id, json.loads(text)

    def fetched(self, atom_id: str, record: dict[str, Any]) -> None:
        """Store what was fetched of a record, marked so that it is not fetched again."""
        self.db.execute("UPDATE records SET record = ? WHERE id = ?",
                        (json.dumps({**record, "fetched": True}), atom_id))

    def count_live(self) -> int:
        return self.db.execute("SELECT count(*) FROM records WHERE deleted = 0").fetchone()[0]


class Reconstruction:
    """The logical feed: per atom:id the winning entry (live records and tombstones).

    Tombstones are kept so that an older copy of a deleted entry, met later (a page that
    was missing on an earlier run), can never bring the record back.
    """

    def __init__(self, records: RecordStore | None = None):
        self.records = records if records is not None else RecordStore.temporary()
        self.applied = 0
        self.deletions = 0
        self.changed = 0

    def apply(self, document: AtomDocument) -> None:
        """Apply one document's entries, oldest first (documents must come oldest first)."""
        self.apply_rows(document_rows(document))

    def apply_rows(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self._apply_row(row)

    def reset(self) -> None:
        """An fh:complete document holds the whole feed: forget everything else."""
        self.records.clear()

    def _apply_row(self, row: Row) -> None:
        _, updated, doc_updated, deleted, record = row
        self.applied += 1
        current = self.records.current(row[0])
        # Section 4.2: newest atom:updated wins; on a tie the more recently updated document
        # (>=: documents are applied oldest first, so the later one is nearer the present).
        if current is not None and (updated, doc_updated) < current[:2]:
            return
        if current is not None and updated == current[0] and not deleted \
                and '"fetched": true' in current[2]:
            # The same entry met again (a subscription document read again): what was
            # fetched of it (harvest --fetch-records) still holds.
            record = json.dumps({**json.loads(current[2]), **json.loads(record)})
            row = (*row[:4], record)
        if deleted:
            self.deletions += 1
        if current is None or _content(record) != _content(current[2]):
            self.changed += 1
        self.records.put(row)

    def live(self) -> Iterator[dict[str, Any]]:
        """The live records, oldest update first; without the bookkeeping fields."""
        return self.records.live()


def _content(record: str) -> dict[str, Any]:
    """A record without where it was read from: the same entry met on another page is
    no change."""
    content = json.loads(record)
    del content["doc_updated"], content["source"]
    return content


class StagedPages:
    """The pages of one walk, newest first as they are read, reduced to their rows and kept
    on disk (a temporary table) until the walk ends and they can be applied oldest first."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.pages = 0
        db.execute("CREATE TEMP TABLE IF NOT EXISTS staged (page INTEGER, position INTEGER, "
                   "id, updated, doc_updated, deleted, record, PRIMARY KEY (page, position))")
        db.execute("DELETE FROM staged")

    def add(self, rows: list[Row]) -> None:
        self.pages += 1
        page = -self.pages  # so that ascending order is oldest first
        self.db.executemany("INSERT INTO staged VALUES (?, ?, ?, ?, ?, ?, ?)",
                            ((page, position, *row) for position, row in enumerate(rows)))

    def oldest_first(self, *, first_page_only: bool = False) -> Iterator[Row]:
        return self.db.execute("SELECT id, updated, doc_updated, deleted, record FROM staged "
                               "WHERE page >= ? ORDER BY page, position",
                               (-1 if first_page_only else -self.pages,))


class RowsByPage:
    """The rows of each document a walk met, by its URL, on disk (a private temporary
    database), read back in whatever order the walk settles on: what a checker keeps of
    the entries it has checked."""

    def __init__(self):
        self.db = _connect(None)
        self.db.execute("CREATE TABLE rows (page TEXT, position INTEGER, id, updated, "
                        "doc_updated, deleted, record, PRIMARY KEY (page, position))")

    def add(self, page: str, rows: list[Row]) -> None:
        self.db.execute("DELETE FROM rows WHERE page = ?", (page,))
        self.db.executemany("INSERT INTO rows VALUES (?, ?, ?, ?, ?, ?, ?)",
                            ((page, position, *row) for position, row in enumerate(rows)))

    def of(self, page: str) -> Iterator[Row]:
        return self.db.execute("SELECT id, updated, doc_updated, deleted, record FROM rows "
                               "WHERE page = ? ORDER BY position", (page,))


# State ---------------------------------------------------------------------------------

class StateError(Exception):
    """The state file cannot be used."""


def open_state(path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """The state file at `path`, created if missing (None: a temporary one), in a transaction
    that holds its write lock for the run.

    Not JSON: the records of a large feed do not fit in memory. A run is one transaction: a
    run killed half-way leaves the previous state whole, and a second run on the same file
    waits a few seconds, then gives up.
    """
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _import_json_state(Path(path))
    db = _connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    except BaseException as error:
        db.close()
        if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
            raise StateError(f"the state file {path} is in use by another run") from error
        if isinstance(error, (sqlite3.DatabaseError, ValueError)):
            raise StateError(f"cannot read state file {path}: {error}") from error
        raise
    return db


def read_meta(db: sqlite3.Connection, *, kind: str) -> dict[str, str]:
    """A state's meta table, checked to be of this version and for a feed of format `kind`
    (files from before linked pages say no format: they are Atom's)."""
    meta = dict(db.execute("SELECT key, value FROM meta"))
    stored = meta.get("format", ATOM) if meta else kind
    if meta.setdefault("version", str(STATE_VERSION)) != str(STATE_VERSION):
        raise StateError(f"unknown state version {meta['version']!r}")
    if stored != kind:
        raise StateError(f"the state file is for a feed in the {stored} format, not {kind}")
    return meta


def state_format(db: sqlite3.Connection) -> str | None:
    """The format of the feed a state file is for; None for a new file."""
    meta = dict(db.execute("SELECT key, value FROM meta"))
    return meta.get("format", ATOM) if meta else None


class HarvestState:
    """What an Atom harvester keeps between runs, in one SQLite file (see `open_state`)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        meta = read_meta(db, kind=ATOM)
        # Archive pages applied on an earlier run: never fetched again.
        db.execute("CREATE TABLE IF NOT EXISTS pages (url TEXT PRIMARY KEY, info TEXT NOT NULL)")
        self.records = RecordStore(db)
        self.subscription: str | None = meta.get("subscription") or None
        self.validators: dict[str, str] = json.loads(meta.get("validators", "{}"))
        self.pending: list[str] = json.loads(meta.get("pending", "[]"))  # gaps to read again

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> HarvestState:
        """The state in `path`, created if missing (None: a temporary one), locked for a run."""
        db = open_state(path)
        try:
            return cls(db)
        except BaseException:
            db.close()
            raise

    def is_processed(self, url: str) -> bool:
        return self.db.execute("SELECT 1 FROM pages WHERE url = ?", (url,)).fetchone() is not None

    def mark_processed(self, url: str, info: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO pages VALUES (?, ?)", (url, json.dumps(info)))

    def save(self) -> None:
        """Commit the run (and release the file)."""
        meta = {"version": str(STATE_VERSION), "format": ATOM,
                "subscription": self.subscription or "",
                "validators": json.dumps(self.validators), "pending": json.dumps(self.pending)}
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close, dropping what was not saved."""
        self.db.close()


def _import_json_state(path: Path) -> None:
    """Turn a state file of version 1 (JSON) into a SQLite one, in place."""
    try:
        with path.open("rb") as existing:
            header = existing.read(16)
    except FileNotFoundError:
        return
    if not header or header == b"SQLite format 3\x00":
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != 1:
            raise ValueError(f"unknown state version {data.get('version')!r}")
    except (OSError, ValueError, AttributeError) as error:
        raise StateError(f"cannot read state file {path}: {error}") from error
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp",
                                     delete=False) as temporary:
        pass  # an empty file is an empty SQLite database
    try:
        _write_json_state(data, temporary.name)
    except BaseException as error:
        os.unlink(temporary.name)
        if isinstance(error, (ValueError, KeyError, TypeError, AttributeError)):
            raise StateError(f"cannot read state file {path}: {error!r}") from error
        raise
    os.replace(temporary.name, path)


def _write_json_state(data: dict[str, Any], path: str) -> None:
    state = HarvestState.load(path)  # an empty file: a new state
    try:
        state.subscription, state.validators = data["subscription"], data["validators"]
        state.pending = data["pending"]
        for url, info in data["processed"].items():
            state.mark_processed(url, info)
        for record in data["records"].values():
            state.records.put((record["id"], record["updated"], record["doc_updated"],
                               record["deleted"], json.dumps(record)))
        state.save()
    finally:
        state.close()
