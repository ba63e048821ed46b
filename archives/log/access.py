"""Who may change what: the one place the rules of roles, tokens and site administration are
written, for every door (the API, batches, the admin, imports).

- A **site administrator** (a superuser, or a user with the global `archives.change_feed`)
  may do everything.
- A global record permission (`archives.add_record`, `change_record`, `delete_record`: what
  the `producers` group holds) allows that action on every feed.
- A **producer** of a feed (FeedRole, given to the user or to one of its groups) may add,
  change, delete and restore its records; a **maintainer** may do that, and change the feed's
  settings, its record schema and its members.
- A **token** never does more than its user may: a read-only token writes nothing, a token
  scoped to feeds writes only those; it creates and revokes only tokens that do no more than
  itself (`check_token_management`).
- No user (a management command, run by whoever runs the server) may do everything.

The write path reads what a write needs to know of the actor with the feed's row, under its
lock (`rights_to_read`), so a single PUT checks its role with no query of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, Q, QuerySet

from archives.models import ApiToken, Feed, FeedRole, Via
from archives.validation import clean_note

SITE_ADMIN_PERMISSION = "archives.change_feed"
RECORD_PERMISSIONS = {"add": "archives.add_record", "change": "archives.change_record",
                      "delete": "archives.delete_record"}
Role = FeedRole.Role


class NotAllowed(PermissionDenied):
    """The actor may not make this change (a 403 that says what is needed)."""


@dataclass(frozen=True)
class Actor:
    """Who makes a change, by which door, and why: kept with each entry it appends (never
    published). `user` None is the operator (a management command run without --user)."""

    via: str
    user: Any = None
    token: ApiToken | None = None
    note: str = field(default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "via", Via(self.via))
        object.__setattr__(self, "note", clean_note(self.note))  # ValidationError: a 400

    def entry_values(self) -> tuple[Any, ...]:
        """The Entry columns that say who (models.ACTOR_COLUMNS, in order)."""
        user = self.user
        return (user.pk if user is not None else None,
                user.get_username() if user is not None else "",
                self.token.name if self.token is not None else "", str(self.via), self.note)


# What a write says of itself when its caller names no actor: unknown, as entries written
# before actors were kept.
UNKNOWN = (None, "", "", "", "")


def is_site_admin(user: Any) -> bool:
    return bool(user is not None and user.is_active
                and (user.is_superuser or user.has_perm(SITE_ADMIN_PERMISSION)))


def _writes_every_feed(user: Any) -> bool:
    return is_site_admin(user) or user.has_perms(RECORD_PERMISSIONS.values())


def _roles_of(user: Any) -> Q:
    return Q(user=user) | Q(group__user=user)


def rights_to_read(actor: Actor | None) -> dict[str, Any]:
    """What the write path's read of the feed row must add for `check_records`
    (fastsql.lock_feed's arguments): whether the user holds a role on it (for every user
    but a superuser: an EXISTS by index costs the query less than asking the user's
    permissions first would cost the request), whether the token's scope names it."""
    if actor is None:
        return {}
    user, token = actor.user, actor.token
    return {"user_id": user.pk if user is not None and not user.is_superuser else None,
            "token_id": token.pk if token is not None and token.scoped else None}


def check_records(actor: Actor | None, feed: Feed, actions: Iterable[str]) -> None:
    """Refuse (NotAllowed) unless `actor` may take every action ("add", "change",
    "delete") on `feed`'s records; `feed` was read with `rights_to_read(actor)`."""
    if actor is None:
        return
    _check_token(actor.token, feed)
    user = actor.user
    if user is None or getattr(feed, "actor_role", False):
        return
    missing = [action for action in set(actions)
               if not user.has_perm(RECORD_PERMISSIONS[action])]
    if missing and not is_site_admin(user):
        raise NotAllowed(f"Writing the records of feed '{feed.slug}' needs the producer role "
                         "on it (or maintainer).")


def _check_token(token: ApiToken | None, feed: Feed) -> None:
    if token is None:
        return
    check_token_writes(token)
    if hasattr(feed, "in_token_scope") and not feed.in_token_scope:
        raise _out_of_scope(token, feed)


def check_token_writes(token: ApiToken | None) -> None:
    """Refuse (NotAllowed) any write by a read-only token, whatever its user may do."""
    if token is not None and token.read_only:
        raise NotAllowed(f"This token ('{token.name}') is read-only.")


def check_token_scope(token: ApiToken | None, feed: Feed | None) -> None:
    """Refuse (NotAllowed) a change of `feed` by a token scoped to other feeds, and the
    creation of a feed (`feed` None) by a token scoped to any: it reaches only its feeds.
    (Reads the scope: for the doors that are not the write path's.)"""
    if feed is None and token is not None and token.scoped:
        raise NotAllowed(f"This token ('{token.name}') is scoped to some feeds; creating a "
                         "feed needs a token that is not.")
    if feed is not None and not _reaches(token, feed):
        raise _out_of_scope(token, feed)


