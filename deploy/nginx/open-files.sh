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
# that allows too few is named here instead.
set -eu
conf=/etc/nginx/nginx.conf
needed=$(sed -n 's/^[[:space:]]*worker_connections[[:space:]]*\([0-9][0-9]*\);.*/\1/p' "$conf" \
         | head -n 1)
hard=$(ulimit -Hn)
want=65536
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
  want=$hard
fi
if [ -n "$needed" ] && [ "$want" -lt "$needed" ]; then
  echo "open-files.sh: the hard open-file limit is $hard, below the $needed connections a" \
       "worker may hold (worker_connections in $conf); raise the host's limit for" \
       "containers (the Docker daemon's LimitNOFILE, or \`ulimits: nofile\` in" \
       "docker-compose.yml within what the host allows) or lower worker_connections" >&2
  exit 1
fi
soft=$(ulimit -Sn)
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
  ulimit -Sn "$want"
fi
exec "$@"
