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

case "${1:-web}" in
  migrate)
    exec python manage.py migrate --noinput
    ;;
  web)
    exec gunicorn -c deploy/gunicorn.conf.py feedpub.wsgi
    ;;
  longpoll)
    exec env CONN_MAX_AGE=0 uvicorn feedpub.asgi:application --host "${LONGPOLL_HOST:-0.0.0.0}" --port "${LONGPOLL_PORT:-8001}" --workers "${LONGPOLL_WORKERS:-1}" --loop uvloop --http httptools --backlog 4096 --limit-concurrency "${LONGPOLL_LIMIT_CONCURRENCY:-10000}" --no-access-log --proxy-headers --forwarded-allow-ips "${FORWARDED_ALLOW_IPS:-*}"
    ;;
  sealer)
    exec python manage.py seal_archives --watch "${SEAL_INTERVAL:-5}" \
      --snapshot-every "${FEEDPUB_SNAPSHOT_EVERY:-3600}" --keep-snapshots "${FEEDPUB_SNAPSHOTS_KEPT:-3}"
    ;;
  websub)
    exec python manage.py websub_worker
    ;;
  *)
    exec "$@"
    ;;
esac
