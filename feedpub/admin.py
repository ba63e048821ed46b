"""The admin site itself (not what it administers, which is archives/admin/): named by
FEEDPUB_ADMIN_TITLE, as a team calls its catalogue, with feedpub's release and commit in every
page's footer (templates/admin/base_site.html), so a screenshot says which release it shows."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig

from feedpub.release import described


class FeedpubAdminSite(admin.AdminSite):
    def each_context(self, request):
        # Read on each request (every admin page's context comes from here, the login page's
        # too), not when the site is made: the setting is the one place the name is kept.
        return {**super().each_context(request),
                "site_header": settings.FEEDPUB_ADMIN_TITLE,
                "site_title": settings.FEEDPUB_ADMIN_TITLE,
                "feedpub_version": described()}


class FeedpubAdminConfig(AdminConfig):
    """django.contrib.admin, with the site above as `admin.site` (INSTALLED_APPS names it)."""

    default_site = "feedpub.admin.FeedpubAdminSite"
