"""The examples the OpenAPI schema shows for each operation, so that Swagger UI's "Try it
out" works as given on a server set up as the Quick start says (`manage.py demo_feed`):
run top to bottom they create the feed `books` and change it, then put records in the
feed `demo` and change them (tests/test_api_docs.py sends every one of them). The record
operations say how to make a feed of one's own first, for a server without the demo.

Without them Swagger UI makes its own from the field types (`"href": "string"`,
`"additionalProp1"`), which the API refuses.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter
from rest_framework.exceptions import NotAcceptable, UnsupportedMediaType

from archives import validation
from archives.conf import settings
from archives.log import access
from archives.log.publishing import FROZEN
from archives.models import Feed

from .parsers import BodyTooLarge, LengthRequired

# The feed "Create a feed" creates; not the docs' walkthrough's (`novels`, docs/publishing/
# api.md), so that a reader can follow both on one server (tests/test_docs_blocks.py).
SLUG = "books"
RECORDS_SLUG = "demo"  # the feed `manage.py demo_feed` creates (its --slug default)
KEY = "moby-dick"
# Read once, when the views are imported: the responses' URLs are this server's.
BASE = settings.FEEDPUB_BASE_URL

SLUG_PARAMETER = OpenApiParameter(
    "slug", OpenApiTypes.STR, OpenApiParameter.PATH,
    description="The feed's slug, its name in every URL of the feed (`/feeds/<slug>/`). "
                f"The examples use `{SLUG}`, which the example of \"Create a feed\" creates.",
    examples=[OpenApiExample(SLUG, value=SLUG)],
)
RECORDS_SLUG_PARAMETER = OpenApiParameter(
    "slug", OpenApiTypes.STR, OpenApiParameter.PATH,
    description="The feed's slug, its name in every URL of the feed (`/feeds/<slug>/`). "
                f"The examples use `{RECORDS_SLUG}`, the feed `manage.py demo_feed` makes "
                "(the Quick start runs it). On a server without it, create a feed first "
                f"(\"Create a feed\", whose example makes `{SLUG}`) and enter its slug here: "
                "writing to a feed that does not exist answers 404.",
    examples=[OpenApiExample(RECORDS_SLUG, value=RECORDS_SLUG),
              OpenApiExample(SLUG, value=SLUG)],
)
KEY_PARAMETER = OpenApiParameter(
    "key", {"type": "string", "maxLength": validation.MAX_KEY_LENGTH,
            "pattern": validation.KEY_PATTERN}, OpenApiParameter.PATH,
    description=(
        "The record's key: the producer's own identifier for it, unique within the feed, "
        f"and the last segment of its public URL `/feeds/<slug>/records/<key>`. "
        f"{validation.KEY_HELP} A PUT to a new key creates the record."
    ),
    examples=[OpenApiExample(KEY, value=KEY)],
)

MEMBER = "pat"  # the colleague of docs/publishing/write-access.md
USERNAME_PARAMETER = OpenApiParameter(
    "username", OpenApiTypes.STR, OpenApiParameter.PATH,
    description="The username of one of this server's users. The example, "
                f"`{MEMBER}`, is the colleague the docs' \"Giving a colleague write access\" "
                "makes.",
    examples=[OpenApiExample(MEMBER, value=MEMBER)],
)

FEED_BODY = {
    "slug": SLUG,
    "title": "Books of the world",
    "subtitle": "New and changed catalogue records, every day",
    "author": "The Catalogue Team",
    "language": "en",
    "page_size": 100,
}
FEED = {
    **FEED_BODY,
    "atom_id": "urn:uuid:2f1b6c3e-8d4a-4c57-9e0b-6a1f3d2c4b5a",
    "url": f"{BASE}/feeds/{SLUG}/",
    "records": f"{BASE}/api/feeds/{SLUG}/records/",
    "entries": 3,
    "sealed_pages": 0,
    "updated": "2026-11-22T16:56:03.823429Z",
    "created": "2026-11-22T16:50:12.004512Z",
    "record_schema": None,
    "schema": None,
    "record_schema_warnings": [],
}
RECORD_BODY = {
    "title": "Moby-Dick; or, The Whale",
    "summary": "Herman Melville's novel of Captain Ahab's hunt for the white whale.",
    # What the demo feed's record schema asks for (archives/management/commands/demo_feed.py):
    # the examples' records are written to it.
    "metadata": {"creators": ["Melville, Herman"], "subjects": ["Whaling", "Sea stories"],
                 "published": "1851-10-18", "resource_type": "Text", "language": "en"},
    "links": [{"href": "https://www.gutenberg.org/ebooks/2701", "rel": "related",
               "type": "text/html", "title": "Read it at Project Gutenberg"}],
}
RECORD = {
    "key": KEY,
    "atom_id": "urn:uuid:7c9e2b14-3a5d-5f60-8b1c-2d4e6f8a0b1c",
    **RECORD_BODY,
    "created": "2026-11-22T16:56:03.823429Z",
    "updated": "2026-11-22T16:56:03.823429Z",
    "deleted": False,
    "url": f"{BASE}/feeds/{RECORDS_SLUG}/records/{KEY}",
    "schema": f"{BASE}/feeds/{RECORDS_SLUG}/schema/1",
}
TOMBSTONE = {"key": "dubliners", "atom_id": "urn:uuid:0d3f5a7b-9c1e-5b2d-8f4a-6c8e0a2b4d6f",
             "updated": "2026-11-22T17:02:44.190311Z", "deleted": True}

FEED_CREATE = [OpenApiExample("A feed of books", value=FEED_BODY, request_only=True)]
FEED_CHANGE = [OpenApiExample(
    "Retitle the feed", request_only=True,
    value={"title": "Books of the world", "subtitle": "The catalogue's changes, day by day"})]
FEED_ANSWER = [OpenApiExample("A feed", value=FEED, response_only=True)]
RECORD_PUT = [OpenApiExample("A book", value=RECORD_BODY, request_only=True)]
RECORD_PATCH = [OpenApiExample(
    "Change the summary", request_only=True,
    value={"summary": "Call me Ishmael: Melville's novel of the hunt for the white whale."})]
RECORD_ANSWER = [OpenApiExample("A record", value=RECORD, response_only=True)]
RECORD_LIST_ANSWER = [
    OpenApiExample("A record", value=RECORD, response_only=True),
    OpenApiExample("A deleted record (as anonymous readers see it)", value=TOMBSTONE,
                   response_only=True),
]
BATCH = [
    OpenApiExample("Put two records", request_only=True, value={"operations": [
        {"op": "put", "key": "ulysses", "record": {
            "title": "Ulysses", "summary": "One day in Dublin, 16 June 1904.",
            "metadata": {"creators": ["Joyce, James"], "published": "1922-02-02",
                         "resource_type": "Text"}}},
        {"op": "put", "key": "dubliners", "record": {
            "title": "Dubliners", "metadata": {"creators": ["Joyce, James"],
                                               "published": "1914-06-15",
                                               "resource_type": "Text"},
            "links": [{"href": "https://www.gutenberg.org/ebooks/2814", "rel": "related"}]}},
    ]}),
    OpenApiExample("Delete a record and put another", request_only=True, value={"operations": [
        {"op": "delete", "key": "dubliners"},
        {"op": "put", "key": "a-portrait", "record": {
            "title": "A Portrait of the Artist as a Young Man",
            "metadata": {"creators": ["Joyce, James"], "published": "1916-12-29",
                         "resource_type": "Text"}}},
    ]}),
    OpenApiExample("Two records put", response_only=True, value={"applied": 2, "results": [
        {"index": 0, "op": "put", "key": "ulysses", "changed": True, "seq": 263},
        {"index": 1, "op": "put", "key": "dubliners", "changed": True, "seq": 264},
    ]}),
]
MEMBERS = [OpenApiExample("A maintainer, a producer and a group", response_only=True, value=[
    {"user": "alice", "role": "maintainer"}, {"user": MEMBER, "role": "producer"},
    {"group": "cataloguers", "role": "producer"}])]
MEMBER_PUT = [
    OpenApiExample("Make a producer", request_only=True, value={"role": "producer"}),
    OpenApiExample("A producer", response_only=True, value={"user": MEMBER, "role": "producer"}),
]
# A record's history (archives/api/history.py), newest first: a change through the API with
# a token and a note, one by the admin, an import, and one from before actors were kept.
HISTORY_ANSWER = [OpenApiExample("Who changed a record", response_only=True, value={
    "feed": RECORDS_SLUG, "key": KEY, "entries": [
        {"seq": 263, "kind": "update", "updated": "2026-11-24T09:12:40.551203Z",
         "actor": {"user": "pat", "token": "catalogue sync", "via": "api"},
         "note": "Publication date from the first edition"},
        {"seq": 201, "kind": "update", "updated": "2026-11-23T14:03:11.090417Z",
         "actor": {"user": "sam", "token": None, "via": "admin"}, "note": ""},
        {"seq": 57, "kind": "update", "updated": "2026-11-22T18:30:00.000000Z",
         "actor": {"user": None, "token": None, "via": "import"},
         "note": "Nightly catalogue export"},
        {"seq": 12, "kind": "create", "updated": "2026-11-22T16:56:03.823429Z",
         "actor": None, "note": ""},
    ]})]
HISTORY_REFUSED = {"detail": f"Reading the history of feed '{RECORDS_SLUG}' needs the producer "
                             "role on it (or maintainer)."}
ROOT = [OpenApiExample("The roots", response_only=True, value={
    "feeds": f"{BASE}/api/feeds/", "schema": f"{BASE}/api/schema/",
    "docs": f"{BASE}/api/schema/swagger-ui/"})]

def _refusal(check, *args) -> dict[str, list[str]]:
    """What a rule of archives/validation says when it refuses `args`: the examples quote
    the rules' own messages rather than a copy of them."""
    try:
        check(*args)
    except ValidationError as error:
        return error.message_dict
    raise AssertionError(f"{check.__name__}{args!r} was accepted")


