"""The API's tokens (archives.models.ApiToken): `Authorization: Bearer <secret>` (RFC 6750) or
`Authorization: Token <secret>` (what DRF's tokens were sent with, so clients of before keep
working), read with their user in one query and with its permissions in one more."""

from __future__ import annotations

import hmac
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Permission
from django.db.models import Q
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from archives.db import django_internals
from archives.models.access import TOKEN_PREFIX, ApiToken, token_digest

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
SCHEMES = {"bearer", "token"}
# last_used is written at most this often: a token's every request would otherwise write
# its row (and serialise a program's concurrent requests on that row's lock).
LAST_USED_PRECISION = timedelta(minutes=1)
# No secret is longer (ours are 54 characters, DRF's were 40): a longer one is refused
# before it is hashed or looked up.
MAX_SECRET_LENGTH = 200


class TokenAuthentication(authentication.BaseAuthentication):
    """Authenticates a request by its API token; `request.auth` is the ApiToken.

    Every write checks model permissions, which Django's ModelBackend reads on the first
    has_perm() of a request in two queries (the user's own, then its groups'): two of a
    single PUT's dozen round trips. This reads the same set in one, into the cache
    ModelBackend keeps on the user for the request, when ModelBackend is the only
    authentication backend."""

    # An error report (DEBUG's page, a logged or mailed one) shows the locals of each frame:
    # never the secret's.
    @sensitive_variables("words", "secret")
    def authenticate(self, request: Request) -> tuple[object, ApiToken] | None:
        words = authentication.get_authorization_header(request).split()
        if not words or words[0].decode("latin-1").lower() not in SCHEMES:
            return None  # another scheme (or none): not ours to refuse
        if len(words) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: send `Bearer <token>` (or `Token <token>`), "
                "the token in one word.")
        try:
            secret = words[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token = self.authenticate_credentials(secret)
        return token.user, token

    @sensitive_variables("secret")
    def authenticate_credentials(self, secret: str) -> ApiToken:
        token = _token_for(secret)
        now = timezone.now()
        if token.expires is not None and token.expires <= now:
            raise exceptions.AuthenticationFailed(
                f"This token expired at {token.expires.isoformat()}.")
        user = token.user
        if not user.is_active:
            raise exceptions.AuthenticationFailed("This token's user is inactive.")
        _note_use(token, now)
        if not user.is_superuser and settings.AUTHENTICATION_BACKENDS == [MODEL_BACKEND]:
            # What ModelBackend.get_all_permissions() would find and keep.
            django_internals.cache_permissions(user, {
                f"{app_label}.{codename}" for app_label, codename in
                Permission.objects.filter(Q(user=user) | Q(group__user=user))
                .values_list("content_type__app_label", "codename").distinct()
            })
        return token

    def authenticate_header(self, request: Request) -> str:
        # What makes a refusal a 401 (with this header) rather than a 403.
        return 'Bearer realm="api"'


@sensitive_variables("secret", "digest")
def _token_for(secret: str) -> ApiToken:
    """The token of `secret`, with its user, in one query. Any
    secret is looked up by its digest: DRF's keys, hashed by the upgrade, have no prefix."""
    if not secret or len(secret) > MAX_SECRET_LENGTH:
        raise exceptions.AuthenticationFailed("Invalid token.")
    digest = token_digest(secret)
    token = next(iter(ApiToken.objects.select_related("user").filter(digest=digest)
                      .order_by()[:1]), None)
    # The index found it by equality; the comparison that decides is constant-time.
    if token is None or not hmac.compare_digest(token.digest, digest):
        raise exceptions.AuthenticationFailed("Invalid token.")
    return token


def _note_use(token: ApiToken, now) -> None:
    """Keep when the token was last used, to the minute: an UPDATE only when the value read
    is older, and conditional, so that concurrent requests write it once."""
    stale = now - LAST_USED_PRECISION
    if token.last_used is not None and token.last_used > stale:
        return
    ApiToken.objects.filter(Q(last_used__isnull=True) | Q(last_used__lte=stale),
                            pk=token.pk).update(last_used=now)
    token.last_used = now


class TokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema names the scheme: HTTP bearer (Swagger UI then asks for the
    token alone). `Token <secret>` is taken too, as DRF's tokens were sent."""

    target_class = TokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": f"{TOKEN_PREFIX}..."}
