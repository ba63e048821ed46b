"""The feed and record forms: each checks its input with archives.validation, the rules the
API applies, and says what those rules are before anyone breaks them."""

from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

from archives import validation
from archives.db import schemas
from archives.log import publishing
from archives.models import Feed, Record
from archives.validation import RECORD_FIELDS, clean_feed_text, clean_record

from .fields import PrettyJSONField
from .refusals import add_errors
from .widgets import SchemaMetadataField


def _server_counts_lengths(form: forms.BaseForm) -> None:
    """No maxlength in the browser, which would cut a long text without a word: the
    server counts and says so, once."""
    for field in form.fields.values():
        if field.widget.attrs.pop("maxlength", None) is not None:
            field.error_messages["max_length"] = (
                "At most %(limit_value)d characters (this has %(show_value)d).")


def _help(text: str, example) -> str:
    shown = example if isinstance(example, str) else json.dumps(example, indent=2)
    return format_html("{}<br>Example:<pre>{}</pre>", text, shown)


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
        super().clean()
        cleaned = self.cleaned_data
        try:
            clean_feed_text(cleaned)
        except ValidationError as error:
            add_errors(self, error)
        if self.refusal is not None:
            add_errors(self, self.refusal)
        return cleaned


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
    # Not a field of the record: why this change is made, kept with the entry it appends.
    note = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text=f"Optional: why you make this change (at most {validation.MAX_NOTE_LENGTH} "
                  "characters). Kept with the entry this save appends and shown in the "
                  "record's history to staff; never published.")
    refusal = None  # what the write path refused of this form's save (ShowsRefusals)

    class Meta:
        model = Record
        fields = ["feed", "key", *RECORD_FIELDS]

    def clean_note(self):
        try:
            return validation.clean_note(self.cleaned_data["note"])
        except ValidationError as error:
            raise ValidationError(error.message_dict["note"]) from None

    def clean_key(self):
        try:
            return validation.clean_key(self.cleaned_data["key"])
        except ValidationError as error:
            raise ValidationError(error.message_dict["key"]) from None

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        self._check_new_key(cleaned)
        try:
            # Every record field, as the API takes a body: the form has each (Meta.fields),
            # and one whose input was refused has its own error already, so the rest are
            # checked as if it were left out.
            self.record_data = clean_record(
                {name: cleaned[name] for name in RECORD_FIELDS if name in cleaned})
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
        add_errors(self, error)

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
        # A key the feed has is said about above, with what to do; not twice. (A method of
        # Django's BaseModelForm that django-stubs does not list.)
        exclude = super()._get_validation_exclusions()  # type: ignore[misc]
        return exclude | {"key"} if getattr(self, "key_taken", False) else exclude


# Why a record's feed and key cannot be edited (said at the top of its change page).
