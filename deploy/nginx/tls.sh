#!/bin/sh
# TLS and trusted proxies for nginx: the two parts of its configuration that the image's
# envsubst cannot write, because they are not values but lines that exist or not (an https
# listener only when there is a certificate) or repeat (one line a trusted address).
# docker-compose.yml mounts this as /docker-entrypoint.d/40-feedpub-tls.sh, which the nginx
# image runs before nginx starts; feedpub.conf.template includes what it writes, relative to
# nginx.conf's directory:
#   feedpub-tls.conf              (server level) `listen 443 ssl` and the certificate, or
#                                 nothing (plain http only, as without TLS)
#   feedpub-trusted-proxies.conf  (in a `geo` block) one line an address or CIDR range
#
# Variables (docs/deploying/https.md):
#   FEEDPUB_TLS_CERT, FEEDPUB_TLS_KEY  the certificate (full chain) and its key, as paths in
#                     the container; both or neither. Given but not there yet (before
#                     certbot's first certificate): plain http, until they are.
#   NGINX_TLS_PORT    what the https `listen` takes (443)
#   FEEDPUB_TRUSTED_PROXIES  TLS terminators in front of nginx whose X-Forwarded-Proto is
#                     believed: addresses or CIDR ranges, separated by commas or spaces
#   FEEDPUB_TLS_CHECK_SECONDS  how often the watcher looks at the certificate (300)
#   NGINX_CONF_DIR, NGINX_PID_FILE  (tests and bench/run.py) nginx.conf's directory
#                     (/etc/nginx) and its master's pid file (/var/run/nginx.pid)
#
# Renewal without downtime: run with no argument (as the image does), it writes the files,
# then leaves a watcher behind that rewrites them every FEEDPUB_TLS_CHECK_SECONDS and, when
# they or the certificate's bytes changed (certbot renewed it, or issued the first one),
# tells nginx to reload (SIGHUP, as `nginx -s reload`): new workers take new connections
# with the new certificate while the old ones finish theirs, held long polls included.
# A reload nginx cannot apply (a broken certificate) leaves it running as it was.
#   tls.sh render   the files, once
#   tls.sh watch    the watcher, in the foreground
set -euf  # (-f: no file names from a `*` in FEEDPUB_TRUSTED_PROXIES)

conf_dir=${NGINX_CONF_DIR:-/etc/nginx}
tls_conf=$conf_dir/feedpub-tls.conf
proxies_conf=$conf_dir/feedpub-trusted-proxies.conf
pid_file=${NGINX_PID_FILE:-/var/run/nginx.pid}
interval=${FEEDPUB_TLS_CHECK_SECONDS:-300}

say() {
  echo "tls.sh: $*" >&2
}

# The two files, each written beside and then moved into place (nginx never reads half).
write() {
  {
    echo "# Written by deploy/nginx/tls.sh from FEEDPUB_TRUSTED_PROXIES."
    for address in $(echo "${FEEDPUB_TRUSTED_PROXIES:-}" | tr ',' ' '); do
      case $address in
        *[!0-9A-Fa-f.:/]* | "")
          say "FEEDPUB_TRUSTED_PROXIES: '$address' is not an address or a CIDR range"
          return 1 ;;
      esac
      echo "$address 1;"
    done
  } > "$proxies_conf.new"

  cert=${FEEDPUB_TLS_CERT:-}
  key=${FEEDPUB_TLS_KEY:-}
  {
    echo "# Written by deploy/nginx/tls.sh from FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY."
    if [ -z "$cert" ] && [ -z "$key" ]; then
      echo "# Neither is set: plain http only."
    elif [ -z "$cert" ] || [ -z "$key" ]; then
      say "set both FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY, or neither"
      return 1
    elif [ ! -r "$cert" ] || [ ! -r "$key" ]; then
      echo "# $cert or $key is not there (yet): plain http only."
    else
      case $cert$key in
        *'"'* | *'\'*) say "FEEDPUB_TLS_CERT and FEEDPUB_TLS_KEY: a path without \" or \\"
                       return 1 ;;
      esac
      echo "listen ${NGINX_TLS_PORT:-443} ssl default_server;"
      echo "ssl_certificate \"$cert\";"
      echo "ssl_certificate_key \"$key\";"
    fi
  } > "$tls_conf.new"
  mv "$proxies_conf.new" "$proxies_conf"
  mv "$tls_conf.new" "$tls_conf"
}

# What a reload would change: the files and the certificate's and key's bytes.
fingerprint() {
  cat "$tls_conf" "$proxies_conf" "${FEEDPUB_TLS_CERT:-/dev/null}" \
      "${FEEDPUB_TLS_KEY:-/dev/null}" 2>/dev/null | cksum
}

render() {
  write
  if grep -q "^listen" "$tls_conf"; then
    say "https on ${NGINX_TLS_PORT:-443} with $FEEDPUB_TLS_CERT"
  elif [ -n "${FEEDPUB_TLS_CERT:-}" ]; then
    say "$FEEDPUB_TLS_CERT or $FEEDPUB_TLS_KEY is not there yet: plain http only (for" \
        "certbot's first certificate) until it is; checked every $interval s"
  fi
}

watch() {
  before=$(fingerprint)
  while sleep "$interval"; do
    if ! write; then
      continue  # said why; nginx keeps what it has
    fi
    now=$(fingerprint)
    if [ "$now" != "$before" ] && [ -s "$pid_file" ]; then
      say "the certificate or the settings changed: reloading nginx"
      kill -HUP "$(cat "$pid_file")" || say "could not signal nginx"
    fi
    before=$now
  done
}

case ${1:-} in
  render) render ;;
  watch) watch ;;
  "")  # as /docker-entrypoint.d/ runs it: the files, then the watcher in the background
    render
    if [ -n "${FEEDPUB_TLS_CERT:-}" ]; then
      "$0" watch </dev/null &
      say "watching the certificate every $interval s (pid $!)"
    fi ;;
  *) say "usage: tls.sh [render|watch]"; exit 2 ;;
esac
