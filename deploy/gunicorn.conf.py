"""gunicorn settings for feedpub, used as `gunicorn -c deploy/gunicorn.conf.py feedpub.wsgi`
by the Docker image (deploy/entrypoint.sh) and by the benchmark (bench/run.py) alike.

Every value can be changed from the environment, so one file serves a container, a VM and
the benchmark. Sync workers: a proxy (nginx) in front buffers slow clients, every feedpub
request is short, and sync workers had the better p99 latency in our measurements
(bench/README.md); set GUNICORN_WORKER_CLASS=gthread to compare.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path

from feedpub import envfile

envfile.load()  # a checkout's .env, for these settings too (the app's read it again)

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")  # noqa: S104 (inside a container)
workers = int(os.environ.get("WEB_CONCURRENCY", str(2 * multiprocessing.cpu_count())))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 30
keepalive = 5
# Ready for connections before the first request: a failing import shows at start-up,
# and workers share the imported code pages. No database connection is opened on import.
preload_app = True
# Logs go to stdout/stderr for the container runtime. nginx logs every request already,
# so gunicorn's access log is off unless asked for (GUNICORN_ACCESSLOG=-).
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")
# gunicorn's control socket (`gunicornc`), off unless GUNICORN_CONTROL_SOCKET names a path:
# by default it goes in $HOME/.gunicorn/, which the image's user cannot write (/app), and
# gunicorn then warns at every start.
control_socket_disable = not os.environ.get("GUNICORN_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
# Behind the proxy, trust its X-Forwarded-* headers (the proxy is the only way in).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "*")

# /metrics adds up what every worker counted (feedpub/metrics.py): prometheus-client's
# multiprocess mode, each worker writing its values to files of PROMETHEUS_MULTIPROC_DIR.
# Set before the app is imported (the client chooses its mode then); a directory of this
# server's own unless one is given, emptied as the server starts (an earlier run's files
# would be added to this one's), and a dead worker's gauges dropped (child_exit).
_metrics_dir_made = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _metrics_dir_made:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="feedpub-metrics-")


def on_starting(server):
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if _metrics_dir_made:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
