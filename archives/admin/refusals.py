"""What the write path refuses of a form the admin let through, shown at the form's fields.

The write path is the one place that checks what depends on the feed's state (a schema
against live records, a record against its feed's schema), under the feed's lock; a ModelAdmin
with ShowsRefusals shows its refusal as the form's errors, and nothing of the save is written.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError


def add_errors(form: forms.ModelForm, error: ValidationError) -> None:
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


class ShowsRefusals(admin.ModelAdmin):
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
