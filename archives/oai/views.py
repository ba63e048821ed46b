"""The HTTP door of OAI-PMH: one base URL answering GET and POST, and the feedpub format's
schema. Every protocol answer, errors included, is HTTP 200 text/xml (OAI-PMH 3.1.2.1)."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from .metadata import FEEDPUB_SCHEMA_FILE
from .protocol import bad_argument
from .verbs import answer

XML = "text/xml; charset=utf-8"
FORM = "application/x-www-form-urlencoded"


@csrf_exempt  # no cookie or credential is read: a harvester's POST needs no token
@require_http_methods(["GET", "HEAD", "POST"])
def oai(request: HttpRequest) -> HttpResponse:
    if request.method == "POST" and request.content_type != FORM:
        body = answer({}, refused=bad_argument(f"A POST request's arguments are its body, "
                                               f"of type {FORM}."))
    else:
        try:
            params = dict((request.POST if request.method == "POST" else request.GET).lists())
        except (RequestDataTooBig, TooManyFieldsSent) as error:
            body = answer({}, refused=bad_argument(f"The request is too large: {error}."))
        else:
            body = answer(params)
    response = HttpResponse(body, content_type=XML)
    response["Cache-Control"] = "no-cache"  # every answer says what the log holds now
    return response


def feedpub_schema(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(FEEDPUB_SCHEMA_FILE.read_bytes(),
                            content_type="application/xml; charset=utf-8")
    response["Cache-Control"] = "public, max-age=86400"
    return response
