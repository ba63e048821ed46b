"""Admin for people: feeds and records change only through `archives.log.publishing`.

Record and feed forms check their input with archives.validation, the same rules the API
applies. Saving a record is a put (one entry per real change), deleting one appends a
deletion entry and keeps the row, and entries and sealed pages are read-only. What the write
path refuses (a record its feed's schema does not take, a schema that is invalid or that live
records break) is shown at the form's fields, and nothing is written (Refused).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator, smart_split, unescape_string_literal
from django.utils.timezone import localtime
from django.utils.translation import ngettext
from django_jsonform.utils import ErrorMap
from django_jsonform.widgets import JSONFormWidget

from archives.conf import settings

from . import jsoninput, validation
from .db import django_internals, schemas, search
from .documents import urls
from .log import publishing, sealing
from .models import ArchivePage, Entry, Feed, Record
from .parameters import single
from .validation import RECORD_FIELDS, clean_feed_text, clean_record

# The navigation sidebar takes 300 of a 1280-pixel screen from every list; the
# breadcrumbs and the index page lead everywhere it does.
admin.site.enable_nav_sidebar = False


def _add_errors(form: forms.ModelForm, error: ValidationError) -> None:
    for field, messages_ in error.message_dict.items():
        if field not in form.errors:  # one message per mistake: the field's own comes first
            form.add_error(field if field in form.fields else None, messages_)


class Refused(Exception):
    """What the write path refused of a form it let through, raised from save_model so that
    the admin's transaction rolls back: nothing of the save is written. `error` has its
    messages by field (those of no field under NON_FIELD_ERRORS)."""

    def __init__(self, error: ValidationError):
        super().__init__(error)
        self.error = (error if hasattr(error, "error_dict")
                      else ValidationError({NON_FIELD_ERRORS: error.error_list}))


class ShowsRefusals:
    """A ModelAdmin whose save_model raises Refused: the form is shown again as it was
    filled in, with the write path's own messages at their fields (not a 500). The write
    path is the one place that checks (a schema against live records, a record against its
    feed's schema, under the feed's lock), so the form does not guess it beforehand."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except Refused as refused:
            # Once more, with the refusal as the form's errors: invalid, so nothing is saved.
            request.feedpub_refusal = refused.error
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        refusal = getattr(request, "feedpub_refusal", None)
        return form if refusal is None else type(form.__name__, (form,), {"refusal": refusal})


def _link(url: str, text: str):
    return format_html('<a href="{}">{}</a>', url, text)


def _changelist(model, **filters) -> str:
    """The admin list of `model`, filtered as a person would by clicking."""
    url = reverse(f"admin:archives_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def _short(text: str, length: int):
    """`text` cut to fit a column, the whole of it on hover."""
    return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(length))


def feed_label(feed: Feed) -> str:
    """A feed as people choose it (the record form's select, the lists' filters): by its
    title, cut to fit a select, with the slug that tells two of a title apart and that its
    URLs show."""
    return f"{Truncator(feed.title).chars(60)} ({feed.slug})"


class FeedChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Feed) -> str:
        return feed_label(obj)


class FeedFilter(admin.RelatedFieldListFilter):
    """The lists' "By feed" filter, each feed by feed_label, in the select's order."""

    def field_choices(self, field, request, model_admin):
        return [(feed.pk, feed_label(feed))
                for feed in Feed.objects.order_by("title", "slug").only("slug", "title")]


@admin.display(description="feed", ordering="feed__slug")
def short_feed(obj):
    """The feed column of a list: a slug may be 100 characters that cannot wrap."""
    return _short(obj.feed.slug, 24)


def _stamp(moment) -> str:
    """A time short enough for a list column (the full one is on the object's page)."""
    return f"{localtime(moment):%Y-%m-%d %H:%M}"


def _count(number: int, singular: str, plural: str) -> str:
    return f"{number} {ngettext(singular, plural, number)}"


def _server_counts_lengths(form: forms.BaseForm) -> None:
    """No maxlength in the browser, which would cut a long text without a word: the
    server counts and says so, once."""
    for field in form.fields.values():
        if field.widget.attrs.pop("maxlength", None) is not None:
            field.error_messages["max_length"] = (
                "At most %(limit_value)d characters (this has %(show_value)d).")


