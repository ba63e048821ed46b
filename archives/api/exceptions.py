"""One error shape for every refusal: `{"detail": "...", "errors": {field: [why]}}`.

`errors` is present when the problem is in the request body or query, and names each
field (for a batch: each operation by its index) with the reasons it was refused.

API errors are JSON always: `handle` shapes what DRF's views raise, and the project's
handler400/404/500 (`bad_request`, `page_not_found`, `server_error`) answer JSON for /api/
paths whatever failed outside a DRF view. A lost database is left to feedpub/reconnect.py,
which retries a safe request on a new connection, else answers 503 (JSON here).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views import defaults
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from archives.db.address import WrongBaseURL
from archives.log.publishing import (
    BatchError,
    FeedPromised,
    PreconditionFailed,
    SchemaConflict,
    SlugTaken,
)
from archives.models import Feed, Record
from archives.parameters import RepeatedParameter
from archives.serving.negotiation import error_response, json_error
from archives.validation import SchemaOverBounds

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
# A lost database connection is replaced on the next request; a restart takes seconds.
RETRY_AFTER_SECONDS = 5
# The database errors that mean "unavailable", not "this request is wrong".
DATABASE_DOWN = (OperationalError, InterfaceError)


class Conflict(exceptions.APIException):
    """The request is valid but the resource's state forbids it (e.g. a feed with entries).
    `errors` names the fields refused, if the refusal is about fields."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The feed's state does not allow this change."
    default_code = "conflict"

    def __init__(self, error: DjangoValidationError):
        self.errors = error.message_dict if hasattr(error, "error_dict") else None
        super().__init__(("; ".join(_flatten(self.errors)) if self.errors
                          else " ".join(error.messages)) or self.default_detail)


class WrongAddress(exceptions.APIException):
    """This process is configured with another base URL than the feed is sealed under."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "wrong_base_url"


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
    # Before ValidationError, which they are: the data refuses a valid request.
    if isinstance(exc, FeedPromised | SchemaConflict | SchemaOverBounds | SlugTaken):
        exc = Conflict(exc)
    elif isinstance(exc, BatchError):
        errors = {"operations": {str(index): why for index, why in exc.errors.items()}}
        exc = Invalid(errors, f"{len(exc.errors)} operation(s) are invalid; nothing was applied.")
    elif isinstance(exc, DjangoValidationError):
        exc = Invalid(error_dict(exc))
    elif isinstance(exc, PreconditionFailed):
        exc = exceptions.APIException(str(exc))
        exc.status_code = status.HTTP_412_PRECONDITION_FAILED
    elif isinstance(exc, Record.DoesNotExist):
        exc = exceptions.NotFound(str(exc))
    elif isinstance(exc, Feed.DoesNotExist):  # the write path reads a feed by its slug
        exc = exceptions.NotFound("No Feed matches the given query.")
    elif isinstance(exc, DATABASE_DOWN):
        return None  # raised on, to be retried or answered 503 (feedpub/reconnect.py)
    elif isinstance(exc, WrongBaseURL):  # this server's configuration, not the request
        logger.error("API write refused: %s", exc)
        exc = WrongAddress(str(exc))
    response = exception_handler(exc, context)
    if response is None:
        return None
    response.data = _shape(exc, response.data)
    return response


def _shape(exc: Exception, data: Any) -> dict[str, Any]:
    if isinstance(exc, Conflict):
        return {"detail": str(exc.detail), **({"errors": exc.errors} if exc.errors else {})}
    if isinstance(exc, exceptions.ValidationError):
        errors = data if isinstance(data, dict) else {"body": data}
        return {"detail": getattr(exc, "summary", "Invalid input; nothing was written."),
                "errors": errors}
    if isinstance(data, dict) and "detail" in data:
        return {"detail": str(data["detail"])}
    return {"detail": str(data)}


def _flatten(errors: dict[str, Any]) -> list[str]:
    return [f"{field}: {message}" for field, messages in errors.items() for message in messages]


# The project's error views (feedpub/urls.py): JSON under /api/, Django's pages elsewhere.


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, RepeatedParameter):  # say which: the client can fix it
        return error_response("json" if _is_api(request) else None, 400, str(exception))
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):  # request.body read outside the parser
        return json_error(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                          "The request body is too large.")
    return json_error(status.HTTP_400_BAD_REQUEST, "Bad request.")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return json_error(status.HTTP_404_NOT_FOUND, "Not found: no such API endpoint.")


def server_error(request: HttpRequest) -> HttpResponse:
    """Unhandled exceptions, already logged (a lost database is feedpub/reconnect.py's)."""
    if not _is_api(request):
        return defaults.server_error(request)
    return json_error(status.HTTP_500_INTERNAL_SERVER_ERROR,
                      "Internal server error; it was logged.")


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)
