"""JSON bodies, read no further than the documented limit."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant


class BodyTooLarge(APIException):
    status_code = 413
    default_code = "body_too_large"

    def __init__(self, limit: int):
        super().__init__(
            f"The request body is larger than {limit} bytes (FEEDPUB_API_MAX_BODY_BYTES); "
            "split it, e.g. into smaller batches."
        )


class LimitedJSONParser(JSONParser):
    """JSONParser that refuses bodies over FEEDPUB_API_MAX_BODY_BYTES with 413.

    DRF reads the request stream itself, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE does
    not apply here; the limit is checked on Content-Length first (nothing is read), then
    on what is actually read, in case the header understated it.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.FEEDPUB_API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise BodyTooLarge(limit)
        try:
            text = body.decode("utf-8")
            return json.loads(text, parse_constant=strict_constant)
        except UnicodeDecodeError as error:
            raise ParseError(f"The body is not UTF-8: {error}") from None
        except RecursionError:
            raise ParseError("The JSON is nested too deeply.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
