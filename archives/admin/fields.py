"""The admin forms' own fields: JSON as a person writes it, and a feed chosen by its label."""

from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError

from archives import jsoninput
from archives.models import Feed

from .helpers import feed_label

# A JSON parser's message names what it found; what to do about it is said here.
JSON_ADVICE = {
    "Invalid control character": "a control character inside a string: write it as \\uXXXX "
                                 "(tab: \\t, newline: \\n)",
}


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


class FeedChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Feed) -> str:
        return feed_label(obj)
