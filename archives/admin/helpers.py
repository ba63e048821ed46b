"""What the admin's lists and pages show of feeds, records and entries: links, cut texts,
short times, and each feed by its label."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.db import models
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import ngettext

from archives.models import Feed


def link(url: str, text: object) -> SafeString:
    return format_html('<a href="{}">{}</a>', url, text)


def verbose_name(model: type[models.Model], name: str) -> str:
    """A field of `model` as its form labels it."""
    field = model._meta.get_field(name)
    return str(field.verbose_name) if isinstance(field, models.Field) else name


def changelist(model: type[models.Model], **filters: object) -> str:
    """The admin list of `model`, filtered as a person would by clicking."""
    url = reverse(f"admin:archives_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def short(text: str, length: int) -> SafeString:
    """`text` cut to fit a column, the whole of it on hover."""
    return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(length))


def feed_label(feed: Feed) -> str:
    """A feed as people choose it (the record form's select, the lists' filters): by its
    title, cut to fit a select, with the slug that tells two of a title apart and that its
    URLs show."""
    return f"{Truncator(feed.title).chars(60)} ({feed.slug})"


class FeedFilter(admin.RelatedFieldListFilter):
    """The lists' "By feed" filter, each feed by feed_label, in the select's order: the
    feeds the person sees (a ModelAdmin's `feeds_shown`, roles.RowsOfFeeds), else all."""

    def field_choices(self, field, request, model_admin):
        shown = getattr(model_admin, "feeds_shown", None)
        feeds = shown(request) if shown is not None else Feed.objects.all()
        return [(feed.pk, feed_label(feed))
                for feed in feeds.order_by("title", "slug").only("slug", "title")]


@admin.display(description="feed", ordering="feed__slug")
def short_feed(obj):
    """The feed column of a list: a slug may be 100 characters that cannot wrap."""
    return short(obj.feed.slug, 24)


def stamp(moment) -> str:
    """A time short enough for a list column (the full one is on the object's page)."""
    return f"{localtime(moment):%Y-%m-%d %H:%M}"


def counted(number: int, singular: str, plural: str) -> str:
    return f"{number} {ngettext(singular, plural, number)}"
