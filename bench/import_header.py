"""What reading a wide CSV header costs `import_records` (the check that named each
column once was quadratic, 20,000 columns 13 s).

    .venv/bin/python bench/import_header.py [--columns 1000 5000 10000 20000 100000]

For each width, a CSV of a header of that many columns (`key`, `title`, then `p1`, `p2`...)
and one record (its first property filled, the rest empty) is checked by a dry run
(`import_records(dry_run=True)`) into a feed without a schema, which reads the header,
checks it and the record, and writes nothing: no database is needed. A width past the
limit (csvcolumns.MAX_COLUMNS) shows what its refusal costs. Prints the seconds each width
took, and its ratio to the narrowest, against the ratio of the widths (linear: the two grow
alike).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="+",
                        default=[1000, 5000, 10000, 20000, 100000])
    arguments = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")
    import django

    django.setup()
    from archives.management import importing
    from archives.models import Feed

    first = None
    for columns in arguments.columns:
        names = ["key", "title", *(f"p{n}" for n in range(1, columns - 1))]
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as file:
            file.write(",".join(names) + "\nb1,One,1851" + "," * (columns - 3) + "\n")
        began = time.perf_counter()
        try:
            importing.import_records(feed=Feed(slug="bench"), path=file.name,
                                     file_format="csv", batch_size=500, dry_run=True)
            outcome = "read"
        except importing.ImportFailed as failure:
            outcome = "refused: " + " ".join(map(str, failure.problems.values()))[:90]
        seconds = time.perf_counter() - began
        os.unlink(file.name)
        first = first or (columns, seconds)
        print(f"{columns:>7} columns: {seconds:8.3f} s  (x{seconds / first[1]:7.1f} time for "
              f"x{columns / first[0]:5.1f} columns)  {outcome}", flush=True)


if __name__ == "__main__":
    main()
