"""OAI-PMH over a 1,000,000-record feed: a deep page against the first, a page of oai_dc
records against an Atom archive page rendered from the database, and a whole harvest
against the complete feed. Every figure is a ratio against a baseline in the same run.

    .venv/bin/python bench/oai.py [--records 1000000] [--rounds 30] [--reuse]

PostgreSQL at 127.0.0.1:5432 (user postgres, trust): (re)creates the database `bench_oai`
and writes the feed straight into the tables with bench/snapshot.py's `write_feed` (one
create entry per record, an update for a tenth, a delete for a twentieth). Then, in one
process, through Django's WSGI handler (django.test.Client, no network):

1. `ListRecords` pages of 100 `oai_dc` records: the first page of the list (which also
   counts the list for completeListSize), a page resumed at the start, and one resumed
   four fifths in (each token made from a record's position, as the page before would
   have made it): the medians of `--rounds` requests. (Not nearer the end: the list is in
   order of last change, so its last 50,000 records are the deleted ones, headers only.)
2. the Atom archive page of 100 entries (`entry_rows` and `render_archive`, what sealing
   does), rendered from the database `--rounds` times, the median; against it, page 2
   answered by `archives.oai.verbs.answer` alone (the whole protocol, without the WSGI
   handler, which the Atom figure has not either);
3. a whole harvest: `ListRecords` followed token by token to the end (records/s), and the
   complete feed (`/feeds/big/complete/`) streamed whole (entries/s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "bench_oai"
PAGE = 100
ENV = {
    "DJANGO_SETTINGS_MODULE": "feedpub.settings",
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
    "LOG_LEVEL": "WARNING",
    "FEEDPUB_PAGE_SIZE": str(PAGE),
    "FEEDPUB_OAI_PAGE_SIZE": str(PAGE),
    "FEEDPUB_SEAL_ON_WRITE": "false",
    "DEBUG": "false",  # as in production: DEBUG keeps every query in memory
    "SECRET_KEY": "bench-only",
}
OAI = "{http://www.openarchives.org/OAI/2.0/}"


def populate(records: int) -> None:
    import django

    django.setup()
    from bench.snapshot import write_feed

    started = time.perf_counter()
    feed = write_feed(records, slug="big", title="OAI-PMH benchmark")
    print(f"written: {records:,} records, {feed.last_seq:,} entries in "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def median_seconds(call, rounds: int) -> float:
    call()  # warm: the first call of a kind pays for imports and plans
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(rounds: int) -> None:
    import django

    django.setup()
    from django.test import Client
    from lxml import etree

    from archives.documents import atom
    from archives.models import Feed, Record
    from archives.oai.protocol import ListState, Position, make_token
    from archives.oai.verbs import answer

    client = Client(HTTP_HOST="127.0.0.1")
    feed = Feed.objects.get(slug="big")
    records = Record.objects.filter(feed=feed).count()

    def list_records(**params) -> bytes:
        response = client.get("/oai", {"verb": "ListRecords", **params}, secure=True)
        assert response.status_code == 200
        assert b"<error" not in response.content
        return response.content

    def token_after(index: int) -> str:
        """The token a page ending at the record `index` (in (updated, id) order) gives."""
        updated, pk = (Record.objects.order_by("updated", "id")
                       .values_list("updated", "id")[index])
        return make_token(ListState("ListRecords", prefix="oai_dc",
                                    after=Position(updated, pk), delivered=index + 1,
                                    size=records))

    print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())}; "
          f"{records:,} records", flush=True)
    first = median_seconds(lambda: list_records(metadataPrefix="oai_dc"), rounds)
    deep_index = records * 4 // 5 - 1
    early_token, deep_token = token_after(PAGE - 1), token_after(deep_index)
    early = median_seconds(lambda: list_records(resumptionToken=early_token), rounds)
    deep = median_seconds(lambda: list_records(resumptionToken=deep_token), rounds)
    deep_page = list_records(resumptionToken=deep_token)
    assert deep_page.count(b"<record>") == PAGE
    assert b"</resumptionToken>" in deep_page

    number = feed.last_seq // PAGE // 2  # an archive page in the middle of the log

    def archive_page() -> bytes:
        rows = atom.entry_rows(feed, (number - 1) * PAGE + 1, number * PAGE)
        return atom.render_archive(feed, number, rows, has_next=True)

    assert archive_page().count(b"<entry>") == PAGE
    atom_page = median_seconds(archive_page, rounds)
    early_params = {"verb": ["ListRecords"], "resumptionToken": [early_token]}
    assert answer(early_params).count(b"<record>") == PAGE
    early_answer = median_seconds(lambda: answer(early_params), rounds)

    print(f"ListRecords, {PAGE} oai_dc records a page (medians of {rounds}):")
    for name, seconds in (("first page (counts the list)", first),
                          ("page 2 (resumed)", early),
                          (f"page {(deep_index + 1) // PAGE + 1} (resumed)", deep)):
        print(f"  {name}: {seconds * 1000:.1f} ms = {PAGE / seconds:,.0f} records/s")
    print(f"  deep page / page 2: {early / deep:.2f}; deep page / first page: "
          f"{first / deep:.2f} (rates; 1.0 = as fast)")
    print(f"Atom archive page of {PAGE} entries from the database: {atom_page * 1000:.2f} ms "
          f"= {PAGE / atom_page:,.0f} entries/s;\n  page 2 by answer() alone: "
          f"{early_answer * 1000:.2f} ms = {PAGE / early_answer:,.0f} records/s, "
          f"{atom_page / early_answer:.2f} x the Atom page's rate (through the WSGI handler: "
          f"{atom_page / early:.2f} x)", flush=True)

    started = time.perf_counter()
    harvested = requests = 0
    params = {"metadataPrefix": "oai_dc"}
    while True:
        root = etree.fromstring(list_records(**params))
        requests += 1
        harvested += len(root.findall(f"{OAI}ListRecords/{OAI}record"))
        token = root.findtext(f"{OAI}ListRecords/{OAI}resumptionToken")
        if not token:
            break
        params = {"resumptionToken": token}
    harvest = time.perf_counter() - started
    assert harvested == records, (harvested, records)

    started = time.perf_counter()
    response = client.get("/feeds/big/complete/", secure=True)
    entries = size = 0
    tail = b""
    for piece in response.streaming_content:
        size += len(piece)
        entries += (tail + piece).count(b"<entry>")
        tail = piece[-6:]
    response.close()
    complete = time.perf_counter() - started
    print(f"whole harvest: {harvested:,} records in {requests:,} requests, {harvest:.1f} s = "
          f"{harvested / harvest:,.0f} records/s (parsing each answer included)")
    print(f"complete feed: {entries:,} entries (the live records), {size / 1e6:,.0f} MB in "
          f"{complete:.1f} s = {entries / complete:,.0f} entries/s; the harvest runs at "
          f"{(harvested / harvest) / (entries / complete):.2f} x its rate")
    print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--reuse", action="store_true", help="skip writing the feed")
    options = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    env = {**os.environ, **ENV}
    if not options.reuse:
        subprocess.run(["dropdb", "--if-exists", "-h", "127.0.0.1", "-U", "postgres", DB_NAME],
                       check=True)
        subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB_NAME], check=True)
        subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True, env=env)
        subprocess.run([python, __file__, "--populate", str(options.records)], cwd=ROOT,
                       check=True, env=env)
    subprocess.run([python, __file__, "--measure", str(options.rounds)], cwd=ROOT, check=True,
                   env=env)


if __name__ == "__main__":
    if sys.argv[1:2] in (["--populate"], ["--measure"]):
        sys.path.insert(0, str(ROOT))
        populate(int(sys.argv[2])) if sys.argv[1] == "--populate" else measure(int(sys.argv[2]))
    else:
        main()
