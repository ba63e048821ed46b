#!/bin/sh
# Open files for nginx: docker-compose.yml runs the nginx image's own entrypoint through this
# script (`open-files.sh /docker-entrypoint.sh nginx ...`), so that nginx and its workers
# inherit the limit raised here. (An .envsh in /docker-entrypoint.d/ would not do: the
# image sources those in a pipeline's subshell, whose limits end with it.)
#
# Each connection holds a file: a worker needs as many as nginx.conf's worker_connections.
# The soft limit is raised up to the hard one (65,536 at most) rather than set by
# `ulimits: nofile` in the compose file, or by nginx's worker_rlimit_nofile: each sets the
# hard limit too, which fails where the host allows less (runc: "rlimit type 7"). A host
# that allows too few is named here, and nginx fitted to it (below).
set -eu
conf=/etc/nginx/nginx.conf
needed=$(sed -n 's/^[[:space:]]*worker_connections[[:space:]]*\([0-9][0-9]*\);.*/\1/p' "$conf" \
         | head -n 1)
hard=$(ulimit -Hn)
want=65536
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
  want=$hard
fi
# Below worker_connections (and its margin for logs and cached files), nginx is started
# with a copy of its configuration whose worker_connections fit the host, saying so: fewer
# long polls held at once, rather than no front door at all. Below 1,024 it refuses.
margin=128
if [ -n "$needed" ] && [ "$want" -lt $((needed + margin)) ]; then
  fitted=$((want - margin))
  if [ "$fitted" -lt 1024 ]; then
    echo "open-files.sh: the hard open-file limit is $hard, too low for nginx to hold even" \
         "1,024 connections a worker; raise the host's limit for containers (the Docker" \
         "daemon's LimitNOFILE, or \`ulimits: nofile\` in docker-compose.yml within what" \
         "the host allows)" >&2
    exit 1
  fi
  copy="$(dirname "$conf")/nginx-fitted.conf"  # beside it: its relative includes still hold
  sed "s/^\([[:space:]]*worker_connections[[:space:]]*\)[0-9][0-9]*;/\1$fitted;/" "$conf" \
    > "$copy"
  echo "open-files.sh: the hard open-file limit is $hard, below the $needed connections a" \
       "worker may hold (worker_connections in $conf): nginx runs with $fitted" \
       "(fewer long polls at once); raise the host's limit for containers to lift it" >&2
  if [ "${2:-}" = nginx ]; then  # the image's entrypoint, then its command
    entrypoint=$1 program=$2
    shift 2
    set -- "$entrypoint" "$program" -c "$copy" "$@"
  fi
fi
soft=$(ulimit -Sn)
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
  ulimit -Sn "$want"
fi
exec "$@"
