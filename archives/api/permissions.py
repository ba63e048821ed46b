"""Anyone may read; a write needs the model permission its method implies."""

from __future__ import annotations

from rest_framework.exceptions import NotAuthenticated, PermissionDenied
from rest_framework.permissions import DjangoModelPermissionsOrAnonReadOnly


class ModelPermissionsOrReadOnly(DjangoModelPermissionsOrAnonReadOnly):
    """GET/HEAD/OPTIONS for everyone; POST needs add_<model>, PUT/PATCH change_<model>,
    DELETE delete_<model> (the model of the view's queryset). A PUT that creates a record
    also needs add_record, and a batch needs each permission its operations use: the
    views check those once they know (see `require`)."""


def require(request, *perms: str) -> None:
    """Refuse (401 anonymous / 403 authenticated) unless the user has every permission."""
    if not request.user or not request.user.is_authenticated:
        raise NotAuthenticated()
    missing = [perm for perm in perms if not request.user.has_perm(perm)]
    if missing:
        raise PermissionDenied(f"Needs the permission(s) {', '.join(missing)}.")
