"""The app's settings, each with its default, in one place (as DRF's `api_settings`).

`from archives.conf import settings` instead of `from django.conf import settings`: then
`settings.FEEDPUB_X` is the host project's value, or the default below when the project
does not set it, and every other name is Django's own setting. Each is read when first asked
for and kept until a setting changes (Django's setting_changed, which `override_settings` and
the tests' `settings` fixture send), as Django keeps its own: a default costs no failed lookup
on every request.

One setting has no default, FEEDPUB_BASE_URL: every URL inside a sealed document is built
from it, forever, so a guess would be sealed into the archive. Reading it unset, or any
setting with a value the app cannot use, raises ImproperlyConfigured naming it; the app
reads them all as it starts (`check`, from apps.py), so a process stops there rather than at
its first request. docs/deploying/settings.md documents each (tests/test_conf.py checks the
defaults there against these).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, overload
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

T = TypeVar("T")

_UNSET: Any = object()

# The oai-identifier scheme's rule for a repository identifier.
OAI_DOMAIN = re.compile(r"[a-zA-Z][a-zA-Z0-9\-]*(\.[a-zA-Z][a-zA-Z0-9\-]*)+")


class Setting(Generic[T]):
    """One FEEDPUB_* setting: its default (a value, or `derive`d from the other settings,
    or none: required), and `clean`, which checks a value and may normalise it."""

    def __init__(self, default: T = _UNSET, *,
                 derive: Callable[[AppSettings], T] | None = None,
                 clean: Callable[[str, T], T] | None = None):
        self.default = default
        self.derive = derive
        self.clean = clean
        self.name = ""

    @property
    def required(self) -> bool:
        return self.default is _UNSET and self.derive is None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: AppSettings, owner: type) -> T: ...

    def __get__(self, instance: AppSettings | None, owner: type) -> T | Setting[T]:
        if instance is None:
            return self
        value = getattr(django_settings, self.name, _UNSET)
        if value is _UNSET:
            if self.derive is not None:
                value = self.derive(instance)
            elif self.required:
                raise ImproperlyConfigured(f"{self.name} must be set: the archives app has no "
                                           f"default for it (docs/deploying/settings.md)")
            else:
                value = self.default
        if self.clean is not None:
            value = self.clean(self.name, value)
        # Kept in the instance: its next read finds it there, not here.
        instance.__dict__[self.name] = value
        return value


def absolute_url(name: str, value: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"{name} must be an absolute http(s) URL, not {value!r}")
    return value.rstrip("/")


def at_least_1(name: str, value: int) -> int:
    if not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(f"{name} must be at least 1, not {value!r}")
    return value


def oai_domain(name: str, value: str) -> str:
    if not isinstance(value, str) or not OAI_DOMAIN.fullmatch(value):
        raise ImproperlyConfigured(f"{name} must be a domain name such as feeds.example.org "
                                   f"(the oai-identifier scheme's rule), not {value!r}")
    return value


def email(name: str, value: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"\S+@(\S+\.)+\S+", value):
        raise ImproperlyConfigured(f"{name} must be an e-mail address, not {value!r}")
    return value


def base_url_host(settings: AppSettings) -> str:
    """The base URL's host when it is a domain name, else feedpub.localhost."""
    host = urlsplit(settings.FEEDPUB_BASE_URL).hostname or ""
    return host if OAI_DOMAIN.fullmatch(host) else "feedpub.localhost"


