from django.contrib import admin
from django.urls import include, path

from feedpub.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # The producer API, its OpenAPI schema (/api/schema/) and its UIs (archives/api/urls.py).
    path("api/", include("archives.api.urls")),
    path("", include("archives.urls")),
]
