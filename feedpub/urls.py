from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The producer API, its OpenAPI schema (/api/schema/) and its UIs (archives/api/urls.py).
    path("api/", include("archives.api.urls")),
    path("", include("archives.urls")),
]