class AppSettings:
    """The FEEDPUB_* settings the app reads; any other name is Django's setting."""

    # --- Feeds and documents ---
    # The public URL every URL inside a document is built from, so that a frozen page never
    # depends on the Host of the request that happened to seal it.
    FEEDPUB_BASE_URL: Setting[str] = Setting(clean=absolute_url)
    # Entries per archive page of a new feed.
    FEEDPUB_PAGE_SIZE = Setting(100)
    # A new feed's language (its documents' xml:lang) unless it is given one.
    FEEDPUB_LANGUAGE = Setting("en")
    # Seal full pages right after the write that filled them commits (a sealer process
    # running `seal_archives --watch` does the same job; either is enough).
    FEEDPUB_SEAL_ON_WRITE = Setting(True)
    # max-age of documents that change: the subscription document and the newest page.
    FEEDPUB_MAX_AGE = Setting(60)
    # Seconds after the second of a change before documents carry a Last-Modified for it
    # (archives/documents/base.py): a bound on how long a change takes from its stamp to
    # being visible, plus the clock difference between hosts.
    FEEDPUB_LAST_MODIFIED_SETTLE = Setting(1)
    # Seconds a superseded snapshot stays readable, for consumers half-way through it.
    FEEDPUB_SNAPSHOT_GRACE_SECONDS = Setting(3600)
    # Bytes of final archive pages each process keeps in memory; subscription documents,
    # gzip-encoded documents and pages for people take up to 1/8 more each, date routes
    # 1/64, and charts 8 MiB: 97 MiB a worker by default (docs/deploying/compose.md).
    FEEDPUB_PAGE_CACHE_BYTES = Setting(64 * 1024 * 1024)
    # Exported pages (archives/storage/export.py): sealed pages written as files to the
    # `feedpub_pages` storage (STORAGES), for nginx, a CDN or a bucket to serve.
    FEEDPUB_EXPORT_PAGES = Setting(True)

    # --- The producer API ---
    # Largest request body the API reads (bytes); a bigger one is refused with 413 before
    # it is parsed. 10 MiB holds a full batch of 1,000 ordinary records.
    FEEDPUB_API_MAX_BODY_BYTES = Setting(10 * 1024 * 1024)
    # Requests allowed per anonymous client address and per user (DRF rates; None: no
    # limit). 400 a second per user: a producer's writes at full speed stay below it.
    FEEDPUB_API_ANON_RATE: Setting[str | None] = Setting("600/minute")
    FEEDPUB_API_USER_RATE: Setting[str | None] = Setting("24000/minute")

    # --- OAI-PMH (archives/oai/) ---
    # Records a list answer holds at most (the rest follows by resumption tokens).
    FEEDPUB_OAI_PAGE_SIZE = Setting(100, clean=at_least_1)
    FEEDPUB_OAI_REPOSITORY_NAME = Setting("feedpub")
    # The repository's name in every OAI identifier (oai:<this>:<feed uuid>/<key>): a domain
    # name, set once and never changed, since identifiers must not change.
    FEEDPUB_OAI_REPOSITORY_ID: Setting[str] = Setting(derive=base_url_host, clean=oai_domain)
    FEEDPUB_OAI_ADMIN_EMAIL: Setting[str] = Setting(
        derive=lambda settings: f"feedpub@{settings.FEEDPUB_OAI_REPOSITORY_ID}", clean=email)

    # --- WebSub (archives/push/): feedpub is its own hub ---
    # Callback hosts the hub accepts, as ALLOWED_HOSTS patterns.
    FEEDPUB_WEBSUB_CALLBACK_HOSTS: Setting[Sequence[str]] = Setting(("*",))
    # Whether callbacks at private addresses may be called: the hub must not be made to send
    # requests into the network it runs in.
    FEEDPUB_WEBSUB_ALLOW_PRIVATE_CALLBACKS = Setting(False)
    # Subscription requests allowed per client address (None: no limit).
    FEEDPUB_WEBSUB_RATE: Setting[str | None] = Setting("60/minute")
    # Leases (seconds): granted when hub.lease_seconds is absent, and the range granted.
    FEEDPUB_WEBSUB_LEASE_SECONDS = Setting(10 * 24 * 3600)
    FEEDPUB_WEBSUB_MIN_LEASE_SECONDS = Setting(60)
    FEEDPUB_WEBSUB_MAX_LEASE_SECONDS = Setting(365 * 24 * 3600)
    # A failed delivery is retried after RETRY_SECONDS, then twice as long each time; after
    # MAX_ATTEMPTS failures in a row the subscription is ended (10 s and 10 attempts: 9
    # waits, 10 s x (2^9 - 1) = 5,110 s, ~1.4 h). The worker refuses values below 1.
    FEEDPUB_WEBSUB_RETRY_SECONDS = Setting(10)
    FEEDPUB_WEBSUB_MAX_ATTEMPTS = Setting(10)
    # Seconds a callback has to answer; deliveries in flight at once, per worker.
    FEEDPUB_WEBSUB_TIMEOUT = Setting(10)
    FEEDPUB_WEBSUB_CONCURRENCY = Setting(200)
    # How often the worker looks at the database without being woken.
    FEEDPUB_WEBSUB_POLL_SECONDS = Setting(5)

    # --- Polls from memory and long polling (archives/db/heads.py, serving/longpoll.py) ---
    # Feeds whose heads each process keeps for polls (0: every poll reads the database).
    FEEDPUB_HEADS_CACHE_SIZE = Setting(10_000)
    # The longest a `Prefer: wait=N` request is held (seconds), on the ASGI server only.
    FEEDPUB_LONG_POLL_MAX_WAIT = Setting(30)
    # Long-polled requests answered at once, each of which may hold a database connection.
    FEEDPUB_LONG_POLL_DB_CONNECTIONS = Setting(8, clean=at_least_1)

    def __getattr__(self, name: str) -> Any:
        return getattr(django_settings, name)

    @classmethod
    def names(cls) -> dict[str, Setting[Any]]:
        return {name: value for name, value in vars(cls).items()
                if isinstance(value, Setting)}

    def check(self) -> None:
        """Read every setting: ImproperlyConfigured for one missing or unusable."""
        for name in self.names():
            getattr(self, name)
        if self.FEEDPUB_EXPORT_PAGES and "feedpub_pages" not in django_settings.STORAGES:
            raise ImproperlyConfigured(
                "FEEDPUB_EXPORT_PAGES is on, and STORAGES has no 'feedpub_pages' storage to "
                "export sealed pages to: add one (archives.storage.export."
                "AtomicFileSystemStorage and a location), or set FEEDPUB_EXPORT_PAGES = False")


settings = AppSettings()


def forget(**kwargs: Any) -> None:
    """Any setting changed: read each again (a derived default follows what it comes from)."""
    settings.__dict__.clear()


setting_changed.connect(forget, dispatch_uid="archives.conf.forget")
