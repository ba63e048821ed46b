"""drf-spectacular hooks for the OpenAPI schema."""

from __future__ import annotations


def canonical_routes_only(endpoints, **kwargs):
    """Leave out the routes that only exist to accept a write without its trailing slash
    (see urls.py): they are the same operations, and listing them twice would repeat
    every operationId."""
    return [endpoint for endpoint in endpoints
            if endpoint[0] not in {"/api/feeds", "/api/feeds/{slug}"}]


def token_first(result, **kwargs):
    """Swagger UI's Authorize dialog offers the schemes in the order of the schema's
    securitySchemes, which drf-spectacular sorts by name (cookieAuth first). Producers
    use tokens; the session is for people already logged in to the admin."""
    schemes = result.get("components", {}).get("securitySchemes", {})
    described = {
        "tokenAuth": "Send `Authorization: Token <key>` (make a key with `manage.py "
                     "drf_create_token <user>`). In Swagger UI, enter `Token <key>`.",
        "cookieAuth": "The session of a user logged in to the admin (/admin/), with its "
                      "CSRF token: what the browsable API uses.",
    }
    ordered = {name: schemes[name] | {"description": described[name]}
               for name in described if name in schemes}
    result["components"]["securitySchemes"] = ordered | {
        name: scheme for name, scheme in schemes.items() if name not in ordered}
    return result
