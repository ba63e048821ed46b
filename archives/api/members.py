"""A feed's members: who holds a role on it (producer, maintainer), and giving or taking a
user's role. For the feed's maintainers and the site's administrators (MaintainersOnly);
the roles' rules and writes are archives.log.access's."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from archives.log import access
from archives.models import Feed, FeedRole

from . import examples
from .permissions import MaintainersOnly
from .serializers import StrictFieldsMixin
from .views import BODY, ApiView, errors

ROLES = [role.value for role in access.Role]
NOT_A_ROLE = f"Not a role; the roles are {', '.join(ROLES)}."
ROLE_INVALID = {"detail": "Invalid input; nothing was written.", "errors": {"role": [NOT_A_ROLE]}}


class MemberSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="The user's username.")
    group = serializers.CharField(
        required=False, help_text="The group's name (each of its users holds the role).")
    role = serializers.ChoiceField(choices=ROLES)


class RoleSerializer(StrictFieldsMixin, serializers.Serializer):
    role = serializers.ChoiceField(
        choices=ROLES, help_text="producer: writes the feed's records; maintainer: that, "
                                 "and the feed's settings, record schema and members.",
        error_messages={"invalid_choice": NOT_A_ROLE})


class MembersView(ApiView):
    """The feed (by its slug) is read, and who may ask checked, by get_object()."""

    permission_classes = [MaintainersOnly]
    queryset = Feed.objects.all()
    lookup_field = "slug"
    pagination_class = None  # a feed has a few members, listed whole


@extend_schema(tags=["members"], parameters=[examples.SLUG_PARAMETER])
class MemberList(MembersView):
    serializer_class = MemberSerializer

    @extend_schema(summary="List a feed's members",
                   description="Users and groups with a role on the feed: users first, "
                               "by username, then groups, by name. For the feed's "
                               "maintainers and site administrators.",
                   responses={200: MemberSerializer(many=True), **errors(401, 403, 404)},
                   examples=examples.MEMBERS)
    def get(self, request: Request, slug: str) -> Response:
        roles = FeedRole.objects.filter(feed=self.get_object()).select_related("user", "group")
        users = sorted((role.user.get_username(), role.role) for role in roles if role.user)
        groups = sorted((role.group.name, role.role) for role in roles if role.group)
        return Response([{"user": name, "role": role} for name, role in users]
                        + [{"group": name, "role": role} for name, role in groups])


@extend_schema(tags=["members"], parameters=[examples.SLUG_PARAMETER,
                                             examples.USERNAME_PARAMETER])
class Member(MembersView):
    serializer_class = RoleSerializer
    http_method_names = ["put", "delete", "options"]

    @extend_schema(summary="Give a user a role on a feed",
                   description="201 when the user had no role of their own on the feed, else "
                               "200 (the role given replaces theirs). For the feed's "
                               "maintainers and site administrators.",
                   request=RoleSerializer,
                   responses={200: MemberSerializer, 201: MemberSerializer,
                              **errors(400, 401, 403, 404, *BODY,
                                       invalid=ROLE_INVALID)},
                   examples=examples.MEMBER_PUT)
    def put(self, request: Request, slug: str, username: str) -> Response:
        feed = self.get_object()
        user = _user(username)
        body = RoleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        role = body.validated_data["role"]
        created = access.give_role(feed=feed, user=user, role=role)
        headers = {"Location": reverse("api:member", args=[feed.slug, username])}
        return Response({"user": user.get_username(), "role": role},
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers=headers if created else {})

    @extend_schema(summary="Take a user's role on a feed away",
                   description="The role given to the user themselves; a group's stays. "
                               "404 when they have none on the feed.",
                   responses={204: None, **errors(401, 403, 404)})
    def delete(self, request: Request, slug: str, username: str) -> Response:
        feed = self.get_object()
        if not access.take_role(feed=feed, user=_user(username)):
            raise exceptions.NotFound(f"The user '{username}' has no role of their own on "
                                      f"feed '{feed.slug}'.")
        return Response(status=status.HTTP_204_NO_CONTENT)


def _user(username: str) -> Any:
    model = get_user_model()
    try:
        return model.objects.get(**{model.USERNAME_FIELD: username})
    except model.DoesNotExist:
        raise exceptions.NotFound(f"No user '{username}' on this server.") from None

