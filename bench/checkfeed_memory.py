"""Peak memory of `manage.py checkfeed` on a large archived feed.

    .venv/bin/python bench/checkfeed_memory.py [--pages 10000] [--per-page 100]
        [--baseline DIR [--baseline-pages 1000]]

The synthetic feed of bench/harvest_memory.py (by default 10,000 documents of 100 entries,
1,000,000 entries, ~47 KB a page), served page by page from a thread of this process; the
checker runs as a child process (`manage.py checkfeed URL --no-http --sample 5`), whose
peak resident memory comes from wait4(). With `--baseline DIR` (a checkout of another
commit) that checkout's checker runs first, on a feed of `--baseline-pages` documents
(one that kept every page needs gigabytes for the full feed), and this one's on the same
feed too: one run, figures side by side.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harvest_memory import serve  # noqa: E402


def peak_check(code: Path, url: str, documents: int) -> tuple[float, float, str]:
    """One `manage.py checkfeed` of `code` in a child process: peak RSS (MB), seconds, and
    its summary line."""
    command = [sys.executable, "manage.py", "checkfeed", url, "--no-http", "--sample", "5",
               "--max-requests", str(documents + 100), "--no-progress"]
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=code, stdout=subprocess.DEVNULL,  # noqa: S603
                             stderr=subprocess.PIPE, text=True)
    errors = child.stderr.read()
    _, _, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - started
    summary = (errors.strip().splitlines() or ["(no output)"])[-1]
    return usage.ru_maxrss / 1024, seconds, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--per-page", type=int, default=100)
    parser.add_argument("--baseline", type=Path, metavar="DIR")
    parser.add_argument("--baseline-pages", type=int, default=1_000)
    args = parser.parse_args()
    runs = []
    if args.baseline:
        runs += [(args.baseline.resolve(), "baseline", args.baseline_pages),
                 (ROOT, "this checkout", args.baseline_pages)]
    runs.append((ROOT, "this checkout", args.pages))
    for code, label, pages in runs:
        server, feed = serve(pages, args.per_page)
        peak, seconds, summary = peak_check(code, f"{feed.base}/feed", pages)
        print(f"{label}, {pages:,} documents ({pages * args.per_page:,} entries): peak RSS "
              f"{peak:.0f} MB, {seconds:.0f} s; {summary}", flush=True)
        server.shutdown()


if __name__ == "__main__":
    main()
