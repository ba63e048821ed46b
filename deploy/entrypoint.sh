#!/bin/sh
# The processes of a feedpub deployment, by name. docker-compose.yml runs these names and
# bench/run.py runs this same script, so what is benchmarked is what is deployed.
#
#   migrate  apply database migrations, then exit (runs once before web and sealer start)
#   web      the Django app under gunicorn (static files by whitenoise)
#   longpoll the Django app under uvicorn (ASGI), for long polls only (nginx routes them
#            here): one process holds thousands of waiting requests. Without persistent
#            database connections: Django serves each ASGI request in a thread of its own
#            (most long polls need no query: archives/db/heads.py); past
#            LONGPOLL_LIMIT_CONCURRENCY connections (10,000: twice the 5,000 consumers it is
#            sized for) it answers 503 instead of piling up threads and connections
#   sealer   seal full archive pages every SEAL_INTERVAL seconds (any number may run), and
#            snapshot each changed feed every FEEDPUB_SNAPSHOT_EVERY seconds (0: never)
#   websub   the WebSub worker: verify subscription intents, deliver each change to the
#            subscribers' callbacks (any number may run)
#   <other>  run it as given, e.g. `python manage.py createsuperuser`
set -eu
cd "$(dirname "$0")/.."

# NAME_FILE (Docker secrets): every variable of .env.example may be given as the path of a
# file holding it. The settings read NAME_FILE themselves (feedpub/settings.py env()); these
# are the ones read before them, by this script and deploy/gunicorn.conf.py. Only these:
# other *_FILE variables (SSL_CERT_FILE...) mean something else.
for name in WEB_CONCURRENCY GUNICORN_BIND GUNICORN_WORKER_CLASS GUNICORN_THREADS \
            GUNICORN_TIMEOUT GUNICORN_ACCESSLOG GUNICORN_LOGLEVEL GUNICORN_CONTROL_SOCKET \
            FORWARDED_ALLOW_IPS SEAL_INTERVAL FEEDPUB_SNAPSHOT_EVERY FEEDPUB_SNAPSHOTS_KEPT \
            LONGPOLL_HOST LONGPOLL_PORT LONGPOLL_WORKERS LONGPOLL_LIMIT_CONCURRENCY \
            FEEDPUB_WEBSUB_CONCURRENCY PROMETHEUS_MULTIPROC_DIR; do
  eval "path=\${${name}_FILE:-}"
  [ -n "$path" ] || continue
  if eval "[ -n \"\${$name:-}\" ]"; then
    echo "entrypoint: both $name and ${name}_FILE are set; set one" >&2
    exit 1
  fi
  if ! value=$(cat -- "$path"); then
    echo "entrypoint: ${name}_FILE names $path, which cannot be read" >&2
    exit 1
  fi
  export "$name=$value"
done

# Open files: each connection holds one. A service that holds many connections at once
# raises its soft limit, up to the hard one the host gives (docker-compose.yml sets none:
# one above the host's fails the container's start with runc's "rlimit type 7"), and
# refuses to start when even that is too low: at 1,024 the long-poll service dropped or
# answered 500 to most of 1,500 polls.
require_open_files() {  # $1: how many, $2: why
  soft=$(ulimit -Sn)
  [ "$soft" = unlimited ] || [ "$soft" -ge "$1" ] && return 0
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$1" ]; then
    echo "entrypoint: the open-file limit is $soft (hard $hard), below the $1 that $2" \
         "need; raise the host's hard limit for containers (the Docker daemon's" \
         "LimitNOFILE, or docker-compose.yml's ulimits: nofile within what the host allows)" \
         "or lower the setting" >&2
    exit 1
  fi
  ulimit -Sn "$1"
}

case "${1:-web}" in
  migrate)
    exec python manage.py migrate --noinput
    ;;
  web)
    exec gunicorn -c deploy/gunicorn.conf.py feedpub.wsgi
    ;;
  longpoll)
    require_open_files $((${LONGPOLL_LIMIT_CONCURRENCY:-10000} + 256)) \
      "LONGPOLL_LIMIT_CONCURRENCY=${LONGPOLL_LIMIT_CONCURRENCY:-10000} long polls"
    # CONN_MAX_AGE=0 bounds its connections (archives/serving/longpoll.py); a
    # CONN_MAX_AGE_FILE would win over it in the settings (env()), so it goes.
    exec env -u CONN_MAX_AGE_FILE CONN_MAX_AGE=0 uvicorn feedpub.asgi:application --host "${LONGPOLL_HOST:-0.0.0.0}" --port "${LONGPOLL_PORT:-8001}" --workers "${LONGPOLL_WORKERS:-1}" --loop uvloop --http httptools --backlog 4096 --limit-concurrency "${LONGPOLL_LIMIT_CONCURRENCY:-10000}" --no-access-log --proxy-headers --forwarded-allow-ips "${FORWARDED_ALLOW_IPS:-*}"
    ;;
  sealer)
    exec python manage.py seal_archives --watch "${SEAL_INTERVAL:-5}" \
      --snapshot-every "${FEEDPUB_SNAPSHOT_EVERY:-3600}" --keep-snapshots "${FEEDPUB_SNAPSHOTS_KEPT:-3}"
    ;;
  websub)
    require_open_files $((${FEEDPUB_WEBSUB_CONCURRENCY:-200} + 256)) \
      "FEEDPUB_WEBSUB_CONCURRENCY=${FEEDPUB_WEBSUB_CONCURRENCY:-200} deliveries"
    exec python manage.py websub_worker
    ;;
  *)
    exec "$@"
    ;;
esac
