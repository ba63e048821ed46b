"""`manage.py import_records FEED FILE`: a file of records, in batches through the write path."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from archives.management import importing
from archives.management.csvcolumns import MAX_COLUMNS
from archives.models import Entry, Record

from .factories import FeedFactory, record_data


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_records", *args, "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


def jsonl(tmp_path, lines: list, name: str = "records.jsonl"):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                            for line in lines))
    return path


def stored(feed) -> dict[str, tuple]:
    return {r.key: (r.title, r.summary, r.metadata, r.links, r.is_deleted)
            for r in Record.objects.filter(feed=feed)}


def test_it_puts_every_record_of_a_json_lines_file(db, tmp_path,
                                                   django_capture_on_commit_callbacks):
    feed = FeedFactory(slug="books", page_size=10)
    path = jsonl(tmp_path, [{"key": f"book-{n}", **record_data(n)} for n in range(1, 26)])

    with django_capture_on_commit_callbacks(execute=True):
        out = run("books", str(path), "--batch-size", "10")

    assert "25 records in 3 batches: 25 entries appended (25 created), 0 unchanged" in out
    record = Record.objects.get(feed=feed, key="book-7")
    assert (record.title, record.metadata, record.links) == (
        "Record 7", record_data(7)["metadata"], record_data(7)["links"])
    assert list(Entry.objects.filter(feed=feed).values_list("seq", flat=True)) == list(
        range(1, 26))
    feed.refresh_from_db()
    assert feed.sealed_pages == 2  # sealed as the batches filled pages


def test_a_second_run_of_the_same_file_appends_nothing(db, tmp_path):
    feed = FeedFactory(slug="books")
    path = jsonl(tmp_path, [{"key": f"book-{n}", **record_data(n)} for n in range(1, 8)])
    run("books", str(path))

    out = run("books", str(path))

    assert "7 records in 1 batch: 0 entries appended (none), 7 unchanged" in out
    assert Entry.objects.filter(feed=feed).count() == 7


def test_a_changed_file_appends_only_what_changed_and_deletes_what_it_says(db, tmp_path):
    feed = FeedFactory(slug="books")
    run("books", str(jsonl(tmp_path, [{"key": f"b{n}", **record_data(n)} for n in range(3)])))
    changed = [{"key": "b0", **record_data(0)}, {"key": "b1", **record_data(1, title="New")},
               {"key": "b2", "deleted": True}]

    out = run("books", str(jsonl(tmp_path, changed, "changes.jsonl")))

    assert "2 entries appended (1 deleted, 1 updated), 1 unchanged" in out
    assert stored(feed)["b1"][0] == "New"
    assert stored(feed)["b2"][4] is True
    assert Entry.objects.filter(feed=feed).count() == 5


def test_a_file_of_the_apis_answers_loads_as_it_is(db, tmp_path, client):
    source = FeedFactory(slug="source")
    run("source", str(jsonl(tmp_path, [{"key": "a", **record_data(1)}])))
    answer = client.get(f"/api/feeds/{source.slug}/records/a").json()
    target = FeedFactory(slug="target")

    run("target", str(jsonl(tmp_path, [answer], "answers.jsonl")))

    assert stored(target) == stored(source)


def test_it_puts_the_records_of_a_csv_file(db, tmp_path):
    feed = FeedFactory(slug="books")
    path = tmp_path / "books.csv"
    path.write_text(
        "key,title,summary,year,links\n"
        'moby-dick,Moby-Dick,"A whale,\nand a captain",1851,'
        '"[{""href"": ""https://example.org/moby"", ""rel"": ""related"", '
        '""type"": ""text/html""}]"\n'
        "ulysses,Ulysses,,1922,\n", encoding="utf-8-sig")  # (a BOM, as spreadsheets write)

    out = run("books", str(path))

    assert "2 records in 1 batch: 2 entries appended (2 created)" in out
    assert stored(feed) == {
        "moby-dick": ("Moby-Dick", "A whale,\nand a captain", {"year": "1851"},
                      [{"href": "https://example.org/moby", "rel": "related",
                        "type": "text/html", "title": ""}], False),
        "ulysses": ("Ulysses", "", {"year": "1922"}, [], False),
    }
    assert "0 entries appended (none), 2 unchanged" in run("books", str(path))


def test_a_bad_line_is_named_and_nothing_of_its_batch_is_written(db, tmp_path):
    feed = FeedFactory(slug="books", page_size=100)
    lines = [{"key": f"b{n}", **record_data(n)} for n in range(1, 8)]
    lines[4] = {"key": "b5", "summary": "no title"}  # line 5, in the second batch of 3
    lines[5] = "{not json"  # line 6

    with pytest.raises(CommandError) as failure:
        run("books", str(jsonl(tmp_path, lines)), "--batch-size", "3")

    message = str(failure.value)
    assert "line 5: title: This field is required." in message
    assert "line 6: not JSON" in message
    assert "the 3 records before it were" in message
    assert sorted(stored(feed)) == ["b1", "b2", "b3"]  # the first batch, and no more


def test_a_line_the_write_path_refuses_names_its_line(db, tmp_path):
    feed = FeedFactory(slug="books")
    lines = [{"key": "b1", **record_data(1)}, {"key": "b 2", **record_data(2)},
             {"key": "b3", "deleted": True}]

    with pytest.raises(CommandError) as failure:
        run("books", str(jsonl(tmp_path, lines)))

    assert "line 2: key: A key may only hold" in str(failure.value)
    assert "line 3: key: No record 'b3' in this feed to delete." in str(failure.value)
    assert str(failure.value).endswith("nothing was written; fix the file and run again")
    assert stored(feed) == {}


def test_a_key_repeated_in_the_file_is_refused(db, tmp_path):
    FeedFactory(slug="books")
    path = jsonl(tmp_path, [{"key": "b1", **record_data(1)}, {"key": "b1", **record_data(2)}])

    with pytest.raises(CommandError, match="line 2: key 'b1' is on line 1 too"):
        run("books", str(path))


def test_a_csv_row_with_too_many_cells_names_its_line(db, tmp_path):
    FeedFactory(slug="books")
    path = tmp_path / "books.csv"
    path.write_text("key,title\nb1,One\nb2,Two,extra\n")

    with pytest.raises(CommandError, match="line 3: 3 cells, but the header names 2"):
        run("books", str(path))


def test_a_dry_run_names_every_bad_line_and_writes_nothing(db, tmp_path):
    feed = FeedFactory(slug="books")
    lines = [{"key": "b1", "title": ""}, {"key": "b2", **record_data(2)}, "[1, 2]"]

    with pytest.raises(CommandError) as failure:
        run("books", str(jsonl(tmp_path, lines)), "--dry-run", "--batch-size", "1")

    assert "line 1: title: Must not be blank." in str(failure.value)
    assert "line 3: a line is a JSON object" in str(failure.value)
    assert Record.objects.filter(feed=feed).count() == 0


def test_a_missing_feed_or_file_is_a_clear_error(db, tmp_path):
    path = jsonl(tmp_path, [{"key": "b1", **record_data(1)}])
    with pytest.raises(CommandError, match="No feed 'nope': create it first"):
        run("nope", str(path))
    FeedFactory(slug="books")
    with pytest.raises(CommandError, match="missing.jsonl: No such file"):
        run("books", str(tmp_path / "missing.jsonl"))
    with pytest.raises(CommandError, match="say --format jsonl or --format csv"):
        run("books", str(tmp_path / "records.txt"))


def test_a_file_that_is_not_utf8_names_its_line(db, tmp_path):
    FeedFactory(slug="books")
    path = tmp_path / "books.csv"
    path.write_bytes(b"key,title\nb1,One\nb2,Caf\xe9\n")

    with pytest.raises(CommandError, match=r"line 3: not UTF-8 \(byte 0xe9 at column 7\)"):
        run("books", str(path))


def test_progress_goes_to_stderr_and_the_summary_to_stdout(db, tmp_path):
    FeedFactory(slug="books")
    path = jsonl(tmp_path, [{"key": f"b{n}", **record_data(n)} for n in range(5)])
    assert path.stat().st_size == 1145
    out, err = StringIO(), StringIO()

    call_command("import_records", "books", str(path), "--progress", stdout=out, stderr=err)

    assert "books: 100%|##########| 1.15k/1.15k" in err.getvalue()  # the file's 1,145 bytes
    assert out.getvalue().startswith("books: 5 records")


# Strict reading: what a lenient reader would settle silently is refused, naming the line.

def csv_file(tmp_path, text: str):
    path = tmp_path / "books.csv"
    path.write_text(text)
    return path


def test_a_csv_quote_left_open_names_its_line_and_nothing_of_its_batch_is_written(db, tmp_path):
    feed = FeedFactory(slug="books")
    # Read leniently, b3's title swallowed "b4,Four" and b4 was never imported.
    path = csv_file(tmp_path, 'key,title\nb1,One\nb2,Two\nb3,"Three\nb4,Four\n')

    with pytest.raises(CommandError) as failure:
        run("books", str(path), "--batch-size", "2")

    assert str(failure.value).startswith(
        "line 4: not CSV: a quoted cell opened in this row is not closed (the file ends "
        "inside it, on line 5)")
    assert "the 2 records before it were (2 entries appended)" in str(failure.value)
    assert stored(feed) == {"b1": ("One", "", {}, [], False), "b2": ("Two", "", {}, [], False)}


def test_a_csv_quote_closed_lines_later_names_the_line_it_opened_on(db, tmp_path):
    feed = FeedFactory(slug="books")
    path = csv_file(tmp_path, 'key,title\nb1,One\nb3,"Three\nb4,"Four"\nb5,Five\n')

    with pytest.raises(CommandError, match=r"line 3: not CSV: .* \(on line 4\)"):
        run("books", str(path))
    assert stored(feed) == {}


def test_a_csv_header_naming_a_column_twice_is_refused(db, tmp_path):
    feed = FeedFactory(slug="books")
    path = csv_file(tmp_path, "key,title,year,year\nb1,One,1851,1852\n")

    with pytest.raises(CommandError, match="line 1: the header names the column 'year' twice"):
        run("books", str(path))
    assert stored(feed) == {}


@pytest.mark.parametrize(("line", "where", "name"), [
    ('{"key": "f3", "key": "f4", "title": "t"}', "key", '"key"'),
    ('{"key": "f3", "title": "t", "metadata": {"a": {"b": 1, "b": 2}}}', "metadata.a.b", '"b"'),
])
def test_a_name_twice_in_one_json_object_is_refused_naming_it_and_its_line(db, tmp_path,
                                                                           line, where, name):
    feed = FeedFactory(slug="books")
    path = jsonl(tmp_path, [{"key": "f1", **record_data(1)}, line])

    with pytest.raises(CommandError) as failure:
        run("books", str(path))

    assert str(failure.value).startswith(
        f"line 2: JSON refused: at {where}: the name {name} appears twice in one object")
    assert stored(feed) == {}


def test_a_name_twice_in_a_csv_json_cell_is_refused(db, tmp_path):
    FeedFactory(slug="books")
    path = csv_file(tmp_path, 'key,title,metadata\nb1,One,"{""a"": 1, ""a"": 2}"\n')

    with pytest.raises(CommandError, match='line 2: metadata: JSON refused: at a: the name "a"'):
        run("books", str(path))


@pytest.mark.parametrize("depth", [70, 5000, 100_000])
def test_metadata_nested_too_deeply_is_a_named_error_not_a_recursion_error(db, tmp_path,
                                                                          depth):
    feed = FeedFactory(slug="books")
    nested = "[" * depth + "]" * depth
    path = jsonl(tmp_path, [{"key": "f1", **record_data(1)},
                            '{"key": "deep", "title": "t", "metadata": {"x": ' + nested + "}}"])

    with pytest.raises(CommandError, match="line 2: JSON refused: nested too deeply: more "
                                           "than 68 levels of objects and lists"):
        run("books", str(path))
    assert stored(feed) == {}


@pytest.mark.parametrize(("number", "why"), [
    ("1e-400", "cannot be stored exactly (it would become 0.0)"),
    ("12345678901234567890.5", "cannot be stored exactly (it would become 1.2345678901234567e+19)"),
    ("1e999", "cannot be stored exactly (it would become inf)"),
    ("-0.0", "is a negative zero, which is stored as 0"),
    ("-0", "is a negative zero, which is stored as 0"),
    ("1" * 5000, "has more than 4300 digits"),
])
def test_a_number_that_would_be_stored_bent_is_refused_naming_it(db, tmp_path, number, why):
    feed = FeedFactory(slug="books")
    path = jsonl(tmp_path, ['{"key": "n", "title": "t", "metadata": {"x": ' + number + "}}"])

    with pytest.raises(CommandError) as failure:
        run("books", str(path))

    assert str(failure.value).startswith(
        f"line 1: JSON refused: at metadata.x: the number {number[:40]}")
    assert why in str(failure.value)
    assert stored(feed) == {}


def test_numbers_a_float_keeps_are_stored_as_they_were_sent(db, tmp_path):
    feed = FeedFactory(slug="books")
    sent = ('{"big": 12345678901234567890, "tenth": 0.1, "tiny": 1e-300, "huge": 1.5e300, '
            '"trailing": 2.50, "zero": 0.0, "negative": -7.25, "avogadro": 6.022e23}')
    path = jsonl(tmp_path, ['{"key": "n", "title": "t", "metadata": ' + sent + "}"])

    run("books", str(path))

    # On SQLite and PostgreSQL alike; whole numbers past a float's 2**53, as integers.
    assert stored(feed)["n"][2] == {"big": 12345678901234567890, "tenth": 0.1, "tiny": 1e-300,
                                    "huge": 15 * 10**299, "trailing": 2.5, "zero": 0.0,
                                    "negative": -7.25, "avogadro": 6022 * 10**20}
    assert run("books", str(path)).endswith("0 entries appended (none), 1 unchanged\n")


def test_missing_ok_skips_a_delete_of_a_key_the_feed_does_not_have(db, tmp_path):
    feed = FeedFactory(slug="books")
    run("books", str(jsonl(tmp_path, [{"key": "b1", **record_data(1)},
                                      {"key": "b2", **record_data(2)}])))
    nightly = jsonl(tmp_path, [{"key": "b1", "deleted": True}, {"key": "gone", "deleted": True},
                               {"key": "b3", **record_data(3)}], "nightly.jsonl")
    with pytest.raises(CommandError, match="line 2: key: No record 'gone' in this feed"):
        run("books", str(nightly))  # without the flag, an error as before

    out = run("books", str(nightly), "--missing-ok")

    assert out == ("books: 3 records in 1 batch: 2 entries appended (1 created, 1 deleted), "
                   "0 unchanged, 1 delete of keys the feed does not have skipped\n")
    assert sorted(stored(feed)) == ["b1", "b2", "b3"]
    assert stored(feed)["b1"][4] is True
    # Run again: b1 was deleted already (unchanged), "gone" still is not there.
    assert run("books", str(nightly), "--missing-ok").endswith(
        "0 entries appended (none), 2 unchanged, 1 delete of keys the feed does not have "
        "skipped\n")


def test_counts_of_one_are_singular(db, tmp_path):
    FeedFactory(slug="books")
    path = jsonl(tmp_path, [{"key": "b1", **record_data(1)}])

    assert run("books", str(path)) == (
        "books: 1 record in 1 batch: 1 entry appended (1 created), 0 unchanged\n")
    assert run("books", str(path), "--dry-run") == "1 record checked; nothing was written\n"
    with pytest.raises(CommandError, match="1 bad line; nothing was written"):
        run("books", str(jsonl(tmp_path, ["[]"], "bad.jsonl")), "--dry-run")


# The header's width: a column limit, said at once, and a check as cheap as reading it.

def wide_header(columns: int) -> str:
    return ",".join(["key", "title", *(f"p{n}" for n in range(1, columns - 1))])


def test_a_header_past_the_column_limit_is_refused_before_any_row_is_read(db, tmp_path):
    feed = FeedFactory(slug="books")
    header = wide_header(MAX_COLUMNS + 1)
    path = tmp_path / "wide.csv"
    path.write_bytes(f"{header}\nb1,One\n".encode() + b"b2,\xff\n")  # line 3 is not UTF-8

    with pytest.raises(CommandError) as failure:
        run("books", str(path))
    read: list[int] = []
    with pytest.raises(importing.ImportFailed):
        importing.import_records(feed=feed, path=path, file_format="csv", batch_size=500,
                                 on_bytes=read.append)

    assert str(failure.value).splitlines() == [
        f"line 1: the header names {MAX_COLUMNS + 1:,} columns; a file has at most "
        f"{MAX_COLUMNS:,}",
        "nothing was written; fix the file and run again"]
    assert read == [len(header) + 1]  # the header line, and not one row
    assert stored(feed) == {}
    assert Entry.objects.filter(feed=feed).count() == 0


def test_a_header_at_the_column_limit_is_read(db, tmp_path):
    """As many columns as the limit allows, checked once each (it took 5 s when the check
    compared every column with every other, 20,000 columns 13 s; bench/import_header.py)."""
    feed = FeedFactory(slug="books")
    path = csv_file(tmp_path, f"{wide_header(MAX_COLUMNS)}\n"
                              f"b1,One,1851{',' * (MAX_COLUMNS - 3)}\n")

    assert "1 record in 1 batch" in run("books", str(path))
    assert stored(feed) == {"b1": ("One", "", {"p1": "1851"}, [], False)}


def test_a_wide_header_naming_a_column_twice_names_it(db, tmp_path):
    FeedFactory(slug="books")
    path = csv_file(tmp_path, f"{wide_header(MAX_COLUMNS - 1)},p7\nb1,One\n")

    with pytest.raises(CommandError, match="line 1: the header names the column 'p7' twice"):
        run("books", str(path))


def test_a_reason_many_lines_share_is_said_once_naming_them(db, tmp_path):
    FeedFactory(slug="books")
    lines = [{"key": f"b{n}", **({"summary": "untitled"} if n % 2 else record_data(n))}
             for n in range(1, 15)]

    with pytest.raises(CommandError) as failure:
        run("books", str(jsonl(tmp_path, lines)), "--dry-run")

    assert str(failure.value).splitlines() == [
        "7 lines (1, 3, 5, 7, 9, \u2026): title: This field is required.",
        "7 bad lines; nothing was written"]