# A JSON parser's message names what it found; what to do about it is said here.
JSON_ADVICE = {
    "Invalid control character": "a control character inside a string: write it as \\uXXXX "
                                 "(tab: \\t, newline: \\n)",
}


def _help(text: str, example) -> str:
    shown = example if isinstance(example, str) else json.dumps(example, indent=2)
    return format_html("{}<br>Example:<pre>{}</pre>", text, shown)


class PrettyJSONField(forms.JSONField):
    """JSON shown indented as a person writes it, and refused with where it went wrong.
    An empty box means `empty()` (an empty object or list), not null. It is read as the
    API reads a body (archives.jsoninput): a repeated name or a number that would be
    stored bent is refused, not settled silently."""

    def __init__(self, *, empty, **kwargs):
        self.empty = empty
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 8, "cols": 80,
                                                          "spellcheck": "false"}))
        super().__init__(**kwargs)

    def to_python(self, value):
        if not self.disabled and isinstance(value, str) and not value.strip():
            return self.empty()
        if self.disabled or not isinstance(value, str):
            return super().to_python(value)
        try:
            converted = jsoninput.loads(value)
        except json.JSONDecodeError as error:
            # Line and column count from 1, as json reports them; some of json's messages
            # end in "at", followed in str(error) by a 0-based position we do not show.
            problem = error.msg.removesuffix(" at")
            raise ValidationError(f"Invalid JSON at line {error.lineno}, column {error.colno}: "
                                  f"{JSON_ADVICE.get(problem, problem)}.",
                                  code="invalid") from None
        except jsoninput.JSONInputError as error:
            raise ValidationError(f"JSON refused: {error.msg}.", code="invalid") from None
        return forms.fields.JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data, initial):
        """A refused box shows again as it was typed, not as json.loads settled it."""
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return jsoninput.loads(data)
        except ValueError:
            return forms.fields.InvalidJSONInput(data)

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        if value is None and self.empty() is None:
            return ""  # nothing: an empty box, as it is read
        return json.dumps(value, indent=2, ensure_ascii=False)


# What django-jsonform needs of a schema (its script refuses to draw anything else): a type
# on each property and list item, or else a $ref or a const; items on a list; properties on an
# object. It keeps an object's or a list's `description` for itself, and shows `help_text`
# under any other input.
GROUP_TYPES = {"object", "array"}
DRAWN_UNTYPED = {"$ref", "const"}
# Choices between schemas: drawn by django-jsonform in its own way, not the standard's.
COMBINATORS = {"allOf", "anyOf", "oneOf"}
# Its time picker writes 10:30, which `time` refuses (10:30:00): a text input instead.
TEXT_FORMATS = {"time"}


class _Undrawable(Exception):  # (not an error: the metadata stays a JSON box)
    pass


def form_schema(schema: dict) -> dict | None:
    """A feed's record schema (JSON Schema 2020-12) in django-jsonform's dialect, to draw the
    metadata form with. Only what the widget reads differently is said again (a type where
    the standard infers one, help texts, a text input for times); this draws and checks
    nothing: the write path checks each record against the schema itself. None when the
    widget cannot draw the schema (no properties, an untyped one, allOf/anyOf/oneOf): the
    metadata is then a JSON box, as for a feed without a schema."""
    if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        return None
    try:
        return _drawn({**schema, "type": "object"})
    except _Undrawable:
        return None


