"""feedpub settings, read from the environment (see docs/deploying/settings.md).

SQLite in the project folder is the embedded default; any DATABASE_URL that
dj-database-url understands (postgres://...) replaces it.
"""

from __future__ import annotations

import os
import re
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import overload
from urllib.parse import quote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from feedpub import envfile

BASE_DIR = Path(__file__).resolve().parent.parent

# The checkout's .env first, under the environment (feedpub/envfile.py): every process,
# whatever its terminal, has the same settings, FEEDPUB_BASE_URL above all.
envfile.load()


@overload
def env(name: str, default: str) -> str: ...
@overload
def env(name: str, default: None = None) -> str | None: ...


def env(name: str, default: str | None = None) -> str | None:
    """A setting from the environment, or from the file named by NAME_FILE (Docker secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def envbool(name: str, default: str) -> bool:
    value = (env(name, default) or "").lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {value!r}")


def envint(name: str, default: str) -> int:
    value = env(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None


def envrate(name: str, default: str) -> str | None:
    """A request rate such as "600/minute" (DRF's n/second|minute|hour|day); "off": none."""
    value = (env(name, default) or "").strip()
    if value.lower() in {"", "off", "none"}:
        return None
    number, _, period = value.partition("/")
    if not number.isdigit() or period[:1] not in {"s", "m", "h", "d"}:
        raise ImproperlyConfigured(f"{name} must be a rate such as 600/minute, or off; "
                                   f"not {value!r}")
    return value


def envnetworks(name: str, default: str) -> list[IPv4Network | IPv6Network]:
    """IP networks in CIDR notation, comma-separated ("10.0.0.0/8,fd00::/8"; an address alone
    is a network of one). Host bits set (10.0.0.1/8) are refused: a typo, not a network."""
    networks = []
    for item in (env(name, default) or "").split(","):
        if not item.strip():
            continue
        try:
            networks.append(ip_network(item.strip()))
        except ValueError as error:
            raise ImproperlyConfigured(f"{name} must list networks such as 10.0.0.0/8, "
                                       f"comma-separated: {error}") from None
    return networks


# Development defaults, as healthchecks does: DEBUG is on for `manage.py runserver` in a
# checkout (the README's quick start); the Docker image sets DEBUG=false, and production
# then needs a SECRET_KEY.
DEBUG = envbool("DEBUG", "true")
SECRET_KEY = env("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-only-for-DEBUG"  # noqa: S105
ALLOWED_HOSTS = [h for h in (env("ALLOWED_HOSTS", "127.0.0.1,localhost") or "").split(",") if h]

# HTTPS hardening, on by default once DEBUG is off (`manage.py check --deploy` is clean).
# TLS ends at the proxy in front (nginx, a load balancer, a CDN), which says so in
# X-Forwarded-Proto; deploy/nginx/feedpub.conf.template sets it. /healthz stays reachable over
# plain HTTP for container health checks.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", str(not DEBUG))
# /metrics too: a Prometheus inside the network scrapes gunicorn over plain http.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000")
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", str(not DEBUG))
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", str(not DEBUG))
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", str(not DEBUG))
CSRF_TRUSTED_ORIGINS = [o for o in (env("CSRF_TRUSTED_ORIGINS", "") or "").split(",") if o]

# Every URL inside a document is absolute and built from this one setting, so that a
# frozen archive page never depends on the Host of the request that happened to seal it.
FEEDPUB_BASE_URL = (env("FEEDPUB_BASE_URL", "http://127.0.0.1:8000") or "").rstrip("/")
if not FEEDPUB_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("FEEDPUB_BASE_URL must be an absolute http(s) URL")
FEEDPUB_PAGE_SIZE = envint("FEEDPUB_PAGE_SIZE", "100")
# A new feed's language (its documents' xml:lang) unless it is given one.
FEEDPUB_LANGUAGE = env("FEEDPUB_LANGUAGE", "en")
# Seal full pages right after the write that filled them commits (a sealer process
# running `seal_archives --watch` does the same job; either is enough).
FEEDPUB_SEAL_ON_WRITE = envbool("FEEDPUB_SEAL_ON_WRITE", "true")
# Largest request body the API reads (bytes); a bigger one is refused with 413 before it
# is parsed. 10 MiB holds a full batch of 1,000 ordinary records; split larger batches.
FEEDPUB_API_MAX_BODY_BYTES = envint("FEEDPUB_API_MAX_BODY_BYTES", str(10 * 1024 * 1024))
# max-age of documents that change: the subscription document and the newest archive page.
FEEDPUB_MAX_AGE = envint("FEEDPUB_MAX_AGE", "60")
# Seconds after the second of a change before documents carry a Last-Modified for it
# (archives/documents/base.py): a bound on how long a change takes from its stamp to being
# visible, plus the clock difference between hosts.
FEEDPUB_LAST_MODIFIED_SETTLE = envint("FEEDPUB_LAST_MODIFIED_SETTLE", "1")
# Seconds a superseded snapshot stays readable, for consumers half-way through it.
FEEDPUB_SNAPSHOT_GRACE_SECONDS = envint("FEEDPUB_SNAPSHOT_GRACE_SECONDS", "3600")
# OAI-PMH 2.0 at /oai (archives/oai/). Records a list answer holds at most (the rest follows
# by resumption tokens, which never expire).
FEEDPUB_OAI_PAGE_SIZE = envint("FEEDPUB_OAI_PAGE_SIZE", "100")
if FEEDPUB_OAI_PAGE_SIZE < 1:
    raise ImproperlyConfigured("FEEDPUB_OAI_PAGE_SIZE must be at least 1")
FEEDPUB_OAI_REPOSITORY_NAME = env("FEEDPUB_OAI_REPOSITORY_NAME", "feedpub")
# The repository's name in every OAI identifier (oai:<this>:<feed uuid>/<key>): a domain
# name of yours, set once and never changed, since identifiers must not change. By default
# the base URL's host when it is a domain name, else feedpub.localhost.
_OAI_DOMAIN = r"[a-zA-Z][a-zA-Z0-9\-]*(\.[a-zA-Z][a-zA-Z0-9\-]*)+"
_base_host = urlsplit(FEEDPUB_BASE_URL).hostname or ""
FEEDPUB_OAI_REPOSITORY_ID = env(
    "FEEDPUB_OAI_REPOSITORY_ID",
    _base_host if re.fullmatch(_OAI_DOMAIN, _base_host) else "feedpub.localhost")
if not re.fullmatch(_OAI_DOMAIN, FEEDPUB_OAI_REPOSITORY_ID or ""):
    raise ImproperlyConfigured("FEEDPUB_OAI_REPOSITORY_ID must be a domain name such as "
                               "feeds.example.org (the oai-identifier scheme's rule)")
FEEDPUB_OAI_ADMIN_EMAIL = env("FEEDPUB_OAI_ADMIN_EMAIL", f"feedpub@{FEEDPUB_OAI_REPOSITORY_ID}")
if not re.fullmatch(r"\S+@(\S+\.)+\S+", FEEDPUB_OAI_ADMIN_EMAIL or ""):
    raise ImproperlyConfigured("FEEDPUB_OAI_ADMIN_EMAIL must be an e-mail address")
# Bytes of final archive pages each process keeps in memory; subscription documents,
# gzip-encoded documents and pages for people take up to 1/8 more each, date routes 1/64,
# and charts 8 MiB: 97 MiB a gunicorn worker by default (docs/deploying/compose.md).
FEEDPUB_PAGE_CACHE_BYTES = envint("FEEDPUB_PAGE_CACHE_BYTES", str(64 * 1024 * 1024))

# The admin's site header and the title of its pages (feedpub/admin.py): what the team that
# keeps the records calls the site.
FEEDPUB_ADMIN_TITLE = env("FEEDPUB_ADMIN_TITLE", "feedpub") or "feedpub"

# WebSub (W3C): feedpub is its own hub at /websub/ (archives/push/); the websub_worker
# process verifies intents and delivers changes (docs/consuming/websub.md#the-worker).
# Callback hosts the hub accepts, as ALLOWED_HOSTS patterns ("*" any, ".example.org" that
# domain and its subdomains).
FEEDPUB_WEBSUB_CALLBACK_HOSTS = [
    h.strip() for h in (env("FEEDPUB_WEBSUB_CALLBACK_HOSTS", "*") or "").split(",") if h.strip()]
# Whether callbacks at loopback, private, link-local, multicast or reserved addresses are
# called (checked on each connection, after name resolution). Off: a public hub must not
# be made to send requests into the network it runs in. Read by the hub (web) for each
# request and recorded with the subscription; the worker calls as recorded.
FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = envbool("FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS",
                                                 "false")
# Subscription requests allowed per client address (as FEEDPUB_API_ANON_RATE; "off": none).
FEEDPUB_WEBSUB_RATE = envrate("FEEDPUB_WEBSUB_RATE", "60/minute")
# Leases (seconds): granted when hub.lease_seconds is absent, and the range granted (a
# lease asked for outside it is brought within).
FEEDPUB_WEBSUB_LEASE_SECONDS = envint("FEEDPUB_WEBSUB_LEASE_SECONDS", str(10 * 24 * 3600))
FEEDPUB_WEBSUB_MIN_LEASE_SECONDS = envint("FEEDPUB_WEBSUB_MIN_LEASE_SECONDS", "60")
FEEDPUB_WEBSUB_MAX_LEASE_SECONDS = envint("FEEDPUB_WEBSUB_MAX_LEASE_SECONDS",
                                          str(365 * 24 * 3600))
# A failed delivery is retried after RETRY_SECONDS, then twice as long each time (at most an
# hour); after MAX_ATTEMPTS failures in a row the subscription is ended (10 s and 10
# attempts: 9 waits, 10 s x (2^9 - 1) = 5,110 s, ~1.4 h). The worker refuses values below 1.
FEEDPUB_WEBSUB_RETRY_SECONDS = envint("FEEDPUB_WEBSUB_RETRY_SECONDS", "10")
FEEDPUB_WEBSUB_MAX_ATTEMPTS = envint("FEEDPUB_WEBSUB_MAX_ATTEMPTS", "10")
# Seconds a callback has to answer a verification or a delivery.
FEEDPUB_WEBSUB_TIMEOUT = envint("FEEDPUB_WEBSUB_TIMEOUT", "10")
# Deliveries in flight at once, per worker.
FEEDPUB_WEBSUB_CONCURRENCY = envint("FEEDPUB_WEBSUB_CONCURRENCY", "200")
# How often the worker looks at the database without being woken: on SQLite always, on
# PostgreSQL as the fallback of LISTEN (a missed notification waits at most this long).
FEEDPUB_WEBSUB_POLL_SECONDS = envint("FEEDPUB_WEBSUB_POLL_SECONDS", "5")
# Exported pages (archives/storage/export.py, docs/deploying/exported-pages.md): sealed pages
# written as files for nginx, a CDN or an S3 website endpoint to serve without Django.
# The `feedpub_pages` storage: a local directory (FEEDPUB_PAGES_DIR) by default, or any
# S3-compatible bucket when FEEDPUB_PAGES_BUCKET is set (credentials as boto3 reads them:
# AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or an instance role).
FEEDPUB_EXPORT_PAGES = envbool("FEEDPUB_EXPORT_PAGES", "true")
FEEDPUB_PAGES_DIR = Path(env("FEEDPUB_PAGES_DIR", str(BASE_DIR / "var" / "pages")))
FEEDPUB_PAGES_BUCKET = env("FEEDPUB_PAGES_BUCKET", "")
if FEEDPUB_PAGES_BUCKET:
    FEEDPUB_PAGES_STORAGE = {
        "BACKEND": "archives.storage.export.PagesS3Storage",
        "OPTIONS": {
            "bucket_name": FEEDPUB_PAGES_BUCKET,
            "location": env("FEEDPUB_PAGES_PREFIX", "") or "",
            "endpoint_url": env("FEEDPUB_PAGES_ENDPOINT_URL") or None,  # MinIO, R2, moto...
            "region_name": env("FEEDPUB_PAGES_REGION") or None,
        },
    }
else:
    FEEDPUB_PAGES_STORAGE = {
        "BACKEND": "archives.storage.export.AtomicFileSystemStorage",
        "OPTIONS": {"location": FEEDPUB_PAGES_DIR},
    }
# Polls from memory and long polling (archives/db/heads.py, archives/serving/longpoll.py; README
# "Polling, long polling").
# How many feeds' heads (Feed rows, ~1 KB each) each process keeps for polls, kept fresh
# by PostgreSQL LISTEN/NOTIFY; the least recently polled go first. 0: every poll reads
# the database, as on SQLite.
FEEDPUB_HEADS_CACHE_SIZE = envint("FEEDPUB_HEADS_CACHE_SIZE", "10000")
# The longest a `Prefer: wait=N` request is held (seconds), on the ASGI server only.
FEEDPUB_LONG_POLL_MAX_WAIT = envint("FEEDPUB_LONG_POLL_MAX_WAIT", "30")
# How many long-polled requests the ASGI server has Django answer at once, each of which
# may hold a database connection (a waiting poll holds none): with the heads' listener and
# reader, the most connections a long-poll process opens, however many polls it holds.
FEEDPUB_LONG_POLL_DB_CONNECTIONS = envint("FEEDPUB_LONG_POLL_DB_CONNECTIONS", "8")
if FEEDPUB_LONG_POLL_DB_CONNECTIONS < 1:
    raise ImproperlyConfigured("FEEDPUB_LONG_POLL_DB_CONNECTIONS must be at least 1")

# /metrics (feedpub/metrics.py): open to loopback and to these networks (CIDRs, comma-
# separated; none by default: a private address is no proof of being inside, see
# docs/operating/metrics.md); others need `Authorization: Bearer <this>` ("": none may).
FEEDPUB_METRICS_NETWORKS = envnetworks("FEEDPUB_METRICS_NETWORKS", "")
FEEDPUB_METRICS_TOKEN = env("FEEDPUB_METRICS_TOKEN", "") or ""

INSTALLED_APPS = [
    # django.contrib.admin, its site named by FEEDPUB_ADMIN_TITLE (feedpub/admin.py).
    "feedpub.admin.FeedpubAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the schema UI's assets, served locally (no CDN)
    "django_jsonform",  # the admin's metadata form, drawn from a feed's record schema
    "archives",
]

MIDDLEWARE = [
    # Counts and times every request by view and status, for /metrics (feedpub/metrics.py).
    "feedpub.metrics.RequestMetrics",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A lost database connection: safe requests retried on a new one, else 503, never 500.
    "feedpub.reconnect.ReconnectMiddleware",
    # DEBUG only: 421 for a host other than FEEDPUB_BASE_URL's, whose links would all miss.
    "archives.serving.basecheck.BaseUrlCheckMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # 503, not 500, for a write refused for its base URL (archives/db/address.py).
    "archives.serving.basecheck.WrongBaseUrlMiddleware",
]

ROOT_URLCONF = "feedpub.urls"
WSGI_APPLICATION = "feedpub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Operations: the database URL and the shared cache --------------------------------------
def database_url() -> str:
    """DATABASE_URL; else one built from POSTGRES_HOST and the postgres image's own variables
    (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB; each may come from a NAME_FILE, as Docker
    secrets do), each quoted so that a password with `/`, `#` or `@` stays one password;
    else SQLite in the project folder."""
    url = env("DATABASE_URL")
    if url:
        return url
    host = env("POSTGRES_HOST")
    if not host:
        return f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
    user = env("POSTGRES_USER", "postgres") or "postgres"
    password = env("POSTGRES_PASSWORD", "") or ""
    name = env("POSTGRES_DB", "") or user  # the postgres image's default
    return (f"postgres://{quote(user, safe='')}:{quote(password, safe='')}@{host}:"
            f"{env('POSTGRES_PORT', '5432')}/{quote(name, safe='')}")


# Request counts (the API's and the hub's rates, archives/db/cache.py) must be shared by every
# web worker and container, or N workers allow N times a rate. Redis when FEEDPUB_REDIS_URL
# is set (redis://host:6379/0, atomic and off the database); else the database's own table
# (created by `manage.py migrate`), which needs nothing more.
# The longest a request waits to be counted: for Redis to connect, then to answer; for the
# database's counter row or write lock. Past it the request goes uncounted, rather than
# every worker waiting on a Redis or a transaction that does not answer.
FEEDPUB_COUNT_TIMEOUT_MS = envint("FEEDPUB_COUNT_TIMEOUT_MS", "250")
if FEEDPUB_COUNT_TIMEOUT_MS < 1:
    raise ImproperlyConfigured("FEEDPUB_COUNT_TIMEOUT_MS must be at least 1")
FEEDPUB_REDIS_URL = env("FEEDPUB_REDIS_URL", "") or ""
if FEEDPUB_REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": FEEDPUB_REDIS_URL, "KEY_PREFIX": "feedpub",
                          # redis-py's default is 5 s each.
                          "OPTIONS": {"socket_connect_timeout": FEEDPUB_COUNT_TIMEOUT_MS / 1000,
                                      "socket_timeout": FEEDPUB_COUNT_TIMEOUT_MS / 1000}}}
