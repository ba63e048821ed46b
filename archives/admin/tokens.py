"""Every user's API tokens, for site administrators: what each may do and when it was last
used, never its secret (which is stored nowhere) nor its digest. Tokens are made by their
users (`POST /api/tokens/`) or by `manage.py create_token`; here they are only revoked."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from archives.log import tokens
from archives.models import ApiToken


class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "scope", "read_only", "expires", "last_used", "hint",
                    "created"]
    list_filter = ["read_only", ("expires", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    # A leaked secret is found by its first characters (its hint), or by its user.
    search_fields = ["name", "hint", "user__username"]
    ordering = ["-created"]
    # The page of a token: what it may do, read-only (no digest: it is not listed).
    fields = ["name", "user", "feeds", "read_only", "expires", "last_used", "hint", "created"]
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return super().get_queryset(request).prefetch_related("feeds")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a secret is shown once, by the API or the command that made it

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # "revoke" says what deleting a token does
        return actions

    @admin.display(description="feeds")
    def scope(self, token: ApiToken) -> str:
        return ", ".join(feed.slug for feed in token.feeds.all()) or "every feed of its user"

    @admin.action(description="Revoke the selected tokens (they stop working at once)",
                  permissions=["delete"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = [str(token) for token in queryset]
        self.delete_queryset(request, queryset)
        self.message_user(request, f"Revoked {len(revoked)} token(s): {', '.join(revoked)}.",
                          messages.SUCCESS)

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        tokens.revoke_token(token=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            tokens.revoke_token(token=token)