def _denial(check, *args) -> str:
    """What a rule of archives.log.access says when it refuses `args`."""
    try:
        check(*args)
    except access.NotAllowed as refusal:
        return str(refusal)
    raise AssertionError(f"{check.__name__}{args!r} was allowed")


# What each refusal looks like (the shape archives.api.exceptions gives every error).
ERRORS = {
    400: {"detail": "Invalid input; nothing was written.",
          "errors": _refusal(validation.clean_record, {
              "title": "", "links": [{"href": "relative/path", "rel": "related"}]})},
    401: {"detail": "Authentication credentials were not provided."},
    403: {"detail": _denial(access.check_maintain, None, Feed(slug=SLUG))},
    404: {"detail": "No Feed matches the given query."},
    406: {"detail": str(NotAcceptable.default_detail)},
    409: {"detail": f"slug: {FROZEN['slug']}", "errors": {"slug": [FROZEN["slug"]]}},
    411: {"detail": str(LengthRequired.default_detail)},
    412: {"detail": "If-Match \"20261122T080803823429Z\" does not match the record's current "
                    "ETag \"20261122T081512004211Z\""},
    413: {"detail": str(BodyTooLarge().detail)},
    415: {"detail": str(UnsupportedMediaType("text/plain").detail)},
    429: {"detail": "Request was throttled. Expected available in 42 seconds."},
    503: {"detail": "The database is unavailable; try again shortly."},
}
SLUG_TAKEN = "The feed 'books' has this slug already; choose another."
CREATE_CONFLICT = {"detail": f"slug: {SLUG_TAKEN}", "errors": {"slug": [SLUG_TAKEN]}}


