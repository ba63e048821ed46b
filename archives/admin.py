"""Admin for people: feeds and records change only through `archives.publishing`.

Record and feed forms check their input with archives.validation, the same rules the API
applies. Saving a record is a put (one entry per real change), deleting one appends a
deletion entry and keeps the row, and entries and sealed pages are read-only.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.utils.html import format_html

from . import atom, publishing, sealing
from .models import ArchivePage, Entry, Feed, Record
from .validation import RECORD_FIELDS, clean_feed_text, clean_key, clean_record


def _add_errors(form: forms.ModelForm, error: ValidationError) -> None:
    for field, messages_ in error.message_dict.items():
        form.add_error(field if field in form.fields else None, messages_)


def _link(url: str, text: str):
    return format_html('<a href="{}">{}</a>', url, text)


class FeedForm(forms.ModelForm):
    class Meta:
        model = Feed
        fields = ["slug", "title", "subtitle", "author", "language", "page_size"]

    def clean(self):
        cleaned = super().clean()
        try:
            clean_feed_text(cleaned)
        except ValidationError as error:
            _add_errors(self, error)
        return cleaned


@admin.register(Feed)
class FeedAdmin(admin.ModelAdmin):
    form = FeedForm
    list_display = ["slug", "title", "record_count", "entry_count", "page_count", "page_size",
                    "last_updated", "subscription"]
    search_fields = ["slug", "title"]
    readonly_fields = ["uuid", "last_seq", "last_updated", "sealed_pages", "created", "activity"]
    actions = ["seal_now"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(record_count=Count("records"))

    @admin.display(description="records", ordering="record_count")
    def record_count(self, feed: Feed) -> int:
        return feed.record_count

    @admin.display(description="entries", ordering="last_seq")
    def entry_count(self, feed: Feed) -> int:
        return feed.last_seq

    @admin.display(description="sealed pages", ordering="sealed_pages")
    def page_count(self, feed: Feed) -> int:
        return feed.sealed_pages

    @admin.display(description="subscription document")
    def subscription(self, feed: Feed):
        return _link(atom.subscription_url(feed.slug), "Atom")

    @admin.display(description="activity")
    def activity(self, feed: Feed):
        if feed.pk is None:
            return "-"
        chart = atom.url("archives:activity", feed.slug)
        return format_html('<a href="{}"><img src="{}" alt="Entries per day" width="570" '
                           'height="225"></a><br>{}', chart, chart,
                           _link(atom.html_url(atom.subscription_url(feed.slug)), "feed page"))

    def get_readonly_fields(self, request, obj=None):
        # Archive URIs and page ranges are promised forever (Feed.frozen_fields).
        return [*self.readonly_fields, *(obj.frozen_fields if obj else [])]

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not (obj and obj.sealed_pages)

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in form.changed_data}
        if change:
            saved = publishing.update_feed(feed=obj, **fields)
        else:
            saved = publishing.create_feed(**{name: form.cleaned_data[name]
                                              for name in FeedForm.Meta.fields
                                              if name in form.cleaned_data})
        obj.__dict__.update(saved.__dict__)

    def delete_model(self, request, obj):
        publishing.delete_feed(feed=obj)

    def delete_queryset(self, request, queryset):
        for feed in queryset:
            self.delete_model(request, feed)

    def get_deleted_objects(self, objs, request):
        # The feed's records and entries go with it (publishing.delete_feed); Django's
        # collector would call them "protected" and the entry admin is read-only.
        feeds = list(objs)
        if any(feed.sealed_pages for feed in feeds):
            return [str(feed) for feed in feeds], {}, set(), [
                f"{feed} has sealed archive pages" for feed in feeds if feed.sealed_pages]
        counts = {"feeds": len(feeds),
                  "records": Record.objects.filter(feed__in=feeds).count(),
                  "entries": Entry.objects.filter(feed__in=feeds).count()}
        return [str(feed) for feed in feeds], counts, set(), []

    @admin.action(description="Seal full pages now", permissions=["change"])
    def seal_now(self, request, queryset):
        sealed = [page for feed in queryset for page in sealing.seal_feed(feed)]
        self.message_user(request, f"Sealed {len(sealed)} page(s).", messages.SUCCESS)


class RecordForm(forms.ModelForm):
    """Checks a record with the same rules as the API (archives.validation)."""

    class Meta:
        model = Record
        fields = ["feed", "key", *RECORD_FIELDS]

    def clean(self):
        cleaned = super().clean()
        try:
            if not self.instance.pk:
                clean_key(cleaned.get("key"))
            self.record_data = clean_record({
                "title": cleaned.get("title"),
                "summary": cleaned.get("summary") or "",
                "metadata": cleaned.get("metadata") if "metadata" in cleaned else {},
                "links": cleaned.get("links") or [],
            })
        except ValidationError as error:
            _add_errors(self, error)
        return cleaned


class LiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("live", "Live"), ("deleted", "Deleted")]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


@admin.register(Record)
class RecordAdmin(admin.ModelAdmin):
    form = RecordForm
    list_display = ["key", "title", "feed", "updated", "deleted_at", "document"]
    list_filter = [LiveFilter, "feed"]
    search_fields = ["key", "title"]
    readonly_fields = ["created", "updated", "deleted_at"]
    list_select_related = ["feed"]
    actions = ["restore"]

    @admin.display(description="record URL")
    def document(self, record: Record):
        return _link(atom.record_url(record.feed.slug, record.key),
                     "gone (410)" if record.is_deleted else "Atom entry")

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "feed", "key"] if obj else self.readonly_fields

    def save_model(self, request, obj, form, change):
        # A save is a put: one entry when something changed (and a restore if deleted).
        publishing.put_record(feed=obj.feed, key=obj.key, data=form.record_data)
        saved = Record.objects.get(feed=obj.feed, key=obj.key)
        obj.__dict__.update(saved.__dict__)

    def delete_model(self, request, obj):
        # Deleting appends a deletion entry; the row stays, as the feed's history needs it.
        publishing.delete_record(feed=obj.feed, key=obj.key)

    def delete_queryset(self, request, queryset):
        for record in queryset.select_related("feed"):
            self.delete_model(request, record)

    def get_deleted_objects(self, objs, request):
        # Nothing is removed: each record gets a deletion entry and stays restorable, so
        # its entries are not "protected objects" standing in the way.
        records = [str(record) for record in objs]
        return records, {"records (marked deleted)": len(records)}, set(), []

    @admin.action(description="Restore selected deleted records", permissions=["change"])
    def restore(self, request, queryset):
        restored = 0
        for record in queryset.filter(deleted_at__isnull=False).select_related("feed"):
            data = {name: getattr(record, name) for name in RECORD_FIELDS}
            publishing.put_record(feed=record.feed, key=record.key, data=data)
            restored += 1
        self.message_user(request, f"Restored {restored} record(s).", messages.SUCCESS)


class ReadOnlyAdmin(admin.ModelAdmin):
    """The log and the sealed pages are written by the write path and the sealer only."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ["seq", "feed", "kind", "record", "updated", "document"]
    list_filter = ["feed", "kind"]
    list_select_related = ["feed", "record__feed"]
    # Counting every entry of a big log on each page view is the slow part of a changelist.
    show_full_result_count = False

    @admin.display(description="served in")
    def document(self, entry: Entry):
        name, url = atom.document_holding(entry.feed, entry.seq)
        return _link(url, name)


@admin.register(ArchivePage)
class ArchivePageAdmin(ReadOnlyAdmin):
    list_display = ["number", "feed", "first_seq", "last_seq", "last_updated", "has_next",
                    "document"]
    list_filter = ["feed"]
    list_select_related = ["feed"]
    exclude = ["body"]
    show_full_result_count = False

    def get_queryset(self, request):
        # The frozen bodies are large and never shown here.
        return super().get_queryset(request).defer("body", "multipart", "rss")

    @admin.display(description="document")
    def document(self, page: ArchivePage):
        return _link(atom.archive_url(page.feed.slug, page.number), "Atom")
