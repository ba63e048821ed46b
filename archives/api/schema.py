"""drf-spectacular's view of the API: what the OpenAPI schema says beyond what it reads
from the views and serializers by itself."""

from __future__ import annotations

import re

from drf_spectacular import openapi
from rest_framework.permissions import SAFE_METHODS

from archives import validation

from .permissions import ModelPermissionsOrReadOnly

# A value in a record's metadata (and in a record schema), at any depth: its strings are
# XML text (archives.validation checks every one). Added by metadata_values.
METADATA_VALUE_NAME = "MetadataValue"
METADATA_VALUE = f"#/components/schemas/{METADATA_VALUE_NAME}"
# JSON Schema's own names of types (draft 2020-12's meta-schema, simpleTypes).
JSON_SCHEMA_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
# What check_record_schema requires of a record schema's own keywords.
RECORD_SCHEMA_KEYWORDS = {
    "$schema": {"type": "string", "enum": [validation.SCHEMA_DIALECT,
                                           validation.SCHEMA_DIALECT + "#"]},
    "type": {"anyOf": [
        {"type": "string", "enum": ["object"]},
        # A list of types with "object" among them: not every item is another type.
        {"type": "array", "minItems": 1, "uniqueItems": True,
         "items": {"type": "string", "enum": list(JSON_SCHEMA_TYPES)},
         "not": {"items": {"not": {"enum": ["object"]}}}},
    ]},
}


class AutoSchema(openapi.AutoSchema):
    """REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]."""

    def get_auth(self):
        """Reads are public: under ModelPermissionsOrReadOnly a GET needs no token, which
        OpenAPI says with an empty requirement beside the schemes ("any of these, or
        none"). drf-spectacular only knows it of AllowAny and IsAuthenticatedOrReadOnly;
        without it, client generators and gateways would ask for a token to read."""
        auths = super().get_auth()
        public = self.method in SAFE_METHODS and any(
            isinstance(permission, ModelPermissionsOrReadOnly)
            for permission in self.view.get_permissions())
        if public and {} not in auths:
            auths.append({})
        return auths


def canonical_routes_only(endpoints, **kwargs):
    """Leave out the routes that only exist to accept a write without its trailing slash
    (see urls.py): they are the same operations, and listing them twice would repeat
    every operationId."""
    return [endpoint for endpoint in endpoints
            if endpoint[0] not in {"/api/feeds", "/api/feeds/{slug}"}]


def closed_request_bodies(result, **kwargs):
    """Every request body refuses a member it does not name (StrictFieldsMixin for feeds,
    archives.validation for records and their links, BatchSerializer, apply_batch for a
    batch's operations): the schema says so, or a client may take extra members as
    ignored."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and "properties" in component:
            component["additionalProperties"] = False
    return result


def metadata_values(result, **kwargs):
    """The component METADATA_VALUE names: any JSON value whose strings, at any depth,
    match archives.validation's XML text pattern."""
    value = {"$ref": METADATA_VALUE}
    result.setdefault("components", {}).setdefault("schemas", {})[METADATA_VALUE_NAME] = {
        "description": "Any JSON value; every string in it must be XML 1.0 text.",
        "nullable": True,
        "anyOf": [
            {"type": "string", "pattern": validation.XML_TEXT_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": value},
            {"type": "object", "additionalProperties": value},
        ],
    }
    return result


def blank_in_the_pattern(result, **kwargs):
    """drf-spectacular writes a field that may be blank and has a pattern as
    `oneOf: [{pattern, ...}, {maxLength: 0}]`; where the first takes "" as well (every
    pattern of archives.validation's text does, and so does a response's field, which has
    none), "" matches both, and oneOf then refuses it. The first alone says it all."""

    def walk(node):
        if isinstance(node, dict):
            options = node.get("oneOf")
            if (isinstance(options, list) and len(options) == 2
                    and options[1] == {"type": "string", "maxLength": 0}
                    and options[0].get("type") == "string"
                    and not options[0].get("minLength")
                    and re.search(options[0].get("pattern", ""), "")):
                del node["oneOf"]
                node.update(options[0])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(result.get("components", {}))
    return result


def token_first(result, **kwargs):
    """Swagger UI's Authorize dialog offers the schemes in the order of the schema's
    securitySchemes, which drf-spectacular sorts by name (cookieAuth first). Producers
    use tokens; the session is for people already logged in to the admin."""
    schemes = result.get("components", {}).get("securitySchemes", {})
    described = {
        "tokenAuth": "Send `Authorization: Bearer <token>` (`Token <token>` works too). Make "
                     "a token with `POST /api/tokens/` or `manage.py create_token <user> "
                     "--name <name>`. In Swagger UI, enter the token alone.",
        "cookieAuth": "The session of a user logged in to the admin (/admin/), with its "
                      "CSRF token: what the browsable API uses.",
    }
    ordered = {name: schemes[name] | {"description": described[name]}
               for name in described if name in schemes}
    result["components"]["securitySchemes"] = ordered | {
        name: scheme for name, scheme in schemes.items() if name not in ordered}
    return result
