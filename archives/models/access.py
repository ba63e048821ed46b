"""Who may write which feed: roles on a feed (`FeedRole`) and the API's tokens (`ApiToken`).
The rules that read them are in archives.log.access."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import zlib
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

# A token's secret: this prefix, 40 random base62 characters (238 bits) and a 6-character
# checksum of them (CRC32 in base62), as GitHub's tokens are made: a secret scanner finds
# leaked ones by the prefix and tells them from look-alikes by the checksum, offline.
TOKEN_PREFIX = "feedpub_"  # noqa: S105 (a prefix, public by design)
TOKEN_RANDOM_LENGTH = 40
TOKEN_CHECKSUM_LENGTH = 6
TOKEN_RE = rf"{TOKEN_PREFIX}[0-9A-Za-z]{{{TOKEN_RANDOM_LENGTH + TOKEN_CHECKSUM_LENGTH}}}"
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
MAX_TOKEN_NAME_LENGTH = 100


class FeedRole(models.Model):
    """A user's, or a group's, role on one feed."""

    class Role(models.TextChoices):
        # Add, change, delete and restore the feed's records, by every door.
        PRODUCER = "producer"
        # That, plus the feed's settings, its record schema and its members.
        MAINTAINER = "maintainer"

    feed = models.ForeignKey("archives.Feed", on_delete=models.CASCADE, related_name="roles")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True,
                             blank=True, related_name="feed_roles")
    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, null=True, blank=True,
                              related_name="feed_roles")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.PRODUCER)

    class Meta:
        ordering = ["feed", "role", "user__username", "group__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="feedrole_user_or_group"),
            models.UniqueConstraint(fields=["feed", "user"], condition=Q(user__isnull=False),
                                    name="feedrole_unique_user"),
            models.UniqueConstraint(fields=["feed", "group"], condition=Q(group__isnull=False),
                                    name="feedrole_unique_group"),
        ]

    def __str__(self) -> str:
        holder = self.user if self.user_id else f"group {self.group}"
        return f"{holder}: {self.role} of {self.feed}"


def token_digest(secret: str) -> str:
    """What is stored of a secret: its SHA-256. The secret is 238 random bits, so a fast
    digest suffices (there is no password to guess); a leaked table opens nothing."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _checksum(random_part: str) -> str:
    value = zlib.crc32(random_part.encode("ascii"))
    digits = []
    for _ in range(TOKEN_CHECKSUM_LENGTH):
        value, digit = divmod(value, 62)
        digits.append(BASE62[digit])
    return "".join(reversed(digits))


def new_secret() -> str:
    random_part = "".join(secrets.choice(BASE62) for _ in range(TOKEN_RANDOM_LENGTH))
    return TOKEN_PREFIX + random_part + _checksum(random_part)


def is_well_formed(secret: str) -> bool:
    """Whether `secret` has a feedpub token's form and checksum (what a scanner checks)."""
    body = secret.removeprefix(TOKEN_PREFIX)
    return (secret.startswith(TOKEN_PREFIX) and len(body) == len(secret) - len(TOKEN_PREFIX)
            == TOKEN_RANDOM_LENGTH + TOKEN_CHECKSUM_LENGTH and all(c in BASE62 for c in body)
            and hmac.compare_digest(_checksum(body[:TOKEN_RANDOM_LENGTH]),
                                    body[TOKEN_RANDOM_LENGTH:]))


class ApiToken(models.Model):
    """A named API token of one user: optionally scoped to some feeds and/or to reading,
    optionally expiring. Only its secret's digest is stored; the secret is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=MAX_TOKEN_NAME_LENGTH)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    # The secret's first characters, to tell one's tokens apart (and find a leaked one).
    hint = models.CharField(max_length=20, editable=False)
    # Scoped: only `feeds` (a token whose feeds were all deleted since reaches none);
    # else every feed its user may write. Fixed when the token is issued.
    scoped = models.BooleanField(default=False, editable=False)
    feeds = models.ManyToManyField("archives.Feed", blank=True, related_name="+")
    read_only = models.BooleanField(default=False)
    expires = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now, editable=False)
    # Written at most once a minute (archives/api/authentication.py).
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["user", "name"]
        verbose_name = "API token"
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="apitoken_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @classmethod
    def issue(cls, *, user, name: str, feeds: Iterable = (), read_only: bool = False,
              expires: datetime | None = None) -> tuple[ApiToken, str]:
        """A new token and its secret, which is stored nowhere: show it once."""
        secret, feeds = new_secret(), list(feeds)
        with transaction.atomic():
            token = cls.objects.create(user=user, name=name, digest=token_digest(secret),
                                       hint=secret[:len(TOKEN_PREFIX) + 4], read_only=read_only,
                                       expires=expires, scoped=bool(feeds))
            token.feeds.set(feeds)
        return token, secret

    @property
    def has_expired(self) -> bool:
        return self.expires is not None and self.expires <= timezone.now()
