"""Record search: the records whose key, title or summary contains what a person typed,
whatever its case and accents (`otautahi` finds "Ōtautahi", `ORLEANS` "Orléans"). Used by
the search page for people (archives/html/pages.py) and the admin's record list.

Both sides are folded by one SQL function of the database, so that a query and the text it
is looked for in are folded alike: `feedpub_search_text(key, title, summary)` (the three
joined by U+0001, which no key, title, summary or query can hold, so a match never spans
two of them) and `feedpub_search_fold(query)`, each the text without its accents
(`unaccent`) in lower case.

- PostgreSQL: SQL functions over the `unaccent` extension (migration 0017), declared
  IMMUTABLE, as an index expression must be (unaccent itself is only STABLE: its rules
  could change), and a pg_trgm GIN index on `feedpub_search_text(...)`, which serves the
  `LIKE '%...%'` of three characters or more (docs/performance/search.md).
- SQLite: the same two functions in Python (`fold`), registered on every connection
  (archives/apps.py); no index serves the pattern, so a search reads the feed's records.
"""

from __future__ import annotations

import unicodedata
from typing import overload

from django.db.models import Func, Q, QuerySet, TextField, Value

SEPARATOR = "\x01"

# Letters that carry their "accent" in the letter itself (no Unicode decomposition), folded
# as PostgreSQL's unaccent rules fold them.
LETTERS = str.maketrans({"Æ": "AE", "æ": "ae", "Œ": "OE", "œ": "oe", "ß": "ss", "Ø": "O",
                         "ø": "o", "Ł": "L", "ł": "l", "Đ": "D", "đ": "d", "Ð": "D", "ð": "d",
                         "Þ": "TH", "þ": "th", "ı": "i", "Ħ": "H", "ħ": "h"})


@overload
def fold(text: str) -> str: ...
@overload
def fold(text: None) -> None: ...


def fold(text: str | None) -> str | None:
    """`text` without accents, in lower case: SQLite's `feedpub_search_fold`."""
    if text is None:
        return None
    decomposed = unicodedata.normalize("NFKD", text.translate(LETTERS))
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def search_text(key: str | None, title: str | None, summary: str | None) -> str:
    """What a search looks in, folded: SQLite's `feedpub_search_text`."""
    return fold(SEPARATOR.join(part or "" for part in (key, title, summary)))


def register_sqlite_functions(sender, connection, **kwargs) -> None:
    """connection_created: the two functions on a new SQLite connection."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("feedpub_search_fold", 1, fold,
                                              deterministic=True)
        connection.connection.create_function("feedpub_search_text", 3, search_text,
                                              deterministic=True)


class SearchText(Func):
    function = "feedpub_search_text"
    output_field = TextField()


class Folded(Func):
    function = "feedpub_search_fold"
    output_field = TextField()


# The trigram index serves patterns of three characters or more. A shorter query reads the
# feed's rows, and folding each row costs about five times comparing its key and title
# (bench/search.py: 17 s against 3.5 s on 1,000,000 records), so it looks in the key and
# title in any case, as the search did before it ignored accents.
SHORTEST_FOLDED = 3


def folds(query: str) -> bool:
    """Whether `query` is looked for in summaries too, whatever its accents."""
    return len(query) >= SHORTEST_FOLDED


def matching(records: QuerySet, *queries: str) -> QuerySet:
    """`records` whose key, title or summary contains each of `queries`, ignoring case and
    accents (LIKE escapes a query's own `%`, `_` and `\\`); a query of one or two
    characters: whose key or title contains it, in any case."""
    records = records.alias(search_text=SearchText("key", "title", "summary"))
    for query in queries:
        if not folds(query):
            records = records.filter(Q(key__icontains=query) | Q(title__icontains=query))
        else:
            records = records.filter(search_text__contains=Folded(Value(query)))
    return records
