"""A record's history on its change page (`history`), and "restore this version": a put of
that version's fields through the write path, so it is checked under the schema in force and
by the person's role, and appended as any change is (by the admin, with a note saying so)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse

from archives.log import publishing
from archives.log.access import NotAllowed
from archives.models import Entry, Record
from archives.validation import RECORD_FIELDS

from .history import history_page
from .roles import admin_actor


def version_data(entry: Entry) -> dict | None:
    """The record as `entry` left it (None: a deletion, or metadata not kept then)."""
    if entry.is_deletion or entry.metadata is None:
        return None
    return {name: getattr(entry, name) for name in RECORD_FIELDS}


class ShowsHistory(admin.ModelAdmin):
    """The record's change page lists its entries (a page at a time: `?history=<n>`), each
    version with a button that restores it to those who may change the record."""

    def get_urls(self):
        restore = path("<path:object_id>/restore/<int:seq>/",
                       self.admin_site.admin_view(self.restore_version_view),
                       name="archives_record_restore_version")
        return [restore, *super().get_urls()]

    def render_change_form(self, request, context, add=False, change=False, form_url="",
                           obj=None):
        if obj is not None:
            page, rows = history_page(obj, request.GET.get("history"))
            context.update(history_page=page, history_rows=rows,
                           may_restore=self.has_change_permission(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def restore_version_view(self, request, object_id: str, seq: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        record = self.get_object(request, object_id)
        if record is None:
            raise Http404("No such record.")
        if not self.has_change_permission(request, record):
            raise PermissionDenied
        entry = record.entries.filter(seq=seq).first()
        if entry is None:
            raise Http404(f"The record has no entry {seq}.")
        self._restore(request, record, entry)
        return HttpResponseRedirect(reverse("admin:archives_record_change", args=[record.pk]))

    def _restore(self, request, record: Record, entry: Entry) -> None:
        data = version_data(entry)
        if data is None:
            why = ("a deletion is not a version to restore" if entry.is_deletion else
                   "its metadata was not kept (an entry older than that)")
            self.message_user(request, f"Entry {entry.seq} was not restored: {why}.",
                              messages.ERROR)
            return
        actor = admin_actor(request, f"Restored the version of entry {entry.seq}.")
        try:
            appended = publishing.put_record(feed=record.feed, key=record.key, data=data,
                                             actor=actor)
        except (ValidationError, NotAllowed) as refusal:
            # e.g. a version that the record schema in force does not take.
            why = ("; ".join(refusal.messages) if isinstance(refusal, ValidationError)
                   else str(refusal))
            self.message_user(request, f"The version of entry {entry.seq} was not restored: "
                                       f"{why}", messages.ERROR)
            return
        if appended is None:
            self.message_user(request, f"{record} is already as entry {entry.seq} left it: "
                                       "nothing was appended.", messages.INFO)
        else:
            self.message_user(request, f"Restored the version of entry {entry.seq} of {record}"
                                       f": entry {appended.seq} was appended.",
                              messages.SUCCESS)
