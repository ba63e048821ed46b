"""Records in the admin: saving one is a put (one entry per real change), deleting one
appends a deletion entry and keeps the row (restorable); a record's feed and key are fixed."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as delete_selected_records
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import smart_split, unescape_string_literal

from archives.db import django_internals, schemas, search
from archives.documents import urls
from archives.log import publishing
from archives.log.access import NotAllowed, writable_feeds
from archives.models import Entry, Feed, Record
from archives.parameters import single
from archives.validation import RECORD_FIELDS

from .fields import FeedChoiceField
from .forms import RecordForm
from .helpers import (
    FeedFilter,
    changelist,
    counted,
    link,
    short,
    short_feed,
    stamp,
    verbose_name,
)
from .refusals import Refused, ShowsRefusals
from .roles import RowsOfFeeds, actor_of, admin_actor, take_posted_note
from .versions import ShowsHistory
from .widgets import SchemaMetadataField, form_schema

RECORD_FROZEN = {
    "feed": "A record stays in the feed it was added to: its entries are part of that "
            "feed's history.",
    "key": "The key is the record's URL, promised for ever. To rename a record, add it "
           "under the new key and delete the old one.",
}


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


def _chosen_feed(request) -> Feed | None:
    """The feed an add form is for: the one posted, else `?feed=<pk>` (which the admin
    pre-fills the form with)."""
    pk = single(request.POST, "feed") or single(request.GET, "feed") or ""
    return Feed.objects.filter(pk=pk).first() if pk.isdigit() else None


class RecordAdmin(RowsOfFeeds, ShowsHistory, ShowsRefusals):
    form = RecordForm
    list_display = ["short_key", "short_title", short_feed, "changed", "state", "links_"]
    list_display_links = ["short_key"]
    list_filter = [LiveFilter, ("feed", FeedFilter)]
    # The search box searches as the search page for people does (get_search_results).
    search_fields = ["key", "title", "summary"]
    search_help_text = ("Part of a key, title or summary, in any case, with or without "
                        "accents (a word of one or two letters: of a key or title); every "
                        "word must match (\"quote\" a phrase).")
    readonly_fields = ["created", "updated", "deleted_at", "history", "documents"]
    list_select_related = ["feed"]
    actions = ["restore", "delete_selected"]

    # A producer of a feed (archives.log.access) adds, changes, deletes and restores its
    # records; the global record permissions (the `producers` group) still allow every feed.

    def has_add_permission(self, request):
        return super().has_add_permission(request) or self.writes(request)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) or self.writes(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) or self.writes(request, obj)

    def get_fields(self, request, obj=None):
        # The note goes with a change: there is none on a page that only shows the record.
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            return [name for name in fields if name != "note"]
        return fields

    def get_search_results(self, request, queryset, search_term):
        # Words as Django's own search splits them, each matched by the one search rule.
        terms = [unescape_string_literal(term) if term[0] in "\"'" and term[-1] == term[0]
                 and len(term) > 1 else term for term in smart_split(search_term)]
        return search.matching(queryset, *terms), False

    def get_list_display(self, request):
        # Filtered to one feed (as the feed page links it), a feed column says nothing.
        if "feed__id__exact" in request.GET:
            return [name for name in self.list_display if name is not short_feed]
        return self.list_display

    @admin.display(description="key", ordering="key")
    def short_key(self, record: Record):
        return short(record.key, 24)

    @admin.display(description="title", ordering="title")
    def short_title(self, record: Record):
        return short(record.title, 40)

    @admin.display(description="updated", ordering="updated")
    def changed(self, record: Record):
        return stamp(record.updated)

    @admin.display(description="state", ordering="deleted_at")
    def state(self, record: Record):
        if record.is_deleted:
            return format_html('<span title="deleted {}">deleted</span>',
                               stamp(record.deleted_at))
        return "live"

    @admin.display(description="links")
    def links_(self, record: Record):
        # Its public page first, the one a colleague is sent; a deleted record's URL is a 410.
        if record.is_deleted:
            return format_html("{} · {}", self.history(record), self.document(record))
        page = link(urls.html_url(urls.record_url(record.feed.slug, record.key)), "page")
        return format_html("{} · {} · {}", page, self.history(record), self.document(record))

    @admin.display(description="history")
    def history(self, record: Record):
        return link(changelist(Entry, record__id__exact=record.pk), "entries")

    @admin.display(description="record URL")
    def document(self, record: Record):
        return link(urls.record_url(record.feed.slug, record.key),
                     "gone (410)" if record.is_deleted else "Atom entry")

    @admin.display(description="documents")
    def documents(self, record: Record):
        url = urls.record_url(record.feed.slug, record.key)
        return format_html('{} · {} · feed {}', link(url, "Atom entry"),
                           link(urls.html_url(url), "page for people"),
                           link(reverse("admin:archives_feed_change", args=[record.feed_id]),
                                 record.feed.slug))

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, *RECORD_FROZEN] if obj else []

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "feed":  # (only on the add form: a record's feed is fixed)
            kwargs.setdefault("form_class", FeedChoiceField)
            kwargs.setdefault("queryset",
                              writable_feeds(request.user).order_by("title", "slug"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_form(self, request, obj=None, change=False, **kwargs):
        # A feed with a record schema has its records' metadata edited as a form drawn
        # from it; a feed without one (or an add form before its feed is chosen), as JSON.
        form = super().get_form(request, obj, change, **kwargs)
        feed = obj.feed if obj is not None else _chosen_feed(request)
        if feed is None or feed.schema_version is None:
            return form
        drawn = form_schema(schemas.version_checker(feed, feed.schema_version).schema)
        if drawn is None:
            return form
        return type(form.__name__, (form,), {
            "metadata": SchemaMetadataField(feed, feed.schema_version, drawn)})

    def render_change_form(self, request, context, add=False, change=False, form_url="",
                           obj=None):
        # Say why the feed and key are read-only (the form's top, as on the feed page).
        context["frozen"] = [(verbose_name(Record, name), why)
                             for name, why in RECORD_FROZEN.items()] if obj else []
        context["deleted_at"] = obj.deleted_at if obj else None
        if add:  # the feeds whose choice redraws the metadata (the template's script)
            metadata = context["adminform"].form.fields["metadata"]
            chosen = _chosen_feed(request)
            context["drawn_for"] = (chosen.pk if chosen is not None
                                    and isinstance(metadata, SchemaMetadataField) else None)
            context["schema_feeds"] = list(Feed.objects.filter(
                schema_version__isnull=False).values_list("pk", flat=True))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change):
        # A save is a put: one entry when something changed (and a restore if deleted).
        try:
            entry = publishing.put_record(
                feed=obj.feed, key=obj.key, data=form.record_data,
                actor=admin_actor(request, form.cleaned_data.get("note", "")))
        except ValidationError as error:  # e.g. metadata its feed's schema does not take
            raise Refused(error) from None
        except NotAllowed as refusal:  # the person's role (checked again under the lock)
            raise Refused(ValidationError(str(refusal))) from None
        request.feedpub_unchanged = obj if change and entry is None else None
        saved = Record.objects.get(feed=obj.feed, key=obj.key)
        django_internals.take_state(obj, saved)
        # A create entry for a record older than it: a deleted record came back.
        restored = (entry is not None and entry.kind == Entry.Kind.CREATE
                    and saved.created != entry.updated)
        request.feedpub_restored = obj if restored else None

    def log_change(self, request, obj, message):
        # The admin's history records what was appended; a save that appended nothing
        # changed nothing.
        if getattr(request, "feedpub_unchanged", None) is not None:
            return None
        return super().log_change(request, obj, message)

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs):
        # Django's "changed successfully" (whichever button was pressed) is untrue when
        # nothing was appended; response_change still decides where the person goes.
        unchanged = getattr(request, "feedpub_unchanged", None)
        if unchanged is not None:
            message = f"Nothing changed in {unchanged}: no entry was appended."
            level = messages.INFO
        elif getattr(request, "feedpub_restored", None) is not None:
            message = (f"Restored {request.feedpub_restored}: a create entry was appended, "
                       "and its URL answers again.")
        super().message_user(request, message, level, *args, **kwargs)

    def response_post_save_add(self, request, obj):
        # The new record, not page 1 of a long list where it may not even show.
        return HttpResponseRedirect(reverse("admin:archives_record_change", args=[obj.pk]))

    def delete_view(self, request, object_id, extra_context=None):
        # The confirmation page takes a note (kept with the deletion entry).
        note, errors = take_posted_note(request)
        try:
            return super().delete_view(request, object_id, {
                **(extra_context or {}), "note": note, "note_errors": errors})
        except NotAllowed as refusal:  # (rolled back: nothing was written)
            self.message_user(request, str(refusal), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:archives_record_change",
                                                args=[object_id]))

    @admin.action(description="Delete selected records", permissions=["delete"])
    def delete_selected(self, request, queryset):
        # Django's own action, with the note its confirmation page takes.
        note, errors = take_posted_note(request)
        response = delete_selected_records(self, request, queryset)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data.update(note=note, note_errors=errors)
        return response

    def delete_model(self, request, obj):
        # Deleting appends a deletion entry; the row stays, as the feed's history needs it.
        publishing.delete_record(feed=obj.feed, key=obj.key, actor=actor_of(request))
        request.feedpub_deleted_from = obj.feed_id

    def response_delete(self, request, obj_display, obj_id):
        # Back to the list the person came from, else to the deleted record's feed's
        # records (where it was), not to every feed's.
        response = super().response_delete(request, obj_display, obj_id)
        feed_id = getattr(request, "feedpub_deleted_from", None)
        if (feed_id is None or self.get_preserved_filters(request)
                or response.get("Location") != changelist(Record)):
            return response
        return HttpResponseRedirect(changelist(Record, feed__id__exact=feed_id))

    def delete_queryset(self, request, queryset):
        for record in queryset.select_related("feed"):
            try:
                self.delete_model(request, record)
            except NotAllowed as refusal:
                self.message_user(request, f"{record} was not deleted: {refusal}",
                                  messages.ERROR)

    def get_deleted_objects(self, objs, request):
        # Nothing is removed: each record gets a deletion entry and stays restorable, so
        # its entries are not "protected objects" standing in the way.
        records = [str(record) for record in objs]
        return records, {"records (marked deleted)": len(records)}, set(), []

    @admin.action(description="Restore selected deleted records", permissions=["change"])
    def restore(self, request, queryset):
        restored, refused = 0, []
        for record in queryset.filter(deleted_at__isnull=False).select_related("feed"):
            data = {name: getattr(record, name) for name in RECORD_FIELDS}
            try:
                publishing.put_record(feed=record.feed, key=record.key, data=data,
                                      actor=admin_actor(request))
            except ValidationError as error:
                # A deleted record keeps its metadata, which a schema set since may refuse.
                refused.append((record, "; ".join(error.messages)))
                continue
            except NotAllowed as refusal:
                refused.append((record, str(refusal)))
                continue
            restored += 1
        if restored or not refused:
            self.message_user(request, f"Restored {counted(restored, 'record', 'records')}.",
                              messages.SUCCESS)
        for record, why in refused:
            self.message_user(request, format_html(
                '<a href="{}">{}</a> was not restored: {}. Correct it on its page, and save it '
                "to restore it.", reverse("admin:archives_record_change", args=[record.pk]),
                record, why), messages.ERROR)
