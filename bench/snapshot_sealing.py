"""How long sealing waits behind a snapshot: a watching sealer (`seal_archives --watch
--snapshot-every`) starts a snapshot of a feed of N live records, and meanwhile another
feed's page fills; the figure is the time from that page's last write to its seal.

    .venv/bin/python bench/snapshot_sealing.py [--records 1000000] [--baseline DIR]

With `--baseline DIR` (a checkout of another commit, e.g. `git archive 2e63639 | tar -x -C
DIR`) the same database is measured with that checkout's sealer first, then with this
one's: one run, two figures. Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust);
(re)creates the database `bench_snapshot_sealing` (BENCH_SNAPSHOT_SEALING_DB), filled as
bench/snapshot.py fills its own.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = os.environ.get("BENCH_SNAPSHOT_SEALING_DB", "bench_snapshot_sealing")
ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": "100",
    "FEEDPUB_EXPORT_PAGES": "false",
    "FEEDPUB_SEAL_ON_WRITE": "false",  # only the sealer seals: what is measured
}
SMALL_PAGE = 10


def populate(records: int) -> None:
    import django

    django.setup()
    from archives.log import publishing
    from archives.log.sealing import seal_feed
    from bench.snapshot import write_feed

    started = time.perf_counter()
    feed = write_feed(records)
    seal_feed(feed)
    publishing.create_feed(slug="small", title="Small", page_size=SMALL_PAGE)
    print(f"{records:,} records, {feed.last_seq:,} entries written and sealed in "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def measure(code: Path, label: str) -> None:
    """Start the sealer of `code`, fill a page of `small` once its snapshot is under way,
    and time that page's seal and the snapshot."""
    import django

    django.setup()
    from archives.log import publishing
    from archives.models import Feed, Snapshot, SnapshotPage

    SnapshotPage.objects.all().delete()
    Snapshot.objects.all().delete()
    small = Feed.objects.get(slug="small")
    first_key = small.last_seq  # each run fills the next page of `small`
    sealer = subprocess.Popen(  # noqa: S603
        [sys.executable, "manage.py", "seal_archives", "--watch", "0.2",
         "--snapshot-every", "3600"], cwd=code, env={**os.environ, **ENV})
    try:
        started = time.monotonic()
        while not Snapshot.objects.filter(feed__slug="big").exists():
            time.sleep(0.05)
        time.sleep(1)  # well into it
        for n in range(SMALL_PAGE):
            publishing.put_record(feed=small, key=f"k{first_key + n}",
                                  data={"title": f"Record {first_key + n}"})
        written = time.monotonic()
        target = Feed.objects.get(pk=small.pk).full_pages
        while Feed.objects.get(pk=small.pk).sealed_pages < target:
            time.sleep(0.01)
        sealed = time.monotonic()
        while not Snapshot.objects.filter(feed__slug="big", complete=True).exists():
            time.sleep(0.1)
        done = time.monotonic()
    finally:
        sealer.send_signal(signal.SIGTERM)
        try:
            sealer.wait(timeout=15)
        except subprocess.TimeoutExpired:
            sealer.kill()
            sealer.wait()
    snapshot = Snapshot.objects.get(feed__slug="big", complete=True)
    print(f"{label}: a full page waited {sealed - written:.2f} s for its seal; the snapshot "
          f"({snapshot.records:,} records, {snapshot.pages:,} pages) took "
          f"{done - started:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a checkout whose sealer is measured first, on the same data")
    parser.add_argument("--reuse", action="store_true", help="keep the database as it is")
    options = parser.parse_args()
    os.environ.update(ENV)
    python = str(ROOT / ".venv" / "bin" / "python")
    if not options.reuse:
        subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists",
                        DB_NAME], check=True)
        subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB_NAME], check=True)
        subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
        subprocess.run([python, __file__, "--populate", str(options.records)], cwd=ROOT,
                       check=True)
    runs = [(options.baseline.resolve(), f"baseline ({options.baseline})")] \
        if options.baseline else []
    for code, label in [*runs, (ROOT, "this checkout")]:
        subprocess.run([python, __file__, "--measure", str(code), label], cwd=ROOT, check=True)


if __name__ == "__main__":
    if sys.argv[1:2] in (["--populate"], ["--measure"]):
        os.environ.update(ENV)
        sys.path.insert(0, str(ROOT))
        if sys.argv[1] == "--populate":
            populate(int(sys.argv[2]))
        else:
            measure(Path(sys.argv[2]), sys.argv[3])
    else:
        main()
