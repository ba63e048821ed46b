"""Which representation of a feed, archive page or record URL a request gets.

People's browsers get HTML, feed readers get Atom exactly as before, and a record's JSON
goes to clients that ask for it. A request gets a format when it says `?format=<name>`, or
when the most preferred type of its Accept header (highest q-value; ties go to the one
named first) is that format's own media type: text/html or application/xhtml+xml for
HTML, application/json for JSON (where the URL offers it). Browsers name text/html first;
feed readers name Atom or XML first, or send `*/*`, `text/*` or no Accept at all, and keep
getting Atom.

Errors are answered in the format chosen: JSON (`{"detail": "..."}`, the API's error shape)
to a request for JSON, plain text (or the site's 404 page) to the others.

Django's `request.accepted_types` is not used for the choice: it ranks ties by specificity
(`*/*, text/html` would put text/html first), where we go by the order the client wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.request import MediaType
from django.utils.cache import patch_vary_headers

from archives.parameters import RepeatedParameter, single

# The formats an Accept header can choose, by their media types.
FORMATS = {"text/html": "html", "application/xhtml+xml": "html", "application/json": "json"}


class UnknownFormat(ValueError):
    pass


def preferred_format(accept: str, offered: tuple[str, ...]) -> str | None:
    """The format (of `offered`) of an Accept header's most preferred type, if any."""
    ranges = [media for part in accept.split(",")
              if part.strip() and (media := MediaType(part)).quality > 0]
    if not ranges:
        return None
    best = max(ranges, key=lambda media: media.quality)  # max() keeps the first of a tie
    chosen = FORMATS.get(f"{best.main_type}/{best.sub_type}".lower())
    return chosen if chosen in offered else None


def chosen_format(request: HttpRequest, offered: tuple[str, ...]) -> str | None:
    """The format a request asks for: `?format=` (one of `offered`, else UnknownFormat;
    given twice, RepeatedParameter), else the one its Accept prefers, else None: the URL's
    own default."""
    asked = single(request.GET, "format")
    if asked is not None:
        if asked not in offered:
            raise UnknownFormat(f"Unknown format {asked!r}: this URL serves "
                                + ", ".join(f"?format={name}" for name in offered) + ".")
        return asked
    return preferred_format(request.headers.get("Accept", ""), offered)


def error_response(format: str | None, status: int, message: str) -> HttpResponse:
    """An error in the format chosen: JSON in the API's error shape, else plain text."""
    if format == "json":
        return json_error(status, message)
    return HttpResponse(message, status=status, content_type="text/plain")


def negotiated(*offered: str) -> Callable:
    """Pass the view the chosen format (`format=`), answer 400 to an unknown or repeated
    `?format=` (in JSON when the Accept header prefers it), answer a request for JSON that the view
    finds nothing for with a JSON 404, and mark every answer `Vary: Accept`: caches must
    keep browsers' and feed readers' copies apart."""
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def negotiating(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            try:
                chosen = chosen_format(request, offered)
            except (UnknownFormat, RepeatedParameter) as error:
                accepted = preferred_format(request.headers.get("Accept", ""), offered)
                response = error_response(accepted, 400, str(error))
            else:
                try:
                    response = view(request, *args, format=chosen, **kwargs)
                except Http404 as error:
                    if chosen != "json":
                        raise  # the site's page (templates/404.html)
                    response = error_response(chosen, 404, str(error))
            patch_vary_headers(response, ["Accept"])
            return response
        return negotiating
    return decorate


def json_error(status_code: int, detail: str,
               headers: dict[str, str] | None = None) -> JsonResponse:
    """An error answered in JSON outside DRF (by the document URLs that serve JSON, and by the
    API's own handlers: archives/api/exceptions.py), in the shape DRF's answers are given."""
    return JsonResponse({"detail": detail}, status=status_code, headers=headers)
