"""feedpub settings, read from the environment (see docs/deploying/settings.md).

SQLite in the project folder is the embedded default; any DATABASE_URL that
dj-database-url understands (postgres://...) replaces it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import overload
from urllib.parse import quote

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


def envlist(name: str, default: str) -> list[str]:
    """Comma-separated values ("a, b" is ["a", "b"])."""
    return [item.strip() for item in (env(name, default) or "").split(",") if item.strip()]


def app_setting(name: str, read: Callable[[str, str], object] = env) -> None:
    """Set one of the app's settings (archives/conf.py: its default, what it does) from the
    environment, read by `read`, only when the environment gives it."""
    if env(name) is not None:
        globals()[name] = read(name, "")


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

# The app's own settings: archives/conf.py holds each default and says what it does; this
# project sets one only when the environment gives it (`app_setting`), so that a default
# lives in one place. The app has none for FEEDPUB_BASE_URL, the public URL every URL inside
# a document is built from: a checkout serves at runserver's address.
FEEDPUB_BASE_URL = env("FEEDPUB_BASE_URL", "http://127.0.0.1:8000")
app_setting("FEEDPUB_PAGE_SIZE", envint)
app_setting("FEEDPUB_LANGUAGE")
app_setting("FEEDPUB_SEAL_ON_WRITE", envbool)
app_setting("FEEDPUB_API_MAX_BODY_BYTES", envint)
app_setting("FEEDPUB_MAX_AGE", envint)
app_setting("FEEDPUB_LAST_MODIFIED_SETTLE", envint)
app_setting("FEEDPUB_SNAPSHOT_GRACE_SECONDS", envint)
app_setting("FEEDPUB_PAGE_CACHE_BYTES", envint)
# OAI-PMH 2.0 at /oai (archives/oai/).
app_setting("FEEDPUB_OAI_PAGE_SIZE", envint)
app_setting("FEEDPUB_OAI_REPOSITORY_NAME")
app_setting("FEEDPUB_OAI_REPOSITORY_ID")
app_setting("FEEDPUB_OAI_ADMIN_EMAIL")

# The admin's site header and the title of its pages (feedpub/admin.py): what the team that
# keeps the records calls the site.
FEEDPUB_ADMIN_TITLE = env("FEEDPUB_ADMIN_TITLE", "feedpub") or "feedpub"

# WebSub (W3C): feedpub is its own hub at /websub/ (archives/push/); the websub_worker
# process verifies intents and delivers changes (docs/consuming/websub.md#the-worker).
app_setting("FEEDPUB_WEBSUB_CALLBACK_HOSTS", envlist)
app_setting("FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS", envbool)
app_setting("FEEDPUB_WEBSUB_RATE", envrate)
app_setting("FEEDPUB_WEBSUB_LEASE_SECONDS", envint)
app_setting("FEEDPUB_WEBSUB_MIN_LEASE_SECONDS", envint)
app_setting("FEEDPUB_WEBSUB_MAX_LEASE_SECONDS", envint)
app_setting("FEEDPUB_WEBSUB_RETRY_SECONDS", envint)
app_setting("FEEDPUB_WEBSUB_MAX_ATTEMPTS", envint)
app_setting("FEEDPUB_WEBSUB_TIMEOUT", envint)
app_setting("FEEDPUB_WEBSUB_CONCURRENCY", envint)
app_setting("FEEDPUB_WEBSUB_POLL_SECONDS", envint)
# Exported pages (archives/storage/export.py, docs/deploying/exported-pages.md): sealed pages
# written as files for nginx, a CDN or an S3 website endpoint to serve without Django.
# The `feedpub_pages` storage: a local directory (FEEDPUB_PAGES_DIR) by default, or any
# S3-compatible bucket when FEEDPUB_PAGES_BUCKET is set (credentials as boto3 reads them:
# AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or an instance role).
app_setting("FEEDPUB_EXPORT_PAGES", envbool)
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
app_setting("FEEDPUB_HEADS_CACHE_SIZE", envint)
app_setting("FEEDPUB_LONG_POLL_MAX_WAIT", envint)
app_setting("FEEDPUB_LONG_POLL_DB_CONNECTIONS", envint)

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
app_setting("FEEDPUB_API_ANON_RATE", envrate)
app_setting("FEEDPUB_API_USER_RATE", envrate)

# The producer API (archives/api). Token first: an anonymous write then gets 401 with
# `WWW-Authenticate: Token` rather than 403; sessions serve the browsable API.
# The API's authentication, permissions, parsers, throttles and errors are its views'
# (archives/api/policy.py), whatever this says; the OpenAPI schema is drawn by the app's
# AutoSchema.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "archives.api.schema.AutoSchema",
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
        "`Authorization: Bearer <token>` (`manage.py create_token <user> --name <name>`, or "
        "`POST /api/tokens/`) and the rights to the feed. Errors are JSON: `detail`, and "
        "`errors` naming each field and why."
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

# Error reports (DEBUG's page, mailed or logged ones) hide sensitive variables with DEBUG on
# too: an API token's secret is never shown.
DEFAULT_EXCEPTION_REPORTER_FILTER = "feedpub.reporting.SafeEvenInDebug"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # stdout, one line per message: what container log collectors read.
    "handlers": {"console": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    # Django's own console handler would print every message a second time.
    "loggers": {"django": {"handlers": [], "propagate": True}},
}
