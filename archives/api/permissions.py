"""Anyone may read feeds and records; who may write what is archives.log.access's to say.
These classes only refuse early what is refused whatever the request would do, and say
which rule holds for each view."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import (
    SAFE_METHODS,
    BasePermission,
    DjangoModelPermissionsOrAnonReadOnly,
)
from rest_framework.request import Request

from archives.log import access
from archives.models import Feed

from .actors import token_of


class TokenMayWrite(BasePermission):
    """A read-only token reads: any other method of any view is refused (403) before
    anything else is looked at. (ApiPolicy puts it before every view's own classes.)"""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method not in SAFE_METHODS:
            access.check_token_writes(token_of(request))  # NotAllowed: a 403 with why
        return True


class ModelPermissionsOrReadOnly(DjangoModelPermissionsOrAnonReadOnly):
    """GET/HEAD/OPTIONS for everyone; POST needs add_<model>, PUT/PATCH change_<model>,
    DELETE delete_<model> (the model of the view's queryset): the global permissions."""


class FeedPermissions(ModelPermissionsOrReadOnly):
    """Creating and deleting feeds is site administration (the global add_feed and
    delete_feed), by a token that reaches every feed (creating) or that one (deleting).
    Changing a feed (its settings, its record schema) is also its maintainers': checked
    once the feed is read (`has_object_permission`)."""

    perms_map = {**ModelPermissionsOrReadOnly.perms_map, "PATCH": []}
    messages = {
        "POST": "Creating a feed needs site administration (the archives.add_feed "
                "permission).",
        "DELETE": "Deleting a feed needs site administration (the archives.delete_feed "
                  "permission).",
    }

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method not in SAFE_METHODS and not request.user.is_authenticated:
            return False  # a 401, before the feed is looked up
        self.message = self.messages.get(request.method or "", "")
        if request.method == "POST":
            access.check_token_scope(token_of(request), None)
        return super().has_permission(request, view)

    def has_object_permission(self, request: Request, view: Any, obj: Feed) -> bool:
        if request.method in SAFE_METHODS:
            return True
        access.check_token_scope(token_of(request), obj)
        if request.method == "PATCH":
            access.check_maintain(request.user, obj)
        return True


class MaintainersOnly(BasePermission):
    """A feed's maintainers and the site's administrators, for reading and for writing
    (its members): checked once the feed is read, by a token that reaches it."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)  # else a 401

    def has_object_permission(self, request: Request, view: Any, obj: Feed) -> bool:
        access.check_token_scope(token_of(request), obj)
        access.check_maintain(request.user, obj)
        return True
