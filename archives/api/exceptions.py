"""One error shape for every refusal: `{"detail": "...", "errors": {field: [why]}}`.

`errors` is present when the problem is in the request body or query, and names each
field (for a batch: each operation by its index) with the reasons it was refused.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from archives.models import Record
from archives.publishing import BatchError, PreconditionFailed


class Conflict(exceptions.APIException):
    """The request is valid but the resource's state forbids it (e.g. a sealed feed)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The feed's state does not allow this change."
    default_code = "conflict"

    def __init__(self, error: DjangoValidationError):
        super().__init__()
        self.errors = error_dict(error)
        self.detail = "; ".join(_flatten(self.errors)) or self.default_detail


class Invalid(exceptions.ValidationError):
    """A 400 whose `detail` summarises and whose `errors` map fields to reasons."""

    def __init__(self, errors: dict[str, Any], detail: str = "Invalid input; nothing was written."):
        super().__init__(errors)
        self.summary = detail


def error_dict(error: DjangoValidationError) -> dict[str, Any]:
    """A Django ValidationError as {field: [messages]}; field-less ones under "body"."""
    if hasattr(error, "error_dict"):
        return error.message_dict
    return {"body": error.messages}


def as_drf(error: DjangoValidationError) -> serializers.ValidationError:
    """What a serializer raises for a rule of archives.validation."""
    return serializers.ValidationError(error_dict(error))


def handle(exc: Exception, context: dict) -> Response | None:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: the write path's errors as JSON answers."""
    if isinstance(exc, BatchError):
        errors = {"operations": {str(index): why for index, why in exc.errors.items()}}
        exc = Invalid(errors, f"{len(exc.errors)} operation(s) are invalid; nothing was applied.")
    elif isinstance(exc, DjangoValidationError):
        exc = Invalid(error_dict(exc))
    elif isinstance(exc, PreconditionFailed):
        exc = exceptions.APIException(str(exc))
        exc.status_code = status.HTTP_412_PRECONDITION_FAILED
    elif isinstance(exc, Record.DoesNotExist):
        exc = exceptions.NotFound(str(exc))
    response = exception_handler(exc, context)
    if response is None:
        return None
    response.data = _shape(exc, response.data)
    return response


def _shape(exc: Exception, data: Any) -> dict[str, Any]:
    if isinstance(exc, Conflict):
        return {"detail": str(exc.detail), "errors": exc.errors}
    if isinstance(exc, exceptions.ValidationError):
        errors = data if isinstance(data, dict) else {"body": data}
        return {"detail": getattr(exc, "summary", "Invalid input; nothing was written."),
                "errors": errors}
    if isinstance(data, dict) and "detail" in data:
        return {"detail": str(data["detail"])}
    return {"detail": str(data)}


def _flatten(errors: dict[str, Any]) -> list[str]:
    return [f"{field}: {message}" for field, messages in errors.items() for message in messages]