else:
    CACHES = {"default": {
        "BACKEND": "archives.db.cache.LockingDatabaseCache",
        "LOCATION": "feedpub_cache",
        # Counts of the current window only (the older expire): room for 100,000 clients.
        "OPTIONS": {"MAX_ENTRIES": 100_000, "LOCK_TIMEOUT_MS": FEEDPUB_COUNT_TIMEOUT_MS},
    }}

DATABASES = {
    "default": dj_database_url.parse(
        database_url(),
        conn_max_age=envint("CONN_MAX_AGE", "600"),
        # Off by default (Django's default): the check is one more round trip on every
        # request, which doubled the cost of a subscription poll. A connection that died
        # (database restart) fails no request: feedpub/reconnect.py.
        conn_health_checks=envbool("CONN_HEALTH_CHECKS", "false"),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers go on while one writer writes; IMMEDIATE makes a writer take the
    # write lock when its transaction begins, so concurrent writers queue (up to the
    # timeout) instead of failing with "database is locked" half-way through.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    # libpq waits for a vanished server (a stopped container's address) until the kernel
    # gives up, about two minutes, with the worker stalled: bounded, that request is a 503.
    # (`?connect_timeout=` in DATABASE_URL wins.)
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", envint("DATABASE_CONNECT_TIMEOUT", "3"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Request rates allowed per API client (archives/api/throttling.py), counted in the shared
# cache (CACHES above): anonymous clients by address, the others by user (token).
FEEDPUB_API_ANON_RATE = envrate("FEEDPUB_API_ANON_RATE", "600/minute")
# 400 a second: a producer's writes at full speed (bench/single_put.py) stay below it. It
# was 6,000 a minute counted per worker: with 4 workers, the 24,000 it is now for them all.
FEEDPUB_API_USER_RATE = envrate("FEEDPUB_API_USER_RATE", "24000/minute")

# The producer API (archives/api). Token first: an anonymous write then gets 401 with
# `WWW-Authenticate: Token` rather than 403; sessions serve the browsable API.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "archives.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["archives.api.permissions.ModelPermissionsOrReadOnly"],
    "DEFAULT_PARSER_CLASSES": ["archives.api.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_SCHEMA_CLASS": "archives.api.schema.AutoSchema",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "archives.api.negotiation.SingleFormatNegotiation",
    "EXCEPTION_HANDLER": "archives.api.exceptions.handle",
    "DEFAULT_THROTTLE_CLASSES": [
        "archives.api.throttling.AnonThrottle",
        "archives.api.throttling.UserThrottle",
    ],
    # A client's address for the anonymous rate: the X-Forwarded-For entry this many from
    # the end; 1, the one the deploy's nginx appends (DRF's default takes the whole header,
    # which a client writes); 2 with a TLS terminator in front of nginx (.env.example);
    # 0 when clients reach gunicorn directly.
    "NUM_PROXIES": envint("FEEDPUB_API_PROXIES", "1"),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "feedpub producer API",
    "DESCRIPTION": (
        "Create feeds and put, patch and delete their records; every change appends one "
        "entry to the feed's Atom log. Reads need no credentials; writes need "
        "`Authorization: Token <key>` (`manage.py drf_create_token <user>`) and the model "
        "permissions. Errors are JSON: `detail`, and `errors` naming each field and why."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["archives.api.schema.canonical_routes_only"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "archives.api.schema.closed_request_bodies",
                             "archives.api.schema.metadata_values",
                             "archives.api.schema.blank_in_the_pattern",
                             "archives.api.schema.token_first"],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

STORAGES = {
    # Django's defaults, which a STORAGES setting replaces...
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # ...except that collectstatic also writes a gzip twin of each text file, which
    # whitenoise serves to clients that accept gzip (the admin's and Swagger UI's scripts).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    # ...and where sealed pages are exported (see FEEDPUB_PAGES_STORAGE above).
    "feedpub_pages": FEEDPUB_PAGES_STORAGE,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # stdout, one line per message: what container log collectors read.
    "handlers": {"console": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    # Django's own console handler would print every message a second time.
    "loggers": {"django": {"handlers": [], "propagate": True}},
}
