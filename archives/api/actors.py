"""Who makes an API write: the request's user, its token, the door, and the note it gave."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

from archives.log.access import Actor
from archives.models import ApiToken

NOTE_HEADER = "X-Change-Note"


def actor_of(request: Request, via: str) -> Actor:
    """The actor of a write by `request` (via "api" or "batch"). Its note is the
    X-Change-Note header, read as UTF-8 (ValidationError, a 400, when it is not one, or
    longer than a note may be). An anonymous request is never an actor: a user-less Actor
    is the operator's, who may do everything."""
    user = request.user
    if user is None or not user.is_authenticated:
        raise NotAuthenticated()
    return Actor(via=via, user=user, token=token_of(request), note=_note(request))


def token_of(request: Request) -> ApiToken | None:
    """The API token the request came with, if it came with one."""
    return request.auth if isinstance(request.auth, ApiToken) else None


def _note(request: Request) -> str:
    # A header's bytes reach Django as Latin-1 (WSGI); a note is UTF-8 text.
    raw = request.headers.get(NOTE_HEADER, "")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise ValidationError({"note": [f"{NOTE_HEADER} must be UTF-8 text."]}) from None