def _reaches(token: ApiToken | None, feed: Feed) -> bool:
    """Whether `token` (None: a request without one) reaches `feed`: its scope names it, or
    it has none."""
    return token is None or not token.scoped or (
        token.feeds.filter(pk=feed.pk).exists())


def _out_of_scope(token: ApiToken | None, feed: Feed) -> NotAllowed:
    name = token.name if token is not None else ""
    return NotAllowed(f"This token ('{name}') is not scoped to feed '{feed.slug}'.")


def role_of(user: Any, feed: Feed) -> str | None:
    """The user's role on `feed` (its own or a group's; maintainer over producer), or None."""
    if user is None or not user.is_authenticated:
        return None
    roles = set(FeedRole.objects.filter(_roles_of(user), feed=feed)
                .values_list("role", flat=True))
    return Role.MAINTAINER if Role.MAINTAINER in roles else next(iter(roles), None)


def may_maintain(user: Any, feed: Feed, token: ApiToken | None = None) -> bool:
    """Whether `user` (with `token`, if it came with one) may change `feed`'s settings, its
    record schema and its members."""
    if user is None or not user.is_authenticated:
        return False
    if (token is not None and token.read_only) or not _reaches(token, feed):
        return False
    return is_site_admin(user) or role_of(user, feed) == Role.MAINTAINER


def check_maintain(user: Any, feed: Feed, token: ApiToken | None = None) -> None:
    if not may_maintain(user, feed, token):
        raise NotAllowed(f"Changing feed '{feed.slug}' (its settings, record schema or "
                         "members) needs the maintainer role on it (or site administration).")


def may_write_records(user: Any, feed: Feed) -> bool:
    """Whether `user` may add, change and delete `feed`'s records (the admin's question)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return _writes_every_feed(user) or role_of(user, feed) is not None


def check_history(user: Any, feed: Feed, token: ApiToken | None = None) -> None:
    """Refuse (NotAllowed) unless `user` (with `token`, if it came with one) may read who
    changed `feed`'s records: those who may write them (its producers and maintainers, the
    global record permissions, site administrators); a token only within its scope (a
    read-only token may)."""
    if not _reaches(token, feed):
        raise _out_of_scope(token, feed)
    if not may_write_records(user, feed):
        raise NotAllowed(f"Reading the history of feed '{feed.slug}' needs the producer role "
                         "on it (or maintainer).")


def writable_feeds(user: Any) -> QuerySet[Feed]:
    """The feeds whose records `user` may write: every feed, or those it has a role on."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Feed.objects.none()
    if _writes_every_feed(user):
        return Feed.objects.all()
    return Feed.objects.filter(Exists(
        FeedRole.objects.filter(_roles_of(user), feed=OuterRef("pk"))))


def maintained_feeds(user: Any) -> QuerySet[Feed]:
    """The feeds whose settings and members `user` may change."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Feed.objects.none()
    if is_site_admin(user):
        return Feed.objects.all()
    return Feed.objects.filter(Exists(FeedRole.objects.filter(
        _roles_of(user), feed=OuterRef("pk"), role=Role.MAINTAINER)))


def check_token_management(by: ApiToken | None, feeds: Collection[Feed],
                           expires: datetime | None = None) -> None:
    """Refuse (NotAllowed) a token `by` making (or revoking) a token that could do more than
    itself: a read-only token manages none; a token scoped to feeds, only tokens scoped
    within them; an expiring token, only tokens that expire no later. (A request by session,
    `by` None, is its user's own.)"""
    if by is None:
        return
    if by.read_only:
        raise NotAllowed(f"This token ('{by.name}') is read-only: it cannot create or revoke "
                         "tokens.")
    if by.scoped:
        own = set(by.feeds.values_list("pk", flat=True))
        outside = sorted(feed.slug for feed in feeds if feed.pk not in own)
        if not feeds or outside:
            where = f"feed '{outside[0]}'" if outside else "every feed"
            raise NotAllowed(f"This token ('{by.name}') is not scoped to {where}: the tokens "
                             "it manages must be scoped to some of its own feeds.")
    if by.expires is not None and (expires is None or expires > by.expires):
        raise NotAllowed(f"This token ('{by.name}') expires at {by.expires.isoformat()}: the "
                         "tokens it manages must expire no later.")


def give_role(*, feed: Feed, user: Any, role: str) -> bool:
    """Make `user` a `role` of `feed` (replacing the role it had there); True when it had
    none."""
    _, created = FeedRole.objects.update_or_create(feed=feed, user=user,
                                                   defaults={"role": Role(role)})
    return created


def take_role(*, feed: Feed, user: Any) -> bool:
    """Take `user`'s own role on `feed` away (a group's stays); False when it had none."""
    deleted, _ = FeedRole.objects.filter(feed=feed, user=user).delete()
    return bool(deleted)
