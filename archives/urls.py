from django.urls import path, re_path

from .documents.kinds import NAMESPACE
from .oai import views as oai
from .serving import views

app_name = NAMESPACE

urlpatterns = [
    path("", views.index, name="index"),
    # Every kind of document at its route (archives/documents/kinds.py): the subscription
    # document and its archive pages, their RSS twins, linked pages and snapshots, RFC 5005's
    # complete and paged feeds, records and record schemas.
    *(path(kind.pattern, view, name=kind.name) for kind, view in views.views_of_kinds()),
    # Date routes; no year-only route, since /archives/2024/ is page 2024.
    re_path(
        r"^feeds/(?P<slug>[-\w]+)/archives/(?P<year>[0-9]{4})/(?P<month>[0-9]{2})/"
        r"(?:(?P<day>[0-9]{2})/)?$",
        views.archive_by_date,
        name="archive-by-date",
    ),
    # Pages for people (the feed, archive page and record URLs also answer HTML).
    path("feeds/<slug:slug>/search", views.search, name="search"),
    path("feeds/<slug:slug>/activity.svg", views.activity, name="activity"),
    # WebSub: the hub of the topics (the kinds of document marked as topics).
    path("websub/", views.websub_hub, name="websub"),
    # OAI-PMH 2.0 from the same log (archives/oai/), and the schema of its feedpub format.
    path("oai", oai.oai, name="oai"),
    path("oai/feedpub-record.xsd", oai.feedpub_schema, name="oai-feedpub-schema"),
]
