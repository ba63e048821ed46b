from django.urls import path, re_path

from .oai import views as oai
from .serving import views

app_name = "archives"

urlpatterns = [
    path("", views.index, name="index"),
    path("feeds/<slug:slug>/", views.subscription, name="subscription"),
    path("feeds/<slug:slug>/archives/<int:number>/", views.archive, name="archive"),
    # Date routes; no year-only route, since /archives/2024/ is page 2024.
    re_path(
        r"^feeds/(?P<slug>[-\w]+)/archives/(?P<year>[0-9]{4})/(?P<month>[0-9]{2})/"
        r"(?:(?P<day>[0-9]{2})/)?$",
        views.archive_by_date,
        name="archive-by-date",
    ),
    path("feeds/<slug:slug>/records/<str:key>", views.record, name="record"),
    # The feed's record schema: the version in force, and each version (immutable).
    path("feeds/<slug:slug>/schema", views.schema, name="schema"),
    path("feeds/<slug:slug>/schema/<int:version>", views.schema_version, name="schema-version"),
    # The linked-pages representation of the same log, and its snapshots.
    path("feeds/<slug:slug>/pages/latest", views.newest_linked_page, name="linked-latest"),
    path("feeds/<slug:slug>/pages/<int:number>", views.linked_page, name="linked-page"),
    path("feeds/<slug:slug>/snapshots/latest", views.newest_snapshot, name="snapshot-latest"),
    path("feeds/<slug:slug>/snapshots/<uuid:snapshot_id>/", views.snapshot, name="snapshot"),
    path("feeds/<slug:slug>/snapshots/<uuid:snapshot_id>/pages/<int:number>",
         views.snapshot_page, name="snapshot-page"),
    # RFC 5005's complete feed (the live records) and paged feed (the log, newest first).
    path("feeds/<slug:slug>/complete/", views.complete, name="complete"),
    path("feeds/<slug:slug>/paged/", views.paged, name="paged"),
    path("feeds/<slug:slug>/paged/<int:number>/", views.paged_page, name="paged-page"),
    # RSS 2.0 twins of the subscription document and the archive pages (RFC 5005 App. B).
    path("feeds/<slug:slug>/rss/", views.rss_subscription, name="rss"),
    path("feeds/<slug:slug>/archives/<int:number>/rss/", views.rss_archive,
         name="archive-rss"),
    # Pages for people (the feed, archive page and record URLs also answer HTML).
    path("feeds/<slug:slug>/search", views.search, name="search"),
    path("feeds/<slug:slug>/activity.svg", views.activity, name="activity"),
    # WebSub: the hub of the subscription documents and the linked-pages entry point.
    path("websub/", views.websub_hub, name="websub"),
    # OAI-PMH 2.0 from the same log (archives/oai/), and the schema of its feedpub format.
    path("oai", oai.oai, name="oai"),
    path("oai/feedpub-record.xsd", oai.feedpub_schema, name="oai-feedpub-schema"),
]
