"""JSON bodies, read no further than the documented limit, and only with a known length."""

from __future__ import annotations

from rest_framework import renderers
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

from archives import jsoninput
from archives.conf import settings


class BodyTooLarge(APIException):
    status_code = 413
    default_code = "body_too_large"

    def __init__(self, limit: int | None = None):
        limit = settings.FEEDPUB_API_MAX_BODY_BYTES if limit is None else limit
        super().__init__(
            f"The request body is larger than {limit} bytes (FEEDPUB_API_MAX_BODY_BYTES); "
            "split it, e.g. into smaller batches."
        )


class LengthRequired(APIException):
    status_code = 411
    default_code = "length_required"
    default_detail = ("Send the body with a Content-Length header: chunked request bodies "
                      "(Transfer-Encoding) are not accepted.")


def require_length(request) -> None:
    """Refuse a body framed by Transfer-Encoding (chunked) rather than Content-Length.

    Django reads a WSGI body no further than CONTENT_LENGTH and DRF takes a body without
    one as empty, so a chunked PATCH would "succeed" having changed nothing. Reading
    wsgi.input past CONTENT_LENGTH is outside WSGI (PEP 3333): gunicorn de-chunks and
    marks the input terminated, but runserver and other servers do not (a read would
    block or see raw chunk framing). A 411 (RFC 9110 15.5.12) is the same answer under
    every server; behind the deploy's nginx, which buffers bodies and forwards them with
    a Content-Length, chunked clients are not affected at all.
    """
    if request.META.get("HTTP_TRANSFER_ENCODING") and not request.META.get("CONTENT_LENGTH"):
        raise LengthRequired()


class LimitedJSONParser(BaseParser):
    """JSON bodies up to FEEDPUB_API_MAX_BODY_BYTES; bigger ones are refused with 413.

    Not a JSONParser subclass on purpose: for those DRF reads `request.body` first, where
    Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB) applies and answers an HTML 400. Given
    the request stream instead, this parser checks Content-Length first (nothing is
    read), then what is actually read, in case the header understated it. The JSON is
    read strictly (archives.jsoninput): a repeated member name, a number that would be
    stored bent, or nesting past the limit is a 400 naming it.
    """

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer  # the browsable API's raw-data form

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.FEEDPUB_API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise BodyTooLarge(limit)
        try:
            return jsoninput.loads(body.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ParseError(f"The body is not UTF-8: {error}") from None
        except jsoninput.JSONInputError as error:  # named by the field it is in, too
            # (imported here: archives.api.exceptions imports DRF's views, which read the
            # parser setting, which names this module)
            from archives.api.exceptions import Invalid

            field = str(error.path[0]) if error.path else "body"
            raise Invalid({field: [f"{error.msg}."]}, f"JSON refused: {error.msg}.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
