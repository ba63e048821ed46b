"""The 304 subscription poll against the constant-body view, over HTTP, in alternating
pairs: on a shared machine, where one wrk run moves by a third from the next, the median
of the ratios of adjacent runs is the figure to trust.

    .venv/bin/python bench/poll304.py [--pairs 7] [--duration 3]

Uses the database bench/run.py left (BENCH_DB; run it first) and its ports (BENCH_PORTS),
starts the deployment's gunicorn (`deploy/entrypoint.sh web`), and measures, pair after
pair, `wrk -t2 -c32` on /bench/constant and on /feeds/bench/ with the current ETag in
If-None-Match; first with each worker's heads kept fresh by LISTEN/NOTIFY (the default),
then with FEEDPUB_HEADS_CACHE_SIZE=0 (every poll reads the feed row: as before).
"""

from __future__ import annotations

import argparse
import os
import statistics

from run import WEB, WEB_COMMAND, WORK, etag_of, start, stop, wait_for, warm, wrk


def pairs(count: int, seconds: float) -> list[tuple[float, float]]:
    poll = {"If-None-Match": etag_of(f"{WEB}/feeds/bench/")}
    warm(f"{WEB}/bench/constant")
    warm(f"{WEB}/feeds/bench/", headers=poll)
    return [(wrk("constant-body Django view", f"{WEB}/bench/constant", seconds=seconds).rps,
             wrk("304: subscription poll", f"{WEB}/feeds/bench/", headers=poll,
                 seconds=seconds).rps)
            for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--duration", type=float, default=3)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    results = {}
    for name, size in (("heads in memory", "10000"), ("heads read from PostgreSQL", "0")):
        os.environ["FEEDPUB_HEADS_CACHE_SIZE"] = size
        web = start(WEB_COMMAND, "web-poll304.log")
        try:
            wait_for(f"{WEB}/healthz")
            print(name, flush=True)
            results[name] = pairs(options.pairs, options.duration)
        finally:
            stop(web)
    for name, measured in results.items():
        ratios = [poll / constant for constant, poll in measured]
        print(f"{name}: 304 poll / constant view, median of {len(ratios)} pairs "
              f"{statistics.median(ratios):.2f} x (pairs: "
              + ", ".join(f"{ratio:.2f}" for ratio in ratios) + "); constant view median "
              f"{statistics.median(c for c, _ in measured):,.0f} req/s, poll "
              f"{statistics.median(p for _, p in measured):,.0f} req/s")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
