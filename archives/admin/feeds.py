"""Feeds in the admin: created, changed and deleted through the write path, with what each
holds and serves; a feed whose URLs are promised cannot be deleted or renamed."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from archives import validation
from archives.conf import settings
from archives.db import django_internals, schemas
from archives.documents import urls
from archives.log import publishing, sealing
from archives.models import ArchivePage, Entry, Feed, Record

from .forms import FeedForm
from .helpers import changelist, counted, link, short, stamp, verbose_name
from .refusals import Refused, ShowsRefusals
from .roles import FeedRoleInline, RefusesUnseen, maintained_ids, writable_ids


def _record_counts(feed: Feed) -> tuple[int, int]:
    """The feed's live and deleted records, as FeedAdmin.get_queryset counts them."""
    # Annotated on the queryset, which django-stubs cannot see on a Feed.
    return feed.record_count, feed.deleted_count  # type: ignore[attr-defined]


class FeedAdmin(RefusesUnseen, ShowsRefusals):
    form = FeedForm
    list_display = ["short_slug", "short_title", "record_count", "deleted_count", "entry_count",
                    "page_count", "page_size", "changed", "subscription"]
    search_fields = ["slug", "title"]
    # (The schema's versions first: under the record_schema box, the form's last field.)
    readonly_fields = ["schema_versions", "contents", "activity", "uuid", "last_seq",
                       "last_updated", "sealed_pages", "created"]
    actions = ["seal_now"]
    inlines = [FeedRoleInline]

    def get_queryset(self, request):
        feeds = super().get_queryset(request).annotate(
            record_count=Count("records", filter=Q(records__deleted_at__isnull=True)),
            deleted_count=Count("records", filter=Q(records__deleted_at__isnull=False)))
        if super().has_view_permission(request):
            return feeds
        return feeds.filter(pk__in=writable_ids(request))  # those they have a role on

    def get_formsets_with_inlines(self, request, obj=None):
        # A post of the feed's settings alone (a script's, or a form from before members
        # were on the page) leaves its members as they are, rather than failing.
        for formset, inline in super().get_formsets_with_inlines(request, obj):
            if (request.method == "POST"
                    and f"{formset.get_default_prefix()}-TOTAL_FORMS" not in request.POST):
                continue
            yield formset, inline

    # By role (archives.log.access): a feed's producers see its page, its maintainers
    # change it (settings, record schema, members); adding and deleting feeds stays with
    # the global permissions (site administrators).

    def has_module_permission(self, request):
        return super().has_module_permission(request) or bool(writable_ids(request))

    def has_view_permission(self, request, obj=None):
        ids = writable_ids(request)
        return super().has_view_permission(request, obj) or (
            bool(ids) if obj is None else obj.pk in ids)

    def has_change_permission(self, request, obj=None):
        ids = maintained_ids(request)
        return super().has_change_permission(request, obj) or (
            bool(ids) if obj is None else obj.pk in ids)

    @admin.display(description="slug", ordering="slug")
    def short_slug(self, feed: Feed):
        return short(feed.slug, 24)

    @admin.display(description="title", ordering="title")
    def short_title(self, feed: Feed):
        return short(feed.title, 40)

    @admin.display(description="last updated", ordering="last_updated")
    def changed(self, feed: Feed):
        return stamp(feed.last_updated)

    @admin.display(description="records", ordering="record_count")
    def record_count(self, feed: Feed):
        return link(changelist(Record, feed__id__exact=feed.pk, state="live"),
                    _record_counts(feed)[0])

    @admin.display(description="deleted", ordering="deleted_count")
    def deleted_count(self, feed: Feed):
        return link(changelist(Record, feed__id__exact=feed.pk, state="deleted"),
                    _record_counts(feed)[1])

    @admin.display(description="entries", ordering="last_seq")
    def entry_count(self, feed: Feed):
        return link(changelist(Entry, feed__id__exact=feed.pk), feed.last_seq)

    @admin.display(description="sealed pages", ordering="sealed_pages")
    def page_count(self, feed: Feed):
        return link(changelist(ArchivePage, feed__id__exact=feed.pk), feed.sealed_pages)

    @admin.display(description="subscription document")
    def subscription(self, feed: Feed):
        return link(urls.subscription_url(feed.slug), "Atom")

    @admin.display(description="contents")
    def contents(self, feed: Feed):
        """What the feed holds, each count linked to its list, and the documents it serves
        (the record counts are get_queryset's)."""
        backlog = feed.full_pages - feed.sealed_pages
        live, deleted = _record_counts(feed)
        rows = [
            (counted(live, "live record", "live records"),
             changelist(Record, feed__id__exact=feed.pk, state="live")),
            (counted(deleted, "deleted record", "deleted records"),
             changelist(Record, feed__id__exact=feed.pk, state="deleted")),
            (counted(feed.last_seq, "entry", "entries"),
             changelist(Entry, feed__id__exact=feed.pk)),
            (counted(feed.sealed_pages, "sealed page", "sealed pages"),
             changelist(ArchivePage, feed__id__exact=feed.pk)),
            (counted(backlog, "full page not yet sealed", "full pages not yet sealed"),
             changelist(Entry, feed__id__exact=feed.pk, seq__gt=feed.sealed_seq,
                         seq__lte=feed.full_pages * feed.page_size)),
        ]
        subscription = urls.subscription_url(feed.slug)
        documents = [("subscription document (Atom)", subscription),
                     ("its page for people", urls.html_url(subscription)),
                     ("activity chart", urls.url("archives:activity", feed.slug))]
        return format_html(
            '<ul class="feed-contents">{}</ul>Documents: {}',
            format_html_join("", '<li><a href="{1}">{0}</a></li>', rows),
            format_html_join(" · ", '<a href="{1}">{0}</a>', documents))

    @admin.display(description="record schema")
    def record_schema(self, feed: Feed):
        """The schema in force as those who may only read the feed see it (to those who may
        change it, FeedForm's box shows it); without this, the admin looks the form's field
        up on the model and shows "None"."""
        if feed.schema_version is None:
            return "None: the feed's records are free JSON objects."
        return format_html('<a href="{}">Version {}</a>, in force:<pre>{}</pre>',
                           urls.schema_url(feed.slug, feed.schema_version), feed.schema_version,
                           json.dumps(schemas.current_schema(feed), indent=2,
                                      ensure_ascii=False))

    @admin.display(description="record schema versions")
    def schema_versions(self, feed: Feed):
        """Every version of the feed's record schema, newest first, each linked to the URL
        that serves it for ever; and where records are added by the form it draws."""
        versions = feed.schema_versions.order_by("-version").values_list("version", "created")
        if not versions:
            return "None: the feed's records are free JSON objects."
        rows = [(urls.schema_url(feed.slug, version), version, stamp(created),
                 " (in force)" if version == feed.schema_version else "")
                for version, created in versions]
        add = f"{reverse('admin:archives_record_add')}?{urlencode({'feed': feed.pk})}"
        return format_html(
            '<ul class="feed-contents">{}</ul>{}', format_html_join(
                "", '<li><a href="{}">version {}</a>, {}{}</li>', rows),
            format_html('<a href="{}">Add a record</a> with the form the schema draws.', add)
            if feed.schema_version is not None else "No schema in force now.")

    @admin.display(description="activity")
    def activity(self, feed: Feed):
        chart = urls.url("archives:activity", feed.slug)
        return format_html('<a href="{}"><img src="{}" alt="Entries per day" width="570" '
                           'height="225"></a>', chart, chart)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []  # nothing to show yet (a uuid here would not be the one saved)
        # Fixed from the feed's first entry (Feed.frozen_fields).
        return [*self.readonly_fields, *obj.frozen_fields]

    def render_change_form(self, request, context, add=False, change=False, form_url="",
                           obj=None):
        # Say why fields are read-only and why there is no Delete button (the form's top).
        feed = context.get("original")
        context["frozen"] = [(verbose_name(Feed, name), publishing.FROZEN[name])
                             for name in (feed.frozen_fields if feed else [])]
        context["undeletable"] = (publishing.UNDELETABLE if feed and not feed.deletable
                                  else "")
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or obj.deletable)

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in form.changed_data}
        try:
            if change:
                saved = publishing.update_feed(feed=obj, **fields)
            else:
                saved = publishing.create_feed(**{
                    name: form.cleaned_data[name]
                    for name in [*FeedForm.Meta.fields, "record_schema"]
                    if name in form.cleaned_data})
        except ValidationError as error:  # e.g. a schema that live records do not match
            raise Refused(error) from None
        django_internals.take_state(obj, saved)
        if "record_schema" in form.changed_data:  # taken, and said once: as the API says it
            for warning in validation.schema_warnings(form.cleaned_data["record_schema"]):
                self.message_user(request, warning, messages.WARNING)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except publishing.FeedPromised as refusal:
            # Its first entry came after the confirmation page was shown: nothing deleted.
            self.message_user(request, " ".join(refusal.messages), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:archives_feed_change", args=[object_id]))

    def delete_model(self, request, obj):
        publishing.delete_feed(feed=obj)

    def delete_queryset(self, request, queryset):
        deleted, kept = 0, []
        for feed in queryset:
            try:
                self.delete_model(request, feed)
                deleted += 1
            except publishing.FeedPromised:  # its first entry came since the confirmation
                kept.append(str(feed))
        if kept:
            # Said here, and delete_selected's "Successfully deleted" (which counts them)
            # dropped by message_user.
            request.feedpub_kept = kept
            self.message_user(request, f"Not deleted: {', '.join(kept)}. "
                                       f"{publishing.UNDELETABLE}", messages.ERROR)
            if deleted:
                self.message_user(request, f"Deleted {counted(deleted, 'feed', 'feeds')}.")

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs):
        if getattr(request, "feedpub_kept", None) and level == messages.SUCCESS:
            return
        super().message_user(request, message, level, *args, **kwargs)

    def get_deleted_objects(self, objs, request):
        # A feed with entries is "protected" by its promises (publishing.delete_feed says
        # why); one without has nothing of its own but empty snapshots, which go with it.
        feeds = list(objs)
        kept = [f"{feed}: {publishing.UNDELETABLE}"
                for feed in feeds if not feed.deletable]
        counts = {} if kept else {"feeds": len(feeds)}
        return [str(feed) for feed in feeds], counts, set(), kept

    @admin.action(description="Seal full pages now", permissions=["change"])
    def seal_now(self, request, queryset):
        sealed = {feed.slug: sealing.seal_feed(feed)
                  for feed in queryset.filter(pk__in=maintained_ids(request))}
        lines = format_html_join(
            "; ", "{}: {}",
            ((slug, format_html_join(", ", '<a href="{}">page {}</a>',
                                     ((urls.archive_url(slug, page.number), page.number)
                                      for page in pages)) if pages else "nothing to seal")
             for slug, pages in sealed.items()))
        total = sum(len(pages) for pages in sealed.values())
        why = ("Writes already seal each page as it fills (FEEDPUB_SEAL_ON_WRITE); this "
               "action seals what a failed seal left." if settings.FEEDPUB_SEAL_ON_WRITE else
               "Writes do not seal (FEEDPUB_SEAL_ON_WRITE is off): this action or the "
               "seal_archives command does.")
        self.message_user(request, format_html("Sealed {}. {}. {}",
                                               counted(total, "page", "pages"), lines, why),
                          messages.SUCCESS if total else messages.INFO)
