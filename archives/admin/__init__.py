"""The admin for people: feeds and records change only through `archives.log.publishing`.

Its forms (`forms`, with the fields of `fields` and, for a feed with a record schema, the
metadata form `widgets` draws from it) check their input with archives.validation, the rules
the API applies. Saving a record is a put (one entry per real change), deleting one appends a
deletion entry and keeps the row (`records`); a feed is created, changed and deleted through
the write path too (`feeds`); entries and sealed pages are read-only (`entries`); API tokens
are listed and revoked, never shown (`tokens`). What the write path refuses (a record its
feed's schema does not take, a schema that is invalid or that live records break) is shown
at the form's fields, and nothing is written (`refusals`).
Who sees and does what follows their role on each feed (`roles`, asking archives.log.access),
and every write names its actor and the person's note; a record's page shows its history and
restores a version through the write path (`history`, `versions`).
The top layer: may use everything of archives below it; nothing imports it.
"""

from __future__ import annotations

from django.contrib import admin

from archives.models import ApiToken, ArchivePage, Entry, Feed, Record

from .entries import ArchivePageAdmin, EntryAdmin
from .feeds import FeedAdmin
from .records import RecordAdmin
from .tokens import ApiTokenAdmin

# The navigation sidebar takes 300 of a 1280-pixel screen from every list; the
# breadcrumbs and the index page lead everywhere it does.
admin.site.enable_nav_sidebar = False

admin.site.register(Feed, FeedAdmin)
admin.site.register(Record, RecordAdmin)
admin.site.register(Entry, EntryAdmin)
admin.site.register(ArchivePage, ArchivePageAdmin)
admin.site.register(ApiToken, ApiTokenAdmin)