def _drawn(node):
    """One subschema as the widget draws it (the schema's data, such as enum, const and
    default, is copied as it is)."""
    if not isinstance(node, dict) or COMBINATORS & node.keys():
        raise _Undrawable
    drawn = dict(node)
    for name in ("properties", "$defs"):
        if name in node:
            if not isinstance(node[name], dict):
                raise _Undrawable
            drawn[name] = {key: _drawn(sub) for key, sub in node[name].items()}
    if "items" in node:
        drawn["items"] = _drawn(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        drawn["additionalProperties"] = _drawn(node["additionalProperties"])
    if "type" not in node:
        if "properties" in node:
            drawn["type"] = "object"
        elif "items" in node:
            drawn["type"] = "array"
        elif not DRAWN_UNTYPED & node.keys():
            raise _Undrawable
    kinds = set(drawn["type"]) if isinstance(drawn.get("type"), list) else {drawn.get("type")}
    if "array" in kinds and "items" not in node:
        raise _Undrawable
    if "object" in kinds and "properties" not in node:
        if node.get("additionalProperties") in (None, False):
            raise _Undrawable  # an object of anything: nothing to draw
        drawn["properties"] = {}  # a map: the widget adds a key per "+"
    if node.get("format") in TEXT_FORMATS:
        del drawn["format"]
    if isinstance(node.get("description"), str) and not kinds & GROUP_TYPES:
        drawn.setdefault("help_text", node["description"])
    return drawn


_BLANK = object()


def _filled(value):
    """`value` without what was left empty in the form (the widget sends null or "" for an
    input left empty, and a group of them for a group), or _BLANK if nothing is left."""
    if value is None or (isinstance(value, str) and not value):
        return _BLANK
    if isinstance(value, dict):
        kept = {name: filled for name, item in value.items()
                if (filled := _filled(item)) is not _BLANK}
        return _BLANK if value and not kept else kept
    if isinstance(value, list):
        kept = [filled for item in value if (filled := _filled(item)) is not _BLANK]
        return _BLANK if value and not kept else kept
    return value


# A place in an error of the write path, after "metadata": .name, [0] or ["a name"]
# (validation.metadata_path writes them).
ERROR_STEP_RE = re.compile(r'\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


# What the write path says of a property left out: it names the property's JSON name.
REQUIRED_RE = re.compile(r'("(?:[^"\\]|\\.)*") is a required property')
REQUIRED = "this field is required."


def placed(message: str) -> tuple[list[str | int], str]:
    """Where in the metadata the write path's "metadata.creators[0].name: why" is about (its
    steps; a property left out, at that property) and the why; a message about the whole
    record, or not of that form, at [] as it is."""
    steps: list[str | int] = []
    at = len("metadata")
    while message.startswith("metadata") and (step := ERROR_STEP_RE.match(message, at)):
        name, index, quoted = step.groups()
        steps.append(name if name else int(index) if index else json.loads(quoted))
        at = step.end()
    if not (message.startswith("metadata") and message.startswith(": ", at)):
        return [], message
    why = message[at + 2:]
    if required := REQUIRED_RE.fullmatch(why):
        return [*steps, json.loads(required[1])], REQUIRED
    return steps, why


def input_errors(messages: list[str]) -> ErrorMap:
    """The write path's messages by the input of the form each is about (django-jsonform's
    error map): a property left out at its own input; a message about the whole record, or
    one not of that form, at the top of the form."""
    found = ErrorMap()
    for message in messages:
        found.append(*placed(message))
    return found


def input_label(schema: dict, steps: list[str | int]) -> str:
    """The labels the drawn form shows on the way to an input, as django-jsonform writes
    them: a property's title, else its name with _ as spaces, capitalised (a map's key as it
    is); an item by its number, counted from 1. `Creators › item 1 › Name`."""
    labels, node = [], schema
    for step in steps:
        node = _referred(schema, node)
        if isinstance(step, int):
            labels.append(f"item {step + 1}")
            node = node.get("items", {})
            continue
        properties = node.get("properties") or {}
        if step in properties:
            node = _referred(schema, properties[step])
            title = node.get("title")
            labels.append(title if isinstance(title, str) and title else
                          step.replace("_", " ").capitalize())
        else:
            labels.append(step)
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else {}
    return " › ".join(labels)


def _referred(schema: dict, node) -> dict:
    """A subschema with its local `$ref` (`#/$defs/name`) merged in, as the widget draws it."""
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = (schema.get("$defs") or {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            return {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


class SchemaMetadataField(PrettyJSONField):
    """A record's metadata edited as a form drawn from its feed's record schema (by
    django-jsonform's widget, which posts what the form holds as JSON). It draws; the write
    path checks, and its messages are shown at the inputs they are about (show_refusal)."""

    def __init__(self, feed: Feed, checker: validation.RecordChecker, drawn: dict):
        self.drawn = drawn
        url = urls.schema_url(feed.slug, checker.version)
        super().__init__(
            empty=dict, required=False, initial=dict, widget=JSONFormWidget(schema=drawn),
            help_text=format_html(
                'A form drawn from the feed\'s <a href="{}">record schema (version {})</a>: '
                "fields marked * are required; \u201cAdd item\u201d adds one to a list. The "
                "record is checked against the schema when it is saved.", url, checker.version))

    def to_python(self, value):
        if isinstance(value, str) and not value.strip():
            # The widget posts what it holds, always: nothing means its script did not run.
            raise ValidationError("The metadata form sent nothing (did its script run? "
                                  "it needs JavaScript): nothing was saved.", code="required")
        value = super().to_python(value)
        # An input left empty is a property left out (as a form means it), not null or "".
        filled = _filled(value) if isinstance(value, dict) else value
        return {} if filled is _BLANK else filled

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return "null"  # the widget reads JSON: it starts again from an empty form
        return super().prepare_value(value)

    def show_refusal(self, messages: list[str]) -> list[str]:
        """Show the write path's messages at the inputs they are about; return them as the
        field's own list says them: by the inputs' labels, not by JSON paths."""
        self.widget.add_error(input_errors(messages))
        return [f"{input_label(self.drawn, steps)}: {why}" if steps else why
                for steps, why in map(placed, messages)]


class FeedForm(forms.ModelForm):
    # Read as the API reads a body; checked, and kept as a new version, by the write path.
    record_schema = PrettyJSONField(
        empty=lambda: None, required=False, help_text=validation.SCHEMA_HELP,
        widget=forms.Textarea(attrs={"rows": 20, "cols": 80, "spellcheck": "false"}))
    refusal = None  # what the write path refused of this form's save (ShowsRefusals)

    class Meta:
        model = Feed
        fields = ["slug", "title", "subtitle", "author", "language", "page_size"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _server_counts_lengths(self)
        if self.instance.pk is not None:
            self.initial["record_schema"] = schemas.current_schema(self.instance)

    def clean_slug(self):
        # The write path's rule (unique whatever the case), naming the feed that has it.
        slug = self.cleaned_data["slug"]
        try:
            publishing.check_slug(slug, feed=self.instance)
        except ValidationError as error:
            raise ValidationError(error.message_dict["slug"]) from None
        return slug

    def clean(self):
        cleaned = super().clean()
        try:
            clean_feed_text(cleaned)
        except ValidationError as error:
            _add_errors(self, error)
        if self.refusal is not None:
            _add_errors(self, self.refusal)
        return cleaned


@admin.register(Feed)
class FeedAdmin(ShowsRefusals, admin.ModelAdmin):
    form = FeedForm
    list_display = ["short_slug", "short_title", "record_count", "deleted_count", "entry_count",
                    "page_count", "page_size", "changed", "subscription"]
    search_fields = ["slug", "title"]
    # (The schema's versions first: under the record_schema box, the form's last field.)
    readonly_fields = ["schema_versions", "contents", "activity", "uuid", "last_seq",
                       "last_updated", "sealed_pages", "created"]
    actions = ["seal_now"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            record_count=Count("records", filter=Q(records__deleted_at__isnull=True)),
            deleted_count=Count("records", filter=Q(records__deleted_at__isnull=False)))

    @admin.display(description="slug", ordering="slug")
    def short_slug(self, feed: Feed):
        return _short(feed.slug, 24)

    @admin.display(description="title", ordering="title")
    def short_title(self, feed: Feed):
        return _short(feed.title, 40)

    @admin.display(description="last updated", ordering="last_updated")
    def changed(self, feed: Feed):
        return _stamp(feed.last_updated)

    @admin.display(description="records", ordering="record_count")
    def record_count(self, feed: Feed):
        return _link(_changelist(Record, feed__id__exact=feed.pk, state="live"),
                     feed.record_count)

    @admin.display(description="deleted", ordering="deleted_count")
    def deleted_count(self, feed: Feed):
        return _link(_changelist(Record, feed__id__exact=feed.pk, state="deleted"),
                     feed.deleted_count)

    @admin.display(description="entries", ordering="last_seq")
    def entry_count(self, feed: Feed):
        return _link(_changelist(Entry, feed__id__exact=feed.pk), feed.last_seq)

    @admin.display(description="sealed pages", ordering="sealed_pages")
    def page_count(self, feed: Feed):
        return _link(_changelist(ArchivePage, feed__id__exact=feed.pk), feed.sealed_pages)

    @admin.display(description="subscription document")
    def subscription(self, feed: Feed):
        return _link(urls.subscription_url(feed.slug), "Atom")

    @admin.display(description="contents")
    def contents(self, feed: Feed):
        """What the feed holds, each count linked to its list, and the documents it serves
        (the record counts are get_queryset's)."""
        backlog = feed.full_pages - feed.sealed_pages
        rows = [
            (_count(feed.record_count, "live record", "live records"),
             _changelist(Record, feed__id__exact=feed.pk, state="live")),
            (_count(feed.deleted_count, "deleted record", "deleted records"),
             _changelist(Record, feed__id__exact=feed.pk, state="deleted")),
            (_count(feed.last_seq, "entry", "entries"),
             _changelist(Entry, feed__id__exact=feed.pk)),
            (_count(feed.sealed_pages, "sealed page", "sealed pages"),
             _changelist(ArchivePage, feed__id__exact=feed.pk)),
            (_count(backlog, "full page not yet sealed", "full pages not yet sealed"),
             _changelist(Entry, feed__id__exact=feed.pk, seq__gt=feed.sealed_seq,
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
        schema = schemas.current_schema(feed)
        if schema is None:
            return "None: the feed's records are free JSON objects."
        return format_html('<a href="{}">Version {}</a>, in force:<pre>{}</pre>',
                           urls.schema_url(feed.slug, feed.schema_version), feed.schema_version,
                           json.dumps(schema, indent=2, ensure_ascii=False))

    @admin.display(description="record schema versions")
    def schema_versions(self, feed: Feed):
        """Every version of the feed's record schema, newest first, each linked to the URL
        that serves it for ever; and where records are added by the form it draws."""
        versions = feed.schema_versions.order_by("-version").values_list("version", "created")
        if not versions:
            return "None: the feed's records are free JSON objects."
        rows = [(urls.schema_url(feed.slug, version), version, _stamp(created),
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
        context["frozen"] = [(Feed._meta.get_field(name).verbose_name, publishing.FROZEN[name])
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
                self.message_user(request, f"Deleted {_count(deleted, 'feed', 'feeds')}.")

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
        sealed = {feed.slug: sealing.seal_feed(feed) for feed in queryset}
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
                                               _count(total, "page", "pages"), lines, why),
                          messages.SUCCESS if total else messages.INFO)


class RecordForm(forms.ModelForm):
    """Checks a record with the same rules as the API (archives.validation), and says what
    those rules are before anyone breaks them."""

    # Declared without max_length: the server counts and says so (archives.validation).
    key = forms.CharField(strip=False, help_text=_help(validation.KEY_HELP,
                                                       validation.KEY_EXAMPLE))
    title = forms.CharField(strip=False, widget=forms.TextInput(attrs={"size": 80}))
    metadata = PrettyJSONField(empty=dict, required=False, initial=dict, help_text=_help(
        validation.METADATA_HELP, validation.METADATA_EXAMPLE))
    links = PrettyJSONField(empty=list, required=False, initial=list, help_text=_help(
        validation.LINKS_HELP, validation.LINKS_EXAMPLE))
    refusal = None  # what the write path refused of this form's save (ShowsRefusals)

    class Meta:
        model = Record
        fields = ["feed", "key", *RECORD_FIELDS]

    def clean_key(self):
        try:
            return validation.clean_key(self.cleaned_data["key"])
        except ValidationError as error:
            raise ValidationError(error.message_dict["key"]) from None

    def clean(self):
        cleaned = super().clean()
        self._check_new_key(cleaned)
        try:
            self.record_data = clean_record({
                "title": cleaned.get("title"),
                "summary": cleaned.get("summary") or "",
                # An unreadable box has its own error already: check the rest as if empty.
                "metadata": cleaned.get("metadata", {}),
                "links": cleaned.get("links", []),
            })
        except ValidationError as error:
            self._add_record_errors(error)
        if self.refusal is not None:
            self._add_record_errors(self.refusal)
        return cleaned

    def _add_record_errors(self, error: ValidationError) -> None:
        """The record rules' or the write path's messages at their fields; a drawn metadata
        form's at its inputs too, and named by the labels the person sees there."""
        metadata = self.fields["metadata"]
        if isinstance(metadata, SchemaMetadataField) and "metadata" in error.message_dict:
            error = ValidationError({**error.message_dict, "metadata": metadata.show_refusal(
                error.message_dict["metadata"])})
        _add_errors(self, error)

    def _check_new_key(self, cleaned) -> None:
        """On the add form, a key the feed already has: a live record's is refused with a
        link to it; a deleted one's is offered back, and accepted once the offer's button
        (`_restore`) is pressed: the save is a put, which restores the record with this
        form's content."""
        feed, key = cleaned.get("feed"), cleaned.get("key")
        if self.instance.pk is not None or feed is None or key is None:
            return
        existing = Record.objects.filter(feed=feed, key=key).first()
        self.key_taken = existing is not None  # (Django's own "already exists" is skipped)
        if existing is None or (existing.is_deleted and "_restore" in self.data):
            return
        page = reverse("admin:archives_record_change", args=[existing.pk])
        if not existing.is_deleted:
            self.add_error("key", format_html(
                'The feed has a record with this key already: <a href="{}">change it</a>.',
                page))
            return
        self.add_error("key", format_html(
            'This key belongs to a record deleted on {} UTC (<a href="{}">see it</a>). '
            '<button type="submit" name="_restore" value="1" class="button">Restore it with '
            'what you entered</button> (its URL and history come back), or choose another key.',
            f"{existing.deleted_at:%Y-%m-%d %H:%M}", page))

    def _get_validation_exclusions(self):
        # A key the feed has is said about above, with what to do; not twice.
        exclude = super()._get_validation_exclusions()
        return exclude | {"key"} if getattr(self, "key_taken", False) else exclude


# Why a record's feed and key cannot be edited (said at the top of its change page).
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


@admin.register(Record)
class RecordAdmin(ShowsRefusals, admin.ModelAdmin):
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
    actions = ["restore"]

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
        return _short(record.key, 24)

    @admin.display(description="title", ordering="title")
    def short_title(self, record: Record):
        return _short(record.title, 40)

    @admin.display(description="updated", ordering="updated")
    def changed(self, record: Record):
        return _stamp(record.updated)

    @admin.display(description="state", ordering="deleted_at")
    def state(self, record: Record):
        if record.is_deleted:
            return format_html('<span title="deleted {}">deleted</span>',
                               _stamp(record.deleted_at))
        return "live"

    @admin.display(description="links")
    def links_(self, record: Record):
        # Its public page first, the one a colleague is sent; a deleted record's URL is a 410.
        if record.is_deleted:
            return format_html("{} · {}", self.history(record), self.document(record))
        page = _link(urls.html_url(urls.record_url(record.feed.slug, record.key)), "page")
        return format_html("{} · {} · {}", page, self.history(record), self.document(record))

    @admin.display(description="history")
    def history(self, record: Record):
        return _link(_changelist(Entry, record__id__exact=record.pk), "entries")

    @admin.display(description="record URL")
    def document(self, record: Record):
        return _link(urls.record_url(record.feed.slug, record.key),
                     "gone (410)" if record.is_deleted else "Atom entry")

    @admin.display(description="documents")
    def documents(self, record: Record):
        url = urls.record_url(record.feed.slug, record.key)
        return format_html('{} · {} · feed {}', _link(url, "Atom entry"),
                           _link(urls.html_url(url), "page for people"),
                           _link(reverse("admin:archives_feed_change", args=[record.feed_id]),
                                 record.feed.slug))

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, *RECORD_FROZEN] if obj else []

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "feed":  # (only on the add form: a record's feed is fixed)
            kwargs.setdefault("form_class", FeedChoiceField)
            kwargs.setdefault("queryset", Feed.objects.order_by("title", "slug"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_form(self, request, obj=None, change=False, **kwargs):
        # A feed with a record schema has its records' metadata edited as a form drawn
        # from it; a feed without one (or an add form before its feed is chosen), as JSON.
        form = super().get_form(request, obj, change, **kwargs)
        feed = obj.feed if obj is not None else _chosen_feed(request)
        checker = schemas.checker(feed) if feed is not None else None
        drawn = form_schema(checker.schema) if checker is not None else None
        if drawn is None:
            return form
        return type(form.__name__, (form,), {
            "metadata": SchemaMetadataField(feed, checker, drawn)})

    def render_change_form(self, request, context, add=False, change=False, form_url="",
                           obj=None):
        # Say why the feed and key are read-only (the form's top, as on the feed page).
        context["frozen"] = [(Record._meta.get_field(name).verbose_name, why)
                             for name, why in RECORD_FROZEN.items()] if obj else []
        context["deleted_at"] = obj.deleted_at if obj else None
        if add:  # the feeds whose choice redraws the metadata (the template's script)
            metadata = context["adminform"].form.fields["metadata"]
            context["drawn_for"] = (_chosen_feed(request).pk
                                    if isinstance(metadata, SchemaMetadataField) else None)
            context["schema_feeds"] = list(Feed.objects.filter(
                schema_version__isnull=False).values_list("pk", flat=True))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change):
        # A save is a put: one entry when something changed (and a restore if deleted).
        try:
            entry = publishing.put_record(feed=obj.feed, key=obj.key, data=form.record_data)
        except ValidationError as error:  # e.g. metadata its feed's schema does not take
            raise Refused(error) from None
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

    def delete_model(self, request, obj):
        # Deleting appends a deletion entry; the row stays, as the feed's history needs it.
        publishing.delete_record(feed=obj.feed, key=obj.key)
        request.feedpub_deleted_from = obj.feed_id

    def response_delete(self, request, obj_display, obj_id):
        # Back to the list the person came from, else to the deleted record's feed's
        # records (where it was), not to every feed's.
        response = super().response_delete(request, obj_display, obj_id)
        feed_id = getattr(request, "feedpub_deleted_from", None)
        if (feed_id is None or self.get_preserved_filters(request)
                or response.get("Location") != _changelist(Record)):
            return response
        return HttpResponseRedirect(_changelist(Record, feed__id__exact=feed_id))

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
        restored, refused = 0, []
        for record in queryset.filter(deleted_at__isnull=False).select_related("feed"):
            data = {name: getattr(record, name) for name in RECORD_FIELDS}
            try:
                publishing.put_record(feed=record.feed, key=record.key, data=data)
            except ValidationError as error:
                # A deleted record keeps its metadata, which a schema set since may refuse.
                refused.append((record, "; ".join(error.messages)))
                continue
            restored += 1
        if restored or not refused:
            self.message_user(request, f"Restored {_count(restored, 'record', 'records')}.",
                              messages.SUCCESS)
        for record, why in refused:
            self.message_user(request, format_html(
                '<a href="{}">{}</a> was not restored: {}. Correct it on its page, and save it '
                "to restore it.", reverse("admin:archives_record_change", args=[record.pk]),
                record, why), messages.ERROR)


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
    list_display = ["seq", short_feed, "kind", "record_key", "short_title", "changed", "document"]
    list_filter = [("feed", FeedFilter), "kind"]
    list_select_related = ["feed", "record"]
    search_fields = ["record__key", "title"]
    # Newest first: id follows the order entries were written in, across feeds.
    ordering = ["-id"]
    # Counting every entry of a big log on each page view is the slow part of a changelist.
    show_full_result_count = False

    def changelist_view(self, request, extra_context=None):
        # A record's "entries" link filters to it: say which record, and link back.
        record_id = single(request.GET, "record__id__exact") or ""
        record = (Record.objects.select_related("feed").filter(pk=record_id).first()
                  if record_id.isdigit() else None)
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
        return _short(entry.title, 40)

    @admin.display(description="updated", ordering="updated")
    def changed(self, entry: Entry):
        return _stamp(entry.updated)

    @admin.display(description="served in")
    def document(self, entry: Entry):
        name, url = urls.document_holding(entry.feed, entry.seq)
        return _link(url, name)


@admin.register(ArchivePage)
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
        return _link(urls.archive_url(page.feed.slug, page.number), "Atom")
