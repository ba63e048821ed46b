"""Anyone may read; a write needs the model permission its method implies."""

from __future__ import annotations

from rest_framework.exceptions import NotAuthenticated, PermissionDenied
from rest_framework.permissions import BasePermission, DjangoModelPermissionsOrAnonReadOnly

RECORD_WRITE_PERMS = ("archives.add_record", "archives.change_record", "archives.delete_record")


class ModelPermissionsOrReadOnly(DjangoModelPermissionsOrAnonReadOnly):
    """GET/HEAD/OPTIONS for everyone; POST needs add_<model>, PUT/PATCH change_<model>,
    DELETE delete_<model> (the model of the view's queryset). A PUT that creates a record
    also needs add_record, and a batch needs each permission its operations use: the
    views check those once they know (see `require`)."""


class MayWriteRecords(BasePermission):
    """A batch needs some record permission before anything else happens (its body is
    read, its feed looked up); which ones exactly its operations need is checked once
    it is parsed (`require`)."""

    message = ("A batch needs archives.add_record and change_record for puts, "
               "delete_record for deletes.")

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated
                    and any(user.has_perm(perm) for perm in RECORD_WRITE_PERMS))


def require(request, *perms: str) -> None:
    """Refuse (401 anonymous / 403 authenticated) unless the user has every permission."""
    if not request.user or not request.user.is_authenticated:
        raise NotAuthenticated()
    missing = [perm for perm in perms if not request.user.has_perm(perm)]
    if missing:
        raise PermissionDenied(f"Needs the permission(s) {', '.join(missing)}.")
