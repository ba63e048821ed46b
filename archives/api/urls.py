from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from . import history, members, tokens, views
from .policy import ApiPolicy


class SchemaView(ApiPolicy, SpectacularAPIView):
    permission_classes = [AllowAny]  # the contract is public, as every read is


class SwaggerView(ApiPolicy, SpectacularSwaggerView):
    permission_classes = [AllowAny]


app_name = "api"

urlpatterns = [
    path("", views.Root.as_view(), name="root"),
    path("feeds/", views.FeedList.as_view(), name="feed-list"),
    path("feeds/<slug:slug>/", views.FeedDetail.as_view(), name="feed-detail"),
    # The same without the slash: APPEND_SLASH cannot redirect a POST or PATCH (it would
    # drop the body; with DEBUG on it raises), so these writes are answered where they land.
    path("feeds", views.FeedList.as_view()),
    path("feeds/<slug:slug>", views.FeedDetail.as_view()),
    path("feeds/<slug:slug>/records/", views.RecordList.as_view(), name="record-list"),
    # No trailing slash, like the record's public URL /feeds/<slug>/records/<key>.
    path("feeds/<slug:slug>/records/<str:key>", views.RecordDetail.as_view(),
         name="record-detail"),
    path("feeds/<slug:slug>/records/<str:key>/history", history.RecordHistory.as_view(),
         name="record-history"),
    path("feeds/<slug:slug>/batch", views.Batch.as_view(), name="batch"),
    path("tokens/", tokens.TokenList.as_view(), name="token-list"),
    path("tokens/<int:id>", tokens.TokenDetail.as_view(), name="token-detail"),
    path("feeds/<slug:slug>/members/", members.MemberList.as_view(), name="member-list"),
    path("feeds/<slug:slug>/members/<str:username>", members.Member.as_view(), name="member"),
    path("schema/", SchemaView.as_view(), name="schema"),
    # Swagger UI loads its assets from drf-spectacular-sidecar's static files: no CDN.
    # (No Redoc: its page template loads web fonts from Google.)
    path("schema/swagger-ui/", SwaggerView.as_view(url_name="api:schema"),
         name="swagger-ui"),
]
