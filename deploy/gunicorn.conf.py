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
