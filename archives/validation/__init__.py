"""The rules of what may enter a feed, for every caller (the API, the admin, imports and the
write path): `records` holds a record's own (its key, its fields, the XML 1.0 every string
must fit), `recordschemas` a feed's record schema and the check of a record's metadata
against it. The bottom layer: imports nothing of archives; of the consumer tools, the schema
helpers they share (feedpub_consumer.schemabounds, schemacheck).

Callers name the rules from here (`validation.clean_record`, `validation.RecordChecker`).
"""

from __future__ import annotations

from .records import (  # noqa: F401
    ABSOLUTE_URI_PATTERN,
    ABSOLUTE_URI_RE,
    FEED_TEXT_FIELDS,
    FEEDPUB_ALTERNATES,
    IANA_RELATIONS,
    KEY_CHARACTERS,
    KEY_EXAMPLE,
    KEY_HELP,
    KEY_PATTERN,
    KEY_RE,
    LANGUAGE_MESSAGE,
    LANGUAGE_PATTERN,
    LANGUAGE_RE,
    LINK_FIELD_SET,
    LINK_FIELDS,
    LINK_SCHEMES,
    LINKS_EXAMPLE,
    LINKS_HELP,
    MAX_HREF_LENGTH,
    MAX_KEY_LENGTH,
    MAX_LANGUAGE_LENGTH,
    MAX_LINKS,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_SUMMARY_LENGTH,
    MAX_TITLE_LENGTH,
    MEDIA_TYPE_PATTERN,
    MEDIA_TYPE_RE,
    METADATA_EXAMPLE,
    METADATA_HELP,
    NETLOC_UNSAFE_CLASS,
    NON_BLANK_XML_TEXT_PATTERN,
    RECORD_CHECKS,
    RECORD_ENTRY_TYPE,
    RECORD_FIELD_SET,
    RECORD_FIELD_TYPES,
    RECORD_FIELDS,
    RECORD_PAGE_TYPE,
    REL_NAME_RE,
    REL_PATTERN,
    REL_RE,
    WHITESPACE_CLASS,
    XML_ILLEGAL_CLASS,
    XML_ILLEGAL_RE,
    XML_TEXT_PATTERN,
    Link,
    RecordData,
    check_metadata,
    clean_feed_text,
    clean_key,
    clean_record,
    xml_problem,
)
from .recordschemas import (  # noqa: F401
    DC_KEYWORD,
    DUBLIN_CORE_ELEMENTS,
    MAX_SCHEMA_ERRORS,
    OUTSIDE_REF_RE,
    RECORD_OWN_NAMES,
    RECORD_TEXT_NAMES,
    SCHEMA_DIALECT,
    SCHEMA_HELP,
    RecordChecker,
    SchemaOverBounds,
    check_record_schema,
    schema_warnings,
)