def _stored_over_bounds() -> dict[str, str]:
    """A put under a version of the feed's schema stored over the bounds (before they were
    set), as validation.RecordChecker refuses it."""
    stored = validation.RecordChecker({"properties": {"isbn": {"pattern": "^[0-9]{5000}$"}}},
                                      1, "books")
    try:
        stored.errors({})
    except validation.SchemaOverBounds as refusal:
        return {"detail": str(refusal.message)}
    raise AssertionError("a schema over the bounds was run")


PUT_CONFLICT = _stored_over_bounds()
BATCH_INVALID = {"detail": "1 operation(s) are invalid; nothing was applied.",
                 "errors": {"operations": {"1": _refusal(validation.clean_key, "a b")}}}

# API tokens (archives/api/tokens.py). The secret shown is not one: its checksum is wrong,
# so that secret scanners taught the prefix pass it by.
TOKEN_BODY = {"name": "nightly catalogue import", "feeds": [RECORDS_SLUG], "read_only": False,
              "expires": "2030-12-31T23:59:59Z"}
TOKEN = {"id": 7, "name": TOKEN_BODY["name"], "feeds": [RECORDS_SLUG], "read_only": False,
         "expires": "2030-12-31T23:59:59Z", "created": "2026-11-22T16:50:12.004512Z",
         "last_used": None, "hint": "feedpub_Q3vT"}
TOKEN_SECRET = "feedpub_Q3vTn8Kq2ZyW0bLxR5sJm7HcD1fGpA9eUo4iNtVk" + "000000"
TOKEN_CREATE = [
    OpenApiExample("A token for an import job", value=TOKEN_BODY, request_only=True),
    OpenApiExample("The token, with its secret (shown once)", response_only=True,
                   value={**TOKEN, "token": TOKEN_SECRET}),
]
TOKEN_LIST = [OpenApiExample("A token (never its secret)", value=TOKEN, response_only=True)]
TOKEN_INVALID = {"detail": "Invalid input; nothing was written.",
                 "errors": {"feeds": ["No feed has the slug 'theses'."]}}
