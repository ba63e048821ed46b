"""The slowest checks the record-schema bounds let through (feedpub_consumer.schemabounds),
in this process, without a database:

    .venv/bin/python bench/schema_bounds.py

For each schema at the bound (MAX_SCHEMA_STEPS subschemas at one place, or patterns of
MAX_PATTERN_SIZE) it builds the largest record metadata may be (MAX_METADATA_BYTES) that
makes every place cost the most, and times `RecordChecker.errors` on a record that matches
(every branch tried) and on one that does not (the refusal's report). Target: each under
1 s (docs/performance/record-schemas.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")


def cases(steps: int, size: int) -> list[tuple[str, dict, dict, dict]]:
    many = 33_000  # 100,000 bytes of "0, " items
    branches = steps - 3  # the array, the items, the anyOf itself
    items = {"anyOf": [{"minimum": n + 1} for n in range(branches - 1)] + [{"type": "integer"}]}
    failing = {"anyOf": [{"minimum": n + 1} for n in range(branches)]}
    lookaround = {"pattern": f"(?=x)x{{{size - 6}}}y"}
    long = "x" * 99_000
    return [
        ("anyOf at every item", {"properties": {"a": {"type": "array", "items": items}}},
         {"a": [0] * many}, {"a": [0] * many + [-1.5]}),
        ("anyOf failing at every item", {"properties": {"a": {"type": "array",
                                                               "items": failing}}},
         {"a": []}, {"a": [0] * many}),
        ("lookaround pattern, one long string", {"properties": {"s": lookaround}},
         {"s": "y"}, {"s": long}),
        ("patterns at every item", {"properties": {"a": {"items": {"allOf": [
            {"pattern": "^x+$"}] * (steps // 6)}}}}, {"a": ["x"] * 19_000},
         {"a": ["y"] * 19_000}),
    ]


def main() -> None:
    import django

    django.setup()
    from feedpub_consumer.schemabounds import MAX_PATTERN_SIZE, MAX_SCHEMA_STEPS, schema_steps

    from archives.validation import check_record_schema, clean_record

    print(f"MAX_SCHEMA_STEPS {MAX_SCHEMA_STEPS}, MAX_PATTERN_SIZE {MAX_PATTERN_SIZE}; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, schema, matching, failing in cases(MAX_SCHEMA_STEPS, MAX_PATTERN_SIZE):
        checker = check_record_schema(schema)  # taken: it is at the bound, not over
        for label, metadata in (("matches", matching), ("does not", failing)):
            data = clean_record({"title": "t", "metadata": metadata})  # within every limit
            began = time.perf_counter()
            said = checker.errors(data.metadata)
            took = time.perf_counter() - began
            print(f"{name} ({schema_steps(schema)} steps), a record that {label}: "
                  f"{took:.3f} s, {len(said)} place(s) named", flush=True)


if __name__ == "__main__":
    main()
