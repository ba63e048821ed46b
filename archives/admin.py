"""Admin for people: feeds and records change only through `archives.publishing`."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from . import publishing
from .models import ArchivePage, Entry, Feed, Record
from .validation import RECORD_FIELDS, clean_key, clean_record


@admin.register(Feed)
class FeedAdmin(admin.ModelAdmin):
    list_display = ["slug", "title", "page_size", "last_seq", "sealed_pages", "last_updated"]
    search_fields = ["slug", "title"]
    readonly_fields = ["uuid", "last_seq", "last_updated", "sealed_pages", "created"]

    def get_readonly_fields(self, request, obj=None):
        # Archive URIs and page ranges are promised forever once a page is sealed.
        if obj is not None and obj.sealed_pages:
            return [*self.readonly_fields, "slug", "page_size"]
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not (obj and obj.sealed_pages)

    def save_model(self, request, obj, form, change):
        if change:
            fields = {name: form.cleaned_data[name] for name in form.changed_data}
            obj.__dict__.update(publishing.update_feed(feed=obj, **fields).__dict__)
        else:
            obj.save()

    def delete_model(self, request, obj):
        publishing.delete_feed(feed=obj)


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
                "metadata": cleaned.get("metadata") or {},
                "links": cleaned.get("links") or [],
            })
        except ValidationError as error:
            for field, messages in error.message_dict.items():
                self.add_error(field if field in self.fields else None, messages)
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
    list_display = ["key", "title", "feed", "updated", "deleted_at"]
    list_filter = [LiveFilter, "feed"]
    search_fields = ["key", "title"]
    readonly_fields = ["created", "updated", "deleted_at"]
    list_select_related = ["feed"]

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
    list_display = ["seq", "feed", "kind", "record", "updated"]
    list_filter = ["feed", "kind"]
    list_select_related = ["feed", "record__feed"]


@admin.register(ArchivePage)
class ArchivePageAdmin(ReadOnlyAdmin):
    list_display = ["number", "feed", "first_seq", "last_seq", "last_updated", "has_next"]
    list_filter = ["feed"]
    exclude = ["body"]
