"""/api/tokens/: a user's own API tokens. Create one (its secret is answered once), list them
(never their secrets), revoke one. The rules are archives.log.tokens'."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from archives.log import tokens
from archives.models import ApiToken, Feed
from archives.models.access import MAX_TOKEN_NAME_LENGTH

from . import examples
from .actors import token_of
from .serializers import NON_BLANK_XML_TEXT, StrictFieldsMixin
from .views import BODY, ApiView, errors


class TokenSerializer(serializers.ModelSerializer):
    feeds = serializers.SlugRelatedField[Feed](
        slug_field="slug", many=True, read_only=True,
        help_text="The slugs of the feeds it may write; empty: every feed its user may write.")
    hint = serializers.CharField(
        read_only=True, help_text="The secret's first characters, to tell tokens apart.")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "feeds", "read_only", "expires", "created", "last_used", "hint"]
        extra_kwargs = {
            "read_only": {"help_text": "Whether it may only read (it then writes nothing)."},
            "expires": {"help_text": "When it stops working; null: never."},
            "last_used": {"help_text": "When it last authenticated a request (to the minute)."},
        }


class NewTokenSerializer(TokenSerializer):
    token = serializers.SerializerMethodField(
        help_text="The secret, shown this once and stored nowhere: send it as "
                  "`Authorization: Bearer <token>`.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]

    def get_token(self, token: ApiToken) -> str:
        return self.context["secret"]


class TokenBodySerializer(StrictFieldsMixin, serializers.Serializer):
    """A new token: its name, and what it may do (every rule is archives.log.tokens')."""

    name = serializers.CharField(
        max_length=MAX_TOKEN_NAME_LENGTH, validators=[NON_BLANK_XML_TEXT],
        help_text="What it is for, unique among the user's tokens (entries keep it).")
    feeds = serializers.ListField(
        child=serializers.CharField(), required=False, default=list,
        help_text="Slugs of the feeds it may write (only those); none: every feed its user "
                  "may write.")
    # (A field named like Field.read_only: DRF's metaclass takes it out of the class.)
    read_only = serializers.BooleanField(  # type: ignore[assignment]
        required=False, default=False, help_text="true: it may only read.")
    expires = serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="When it stops working (ISO 8601, to come); null or absent: never.")


@extend_schema(tags=["tokens"])
class TokenList(ApiView):
    permission_classes = [IsAuthenticated]
    serializer_class = TokenSerializer
    pagination_class = None  # a user's few tokens

    def get_queryset(self):
        user = self.request.user  # (authenticated: IsAuthenticated)
        return (ApiToken.objects.filter(user=cast(User, user)).prefetch_related("feeds")
                .order_by("created", "pk"))

    @extend_schema(summary="List your tokens",
                   description="The caller's own tokens, oldest first, without their secrets.",
                   responses={200: TokenSerializer(many=True), **errors(401)},
                   examples=examples.TOKEN_LIST)
    def get(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    @extend_schema(
        summary="Create a token",
        description="Answers the secret once, as `token` (only its digest is stored). A "
                    "name the caller's tokens have already, a feed that does not exist or an "
                    "expiry in the past is refused (400). A token does no more than its user "
                    "may: scoped to feeds the user cannot write, it writes nothing. Sent with "
                    "a token, the request may make only a token that does no more than that "
                    "one (403): a read-only token makes none, a scoped token only tokens "
                    "scoped within its feeds, an expiring one only tokens expiring no later.",
        request=TokenBodySerializer,
        responses={201: NewTokenSerializer,
                   **errors(400, 401, 403, *BODY, invalid=examples.TOKEN_INVALID)},
        examples=examples.TOKEN_CREATE,
    )
    def post(self, request: Request) -> Response:
        body = TokenBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, secret = tokens.issue_token(user=request.user, by=token_of(request),
                                           **body.validated_data)
        return Response(NewTokenSerializer(token, context={"secret": secret}).data,
                        status=status.HTTP_201_CREATED)


@extend_schema(tags=["tokens"], parameters=[OpenApiParameter(
    "id", OpenApiTypes.INT, OpenApiParameter.PATH,
    description="The token's `id`, as its creation and the list of tokens answer it.",
    examples=[OpenApiExample("7", value=7)])])
class TokenDetail(ApiView):
    permission_classes = [IsAuthenticated]
    serializer_class = TokenSerializer
    http_method_names = ["delete", "options"]

    @extend_schema(summary="Revoke a token",
                   description="Deletes one of the caller's tokens: it stops working at once "
                               "(404 for a token that is not the caller's). Sent with a token, "
                               "as creating one (403).",
                   responses={204: None, **errors(401, 403, 404)})
    def delete(self, request: Request, id: int) -> Response:
        token = get_object_or_404(ApiToken, pk=id, user=request.user)
        tokens.revoke_token(token=token, by=token_of(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
