"""`manage.py import_records FEED FILE`: a file of records, in batches through the write path."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

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

    assert "25 records in 3 batch(es): 25 entries appended (25 created), 0 unchanged" in out
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

    assert "7 records in 1 batch(es): 0 entries appended (none), 7 unchanged" in out
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

    assert "2 records in 1 batch(es): 2 entries appended (2 created)" in out
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
    assert "the 3 record(s) before it were" in message
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
