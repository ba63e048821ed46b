"""Exported pages served by the deploy nginx against nginx serving one static file, in
short alternating rounds, so that the ratio survives a machine whose load changes.

    .venv/bin/python bench/nginx_files.py [--rounds 10] [--seconds 3]

Needs the pages a `bench/run.py` run exported (bench/.work/pages: the 1M feed `big`) and
nginx and wrk. One nginx (the deploy template as tests/nginx_server.py renders it, no
upstream: every request here is a file) also serves, on a second port from plain `root`
locations, bench/.work/static/page.xml (the baseline: one hot file) and the exported files
by their names (random files without our configuration). Every run goes through the same
wrk script (a random draw each request), so wrk's own cost is the same in each.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
sys.path.insert(0, str(ROOT))

from tests.nginx_server import Nginx, free_port  # noqa: E402

RANDOM = """
local counter = 0
function setup(thread) counter = counter + 1; thread:set("id", counter) end
function init(args) math.randomseed(os.time() * 1000 + id) end
function request()
  local n = math.random(1, %d)
  return wrk.format(nil, %s)
end
"""


def wrk(url: str, script: Path, seconds: float) -> float:
    output = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "-s", str(script), url],
                            capture_output=True, text=True, check=True).stdout
    assert "Non-2xx" not in output, output
    return float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=3)
    options = parser.parse_args()
    pages = WORK / "pages"
    # Final pages (the newest has only its open.xml)
    count = sum(1 for _ in (pages / "feeds" / "big" / "archives").glob("*/index.xml"))
    static_port = free_port()
    work = Path(tempfile.mkdtemp(prefix="nginx-files-", dir=WORK))
    static = (f"\nserver {{ listen 127.0.0.1:{static_port}; default_type application/atom+xml;"
              f" location / {{ root {WORK}/static; }} location /feeds/ {{ root {pages}; }} }}\n")
    nginx = Nginx(work, "127.0.0.1:9", pages_dir=pages, edit=lambda text: text + static)
    scripts = {
        "static file": RANDOM % (count, '"/page.xml"'),
        "exported page 1": RANDOM % (count, '"/feeds/big/archives/1/"'),
        "random exported page": RANDOM % (count, '"/feeds/big/archives/" .. n .. "/"'),
        # The same files by their names, from a plain `root` location: what reading a
        # different 50 KB file each time costs nginx, whatever the configuration.
        "random static file": RANDOM % (count,
                                        '"/feeds/big/archives/" .. n .. "/index.xml"'),
    }
    urls = {"static file": f"http://127.0.0.1:{static_port}/",
            "random static file": f"http://127.0.0.1:{static_port}/"}
    rates: dict[str, list[float]] = {name: [] for name in scripts}
    nginx.start()
    try:
        for name, text in scripts.items():
            (work / f"{name}.lua").write_text(text)
        for _ in range(options.rounds):
            for name in scripts:
                rate = wrk(urls.get(name, nginx.url + "/"), work / f"{name}.lua",
                           options.seconds)
                rates[name].append(rate)
                print(f"{name:>22}: {rate:9,.0f} req/s", flush=True)
    finally:
        nginx.stop()
    mean = {name: sum(values) / len(values) for name, values in rates.items()}
    for name in scripts:
        print(f"{name:>22}: mean {mean[name]:9,.0f} req/s, "
              f"{mean[name] / mean['static file']:.2f} x the static file")
    print(f"random exported page / random static file: "
          f"{mean['random exported page'] / mean['random static file']:.2f} x")


if __name__ == "__main__":
    main()
