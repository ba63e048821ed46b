"""The log and the sealed pages in the admin, read-only: the write path and the sealer alone
write them."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from archives.documents import urls
from archives.models import ArchivePage, Entry, Record
from archives.parameters import single

from .helpers import FeedFilter, changelist, link, short, short_feed, stamp
from .history import actor_label
from .roles import RowsOfFeeds


class ReadOnlyAdmin(admin.ModelAdmin):
    """The log and the sealed pages are written by the write path and the sealer only."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class EntryAdmin(ReadOnlyAdmin, RowsOfFeeds):
    """The log, read-only; a feed's producers see its entries (RowsOfFeeds). Who made each
    change is listed (never published): filtered by user, a person's changes across feeds."""

    list_display = ["seq", short_feed, "kind", "record_key", "short_title", "changed", "actor",
                    "document"]
    list_filter = [("feed", FeedFilter), "kind", "via", "user"]
    list_select_related = ["feed", "record"]
    search_fields = ["record__key", "title", "username"]
    search_help_text = "Part of a record's key, a title, or the name of the user who wrote it."
    # Newest first: id follows the order entries were written in, across feeds.
    ordering = ["-id"]
    # Counting every entry of a big log on each page view is the slow part of a changelist.
    show_full_result_count = False

    def changelist_view(self, request, extra_context=None):
        # A record's "entries" link filters to it: say which record, and link back.
        record_id = single(request.GET, "record__id__exact") or ""
        record = (Record.objects.select_related("feed").filter(pk=record_id).first()
                  if record_id.isdigit() else None)
        user_id = single(request.GET, "user__id__exact") or ""
        if record is None and user_id.isdigit():
            username = (self.get_queryset(request).filter(user_id=user_id)
                        .values_list("username", flat=True).first())
            extra_context = {"subtitle": f"Changes by {username or 'this user'}, across feeds",
                             **(extra_context or {})}
        if record is not None:
            extra_context = {"subtitle": format_html(
                'Entries of the record <a href="{}">{}</a>',
                reverse("admin:archives_record_change", args=[record.pk]), record),
                **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    @admin.display(description="record", ordering="record__key")
    def record_key(self, entry: Entry):
        return format_html('<a href="{}" title="{}">{}</a>',
                           reverse("admin:archives_record_change", args=[entry.record_id]),
                           entry.record.key, Truncator(entry.record.key).chars(24))

    @admin.display(description="title", ordering="title")
    def short_title(self, entry: Entry):
        return short(entry.title, 40)

    @admin.display(description="updated", ordering="updated")
    def changed(self, entry: Entry):
        return stamp(entry.updated)

    @admin.display(description="by", ordering="username")
    def actor(self, entry: Entry):
        label, via = actor_label(entry), f" ({entry.via})" if entry.via else ""
        if entry.user_id is None:
            return f"{label}{via}"
        return format_html('<a href="{}" title="Their changes, across feeds">{}</a>{}',
                           changelist(Entry, user__id__exact=entry.user_id), label, via)

    @admin.display(description="served in")
    def document(self, entry: Entry):
        name, url = urls.document_holding(entry.feed, entry.seq)
        return link(url, name)


class ArchivePageAdmin(ReadOnlyAdmin):
    list_display = ["number", short_feed, "first_seq", "last_seq", "last_updated", "has_next",
                    "document"]
    list_filter = [("feed", FeedFilter)]
    list_select_related = ["feed"]
    exclude = ["body"]
    ordering = ["feed", "-number"]
    show_full_result_count = False

    def get_queryset(self, request):
        # The frozen bodies are large and never shown here.
        return super().get_queryset(request).defer("body", "multipart", "rss")

    @admin.display(description="document")
    def document(self, page: ArchivePage):
        return link(urls.archive_url(page.feed.slug, page.number), "Atom")
