from django.contrib import admin
from django.urls import include, path

from feedpub.health import healthz
from feedpub.metrics import metrics

# API clients get JSON errors, even from failures outside a DRF view (an unknown /api/
# URL, a database lost in middleware); everyone else gets Django's pages.
handler400 = "archives.api.exceptions.bad_request"
handler404 = "archives.api.exceptions.page_not_found"
handler500 = "feedpub.reconnect.server_error"  # a lost database: 503; else the API's 500

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # Prometheus's text format, for loopback, private addresses and a bearer token.
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    # The producer API, its OpenAPI schema (/api/schema/) and its UIs (archives/api/urls.py).
    path("api/", include("archives.api.urls")),
    path("", include("archives.urls")),
]
