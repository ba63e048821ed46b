"""drf-spectacular hooks for the OpenAPI schema."""

from __future__ import annotations


def canonical_routes_only(endpoints, **kwargs):
    """Leave out the routes that only exist to accept a write without its trailing slash
    (see urls.py): they are the same operations, and listing them twice would repeat
    every operationId."""
    return [endpoint for endpoint in endpoints
            if endpoint[0] not in {"/api/feeds", "/api/feeds/{slug}"}]
