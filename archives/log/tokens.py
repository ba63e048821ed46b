"""Issuing and revoking API tokens, for every door (the API's /api/tokens/, `manage.py
create_token`, the admin). Bad input is a ValidationError naming its field (a 400, a
CommandError); a token that may not manage tokens is NotAllowed (a 403). The secret is
returned once and stored nowhere: only its digest is kept (archives.models.ApiToken)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils import timezone

from archives.models import ApiToken, Feed
from archives.models.access import MAX_TOKEN_NAME_LENGTH
from archives.validation import xml_problem

from .access import check_token_management


def issue_token(*, user: Any, name: str, feeds: Sequence[str] = (), read_only: bool = False,
                expires: datetime | None = None,
                by: ApiToken | None = None) -> tuple[ApiToken, str]:
    """A new token of `user` named `name`, scoped to the feeds of these slugs (none: every
    feed its user may write), and its secret. `by`: the token the request came with, which
    may not make a token that does more than itself."""
    if by is not None and by.read_only:
        check_token_management(by, ())  # refused before the body is looked at
    name = clean_token_name(name)
    scope = _feeds(feeds)
    if expires is not None and expires <= timezone.now():
        raise ValidationError({"expires": [
            f"{expires.isoformat()} is in the past: give a time to come, or none."]})
    check_token_management(by, scope, expires)
    duplicate = ValidationError({"name": [
        f"{user.get_username()} has a token named '{name}' already; choose another name."]})
    if ApiToken.objects.filter(user=user, name=name).exists():
        raise duplicate
    try:
        return ApiToken.issue(user=user, name=name, feeds=scope, read_only=read_only,
                              expires=expires)
    except IntegrityError:  # the same name, issued meanwhile
        raise duplicate from None


def revoke_token(*, token: ApiToken, by: ApiToken | None = None) -> None:
    """Delete `token`: it stops working at once. Its entries keep its name."""
    check_token_management(by, list(token.feeds.all()), token.expires)
    token.delete()


def clean_token_name(value: Any) -> str:
    """A token's name: what tells one's tokens apart, and what the log keeps of the token."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError({"name": ["Give the token a name (what it is for)."]})
    name = value.strip()
    if len(name) > MAX_TOKEN_NAME_LENGTH:
        raise ValidationError({"name": [f"At most {MAX_TOKEN_NAME_LENGTH} characters."]})
    problem = xml_problem(name)
    if problem:
        raise ValidationError({"name": [problem]})
    return name


def _feeds(slugs: Sequence[str]) -> list[Feed]:
    wanted = list(dict.fromkeys(slugs))
    found = {feed.slug: feed for feed in Feed.objects.filter(slug__in=wanted)}
    unknown = [slug for slug in wanted if slug not in found]
    if unknown:
        raise ValidationError({"feeds": [f"No feed has the slug '{slug}'." for slug in unknown]})
    return [found[slug] for slug in wanted]
