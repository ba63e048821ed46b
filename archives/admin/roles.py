"""Who sees and does what in the admin, by role (the rules are archives.log.access's; this
only asks them): a person with a role on some feeds, and no global permission on a model,
sees the rows of those feeds, chooses among them, and is shown only the actions they may
take. Every write names its actor (`admin_actor`): the write path checks it again, under the
feed's lock, and keeps it with the entry."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import RelatedFieldWidgetWrapper
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, QueryDict

from archives.log.access import Actor, is_site_admin, maintained_feeds, writable_feeds
from archives.models import Feed, FeedRole, Via


def admin_actor(request: HttpRequest, note: str = "") -> Actor:
    """The person at the admin, with their note (ValidationError {"note": ...} if bad)."""
    return Actor(via=Via.ADMIN, user=request.user, note=note)


def take_posted_note(request: HttpRequest) -> tuple[str, list[str]]:
    """The note posted with a confirmed deletion, kept as the request's actor; or its
    errors, and then the POST is emptied so that Django's delete view (or action) shows its
    confirmation page again and deletes nothing."""
    if request.method != "POST" or not request.POST.get("post"):
        return "", []
    note = request.POST.get("note", "")
    try:
        setattr(request, "feedpub_actor", admin_actor(request, note))  # noqa: B010
    except ValidationError as error:
        request.POST = QueryDict()
        return note, error.message_dict.get("note", error.messages)
    return note, []


def actor_of(request: HttpRequest) -> Actor:
    """The actor take_posted_note kept, else the person with no note."""
    return getattr(request, "feedpub_actor", None) or admin_actor(request)


def _ids(request: HttpRequest, name: str, feeds) -> frozenset[int]:
    # Asked several times a page (the index, each permission, each row): read once.
    cached = getattr(request, name, None)
    if cached is None:
        cached = frozenset(feeds(request.user).values_list("pk", flat=True))
        setattr(request, name, cached)
    return cached


def writable_ids(request: HttpRequest) -> frozenset[int]:
    """The feeds whose records the person may write."""
    return _ids(request, "feedpub_writable", writable_feeds)


def maintained_ids(request: HttpRequest) -> frozenset[int]:
    """The feeds whose settings, record schema and members the person may change."""
    return _ids(request, "feedpub_maintained", maintained_feeds)


class RefusesUnseen(admin.ModelAdmin):
    """A row that get_queryset does not show the person (of a feed they have no role on) is
    refused (403), not said to be missing (Django's redirect)."""

    def get_object(self, request, object_id, from_field=None):
        found = super().get_object(request, object_id, from_field)
        if found is None and from_field is None:
            try:
                exists = self.model._default_manager.filter(pk=object_id).exists()
            except (ValueError, ValidationError):
                exists = False
            if exists:
                raise PermissionDenied
        return found


class RowsOfFeeds(RefusesUnseen):
    """The admin of rows that belong to a feed (records, entries): someone with the global
    permission to view them (or change them) sees them all, as before; someone with a role
    on some feeds sees those feeds' rows, and the app in the admin's index."""

    def sees_every_feed(self, request: HttpRequest) -> bool:
        return super().has_view_permission(request)

    def feeds_shown(self, request: HttpRequest) -> QuerySet[Feed]:
        """The feeds of the list's "By feed" filter (helpers.FeedFilter)."""
        if self.sees_every_feed(request):
            return Feed.objects.all()
        return Feed.objects.filter(pk__in=writable_ids(request))

    def get_queryset(self, request):
        rows = super().get_queryset(request)
        if self.sees_every_feed(request):
            return rows
        return rows.filter(feed__in=writable_ids(request))

    def writes(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whether the person may write the records of `obj`'s feed (of some feed: None)."""
        ids = writable_ids(request)
        return bool(ids) if obj is None else obj.feed_id in ids

    def has_module_permission(self, request):
        return super().has_module_permission(request) or self.writes(request)

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or self.writes(request, obj)


class FeedRoleForm(forms.ModelForm):
    class Meta:
        model = FeedRole
        fields = ["user", "group", "role"]

    def clean(self):
        cleaned = super().clean() or {}
        if self.has_changed() and bool(cleaned.get("user")) == bool(cleaned.get("group")):
            raise ValidationError("Give the role to a user or to a group: one of them.")
        return cleaned


class FeedRoleFormSet(forms.BaseInlineFormSet):
    def clean(self):
        # One role per user or group on a feed (a constraint the forms cannot see, as the
        # feed is not one of their fields): said here rather than as a database error.
        super().clean()
        seen: set[Any] = set()
        for form in self.forms:
            cleaned: dict[str, Any] = getattr(form, "cleaned_data", None) or {}
            if not cleaned or cleaned.get("DELETE"):  # (an empty extra form, a deleted one)
                continue
            holder = cleaned.get("user") or cleaned.get("group")
            if holder is not None and holder in seen:
                raise ValidationError(f"{holder} is given a role twice: one role each.")
            seen.add(holder)


class FeedRoleInline(admin.TabularInline):
    """A feed's members, on its page: changed by its maintainers and site administrators,
    seen by its producers."""

    model = FeedRole
    form = FeedRoleForm
    formset = FeedRoleFormSet
    extra = 1
    verbose_name = "member"
    verbose_name_plural = "members (who may write this feed's records; maintainers may also "\
                          "change its settings, record schema and members)"

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        # Plain selects: adding or changing users and groups is not the feed's page's job
        # (nor, for its maintainers, theirs).
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and isinstance(field.widget, RelatedFieldWidgetWrapper):
            field.widget = field.widget.widget
        return field

    def get_queryset(self, request):
        # Django's asks has_view_or_change_permission(request) with no feed, which a
        # maintainer of some feeds is refused, and then shows (and on Django 6, validates
        # against) no existing row. Which rows: the page's feed's (the formset filters by
        # it), whose permissions are asked below with it.
        return FeedRole.objects.select_related("user", "group")

    def _maintains(self, request, feed) -> bool:
        if feed is None:  # the add form: who may add a feed gives its first members
            return is_site_admin(request.user)
        return feed.pk in maintained_ids(request)

    def has_add_permission(self, request, obj=None):
        return self._maintains(request, obj)

    def has_change_permission(self, request, obj=None):
        return self._maintains(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._maintains(request, obj)

    def has_view_permission(self, request, obj=None):
        return self._maintains(request, obj) or (
            obj is not None and obj.pk in writable_ids(request))
