"""`manage.py import_records` into a feed with a record schema: CSV columns take the schema's
types, and every record is checked against it, each failure named by its line."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from archives.log import publishing
from archives.management.csvcolumns import CellType, cell_type
from archives.models import Record

from .factories import FeedFactory
from .test_api import RECORD_PERMS, UserFactory, token_client

CATALOGUE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"year": {"type": "integer", "minimum": 1000}},
    "properties": {
        "year": {"$ref": "#/$defs/year"},
        "pages": {"type": ["integer", "null"]},
        "price": {"type": "number"},
        "open_access": {"type": "boolean"},
        "isbn": {"type": "string"},
        "subjects": {"type": "array", "items": {"type": "string"}},
        "volumes": {"type": "array", "items": {"anyOf": [{"type": "integer"},
                                                         {"type": "null"}]}},
        "creators": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}},
            "required": ["name"]}},
        "publisher": {"type": "object", "properties": {"name": {"type": "string"}}},
        "kind": {"enum": ["book", "dataset"]},
        "note": {},
    },
    "required": ["year"],
}


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_records", *args, "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


def failure(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        run(*args)
    return str(raised.value)


def csv_file(tmp_path, text: str, name: str = "books.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(tmp_path, lines: list, name: str = "books.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def books(db):
    feed = FeedFactory(slug="books")
    return publishing.update_feed(feed=feed, record_schema=CATALOGUE)


def shown(client, key: str) -> dict:
    """The record as the API shows it."""
    answer = client.get(f"/api/feeds/books/records/{key}")
    assert answer.status_code == 200
    return answer.json()


def test_typed_columns_land_as_integers_numbers_booleans_lists_and_objects(books, tmp_path,
                                                                           client):
    path = csv_file(tmp_path, (
        "key,title,year,pages,price,open_access,isbn,subjects,volumes,creators,publisher,kind\n"
        'moby,Moby-Dick,1851, 635 ,12.5,yes,0142437247,Whales | Sea stories,1|2|3,'
        '"[{""name"": ""Melville, Herman""}]","{""name"": ""Harper""}",book\n'
        "emma,Emma,1815,,,FALSE,,Courtship,,,,\n"))

    out = run("books", str(path))

    assert "2 records in 1 batch: 2 entries appended (2 created)" in out
    moby = shown(client, "moby")
    assert moby["metadata"] == {
        "year": 1851, "pages": 635, "price": 12.5, "open_access": True, "isbn": "0142437247",
        "subjects": ["Whales", "Sea stories"], "volumes": [1, 2, 3],
        "creators": [{"name": "Melville, Herman"}], "publisher": {"name": "Harper"},
        "kind": "book"}
    assert moby["schema"].endswith("/feeds/books/schema/1")
    # An empty cell leaves its property out; one item is a list of one.
    assert shown(client, "emma")["metadata"] == {"year": 1815, "open_access": False,
                                                 "subjects": ["Courtship"]}
    # The typed values are what was stored: the same file again changes nothing.
    assert "0 entries appended (none), 2 unchanged" in run("books", str(path))


def test_a_backslash_keeps_a_pipe_inside_a_list_item(books, tmp_path, client):
    path = csv_file(tmp_path, "key,title,year,subjects\n"
                              r"atlas,Atlas,1900,Maps \| charts | Back\\slash | C:\temp" "\n")

    run("books", str(path))

    assert shown(client, "atlas")["metadata"]["subjects"] == [
        "Maps | charts", "Back\\slash", "C:\\temp"]


def test_a_column_the_schema_does_not_type_is_text_as_before(books, tmp_path, client):
    path = csv_file(tmp_path, "key,title,year,note,shelf\nb1,One,1900,42,7|8\n")

    run("books", str(path))

    # `note` allows anything and `shelf` is not a property: their cells stay text.
    assert shown(client, "b1")["metadata"] == {"year": 1900, "note": "42", "shelf": "7|8"}


@pytest.mark.parametrize(("column", "cell", "why"), [
    ("year", "eighteen", "'eighteen' is not an integer"),
    ("pages", "12.5", "'12.5' is not an integer"),
    ("price", "cheap", "'cheap' is not a number"),
    ("price", "1e-400", "the number 1e-400 cannot be stored exactly (it would become 0.0)"),
    ("open_access", "maybe", "'maybe' is not true or false (true/false, yes/no, 1/0)"),
    ("volumes", "1|two", "item 2: 'two' is not an integer"),
    ("subjects", "Whales||Sea", "item 2: empty (write \\| for a | inside a value)"),
    ("creators", '{"name": "Melville"}', "not a JSON array"),
    ("publisher", "{name: Harper}", "not JSON: Expecting property name enclosed in double "
                                    "quotes (column 2 of the cell)"),
    ("publisher", "[]", "not a JSON object"),
])
def test_a_cell_that_does_not_fit_names_its_line_and_column(books, tmp_path, column, cell,
                                                            why):
    cells = {"key": "b2", "title": "Two", "year": "1900", column: cell}
    quoted = ",".join('"' + text.replace('"', '""') + '"' for text in cells.values())
    path = csv_file(tmp_path, f"{','.join(cells)}\nb1,One,1900{',' * (len(cells) - 3)}\n"
                              f"{quoted}\n")

    message = failure("books", str(path))

    assert message.startswith(f'line 3, column "{column}": {why}')
    assert Record.objects.filter(feed=books).count() == 0  # b1 was in the same batch


def test_a_bad_cell_writes_nothing_of_its_batch_and_keeps_the_batches_before(books, tmp_path):
    path = csv_file(tmp_path, "key,title,year\nb1,One,1901\nb2,Two,1902\nb3,Three,1903\n"
                              "b4,Four,eighteen\nb5,Five,1905\n")

    message = failure("books", str(path), "--batch-size", "2")

    assert message == ('line 5, column "year": \'eighteen\' is not an integer\n'
                       "nothing of the batch holding line 5 was written; the 2 records before "
                       "it were (2 entries appended). Fix the file and run again: records "
                       "already written append nothing.")
    assert sorted(Record.objects.filter(feed=books).values_list("key", flat=True)) == [
        "b1", "b2"]


def test_a_record_the_schema_refuses_names_its_line_and_the_failing_path(books, tmp_path):
    path = csv_file(tmp_path, "key,title,year,kind\nb1,One,1900,book\nb2,Two,999,\n"
                              "b3,Three,,film\n")

    message = failure("books", str(path))

    assert message.splitlines() == [
        "line 3: metadata.year: 999 is less than the minimum of 1000",
        'line 4: metadata: "year" is a required property; '
        'metadata.kind: "film" is not one of "book" or "dataset"',
        "nothing was written; fix the file and run again"]
    assert Record.objects.filter(feed=books).count() == 0


def test_json_lines_are_checked_as_the_api_checks_them(books, tmp_path):
    record = {"title": "Two", "metadata": {"year": "1851", "subjects": "Whales"}}
    path = jsonl(tmp_path, [{"key": "b1", "title": "One", "metadata": {"year": 1900}},
                            {"key": "b2", **record}])
    api = token_client(UserFactory(perms=RECORD_PERMS))
    answer = api.put("/api/feeds/books/records/b2", record, format="json")
    assert answer.status_code == 400

    message = failure("books", str(path))

    said = answer.json()["errors"]["metadata"]
    assert said == ['metadata.subjects: "Whales" is not of type "array"',
                    'metadata.year: "1851" is not of type "integer"']
    assert message.startswith("line 2: " + "; ".join(said) + "\n")
    assert Record.objects.filter(feed=books).count() == 0


def test_a_dry_run_names_every_cell_and_record_that_does_not_fit(books, tmp_path):
    path = csv_file(tmp_path, "key,title,year,open_access\nb1,One,1900,yes\nb2,Two,1800s,\n"
                              "b3,Three,999,no\nb4,Four,1904,perhaps\n")

    message = failure("books", str(path), "--dry-run", "--batch-size", "1")

    assert message.splitlines() == [
        "line 3, column \"year\": '1800s' is not an integer",
        "line 4: metadata.year: 999 is less than the minimum of 1000",
        "line 5, column \"open_access\": 'perhaps' is not true or false (true/false, yes/no, "
        "1/0)",
        "3 bad lines; nothing was written"]
    assert Record.objects.filter(feed=books).count() == 0


def test_a_feed_without_a_schema_keeps_every_cell_as_text(db, tmp_path, client):
    FeedFactory(slug="books")
    path = csv_file(tmp_path, "key,title,year,open_access,subjects\nb1,One,1851,yes,a|b\n")

    run("books", str(path))

    answer = shown(client, "b1")
    assert answer["metadata"] == {"year": "1851", "open_access": "yes", "subjects": "a|b"}
    assert "schema" not in answer


RESOLVER = Registry().with_resource(
    "urn:test", DRAFT202012.create_resource({"$defs": {"n": {"type": "number"}}})
).resolver("urn:test")


@pytest.mark.parametrize(("schema", "read_as"), [
    ({"type": "integer"}, CellType("integer")),
    ({"type": ["boolean", "null"]}, CellType("boolean")),
    ({"type": ["integer", "number"]}, CellType("number")),
    ({"$ref": "#/$defs/n"}, CellType("number")),
    ({"$ref": "#/$defs/n", "multipleOf": 1, "type": "integer"}, CellType("integer")),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, CellType("integer")),
    ({"oneOf": [{"const": 1}, {"const": 2.5}]}, CellType("number")),
    ({"enum": [True, False]}, CellType("boolean")),
    ({"allOf": [{"type": ["string", "integer"]}, {"type": "integer"}]}, CellType("integer")),
    ({"type": "array", "items": {"$ref": "#/$defs/n"}}, CellType("array", "number")),
    ({"allOf": [{"type": "array"}, {"items": {"type": "object"}}]}, CellType("array", "object")),
    ({"type": "array"}, CellType("array")),  # items of any type: text
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, CellType()),  # either: text
    ({"anyOf": [{"type": "integer"}, {}]}, CellType()),
    ({"$ref": "#/$defs/missing"}, CellType()),
    ({}, CellType()),
    (True, CellType()),
])
def test_a_propertys_schema_decides_how_its_cells_are_read(schema, read_as):
    assert cell_type(schema, RESOLVER) == read_as


# A schema naming a property like a record's own field: a theses catalogue
# whose natural CSV was refused on every row, the one real bad cell buried among them.

THESES = {
    "type": "object",
    "required": ["title", "year"],
    "properties": {
        "title": {"type": "string", "title": "Title", "minLength": 1, "x-dc": "title"},
        "year": {"type": "integer", "title": "Year", "x-dc": "date"},
        "supervisor": {"type": "string", "title": "Supervisor"},
        "links": {"type": "array", "items": {"type": "string", "format": "uri"}},
    },
}


@pytest.fixture
def theses(db):
    return publishing.update_feed(feed=FeedFactory(slug="theses"), record_schema=THESES)


def theses_csv(tmp_path, header: str = "key,title,year,supervisor",
               bad: tuple[int, str] | None = None):
    """50 theses, one a row from line 2; `bad` replaces the year of one row by a cell."""
    rows = [[f"t{n}", f"Thesis {n}", str(1990 + n), f"Supervisor {n}"] for n in range(50)]
    if bad is not None:
        rows[bad[0] - 2][2] = bad[1]
    columns = len(header.split(","))
    return csv_file(tmp_path, "\n".join([header, *(",".join(row[:columns]) for row in rows)])
                    + "\n", "theses.csv")


def test_a_title_column_fills_the_record_and_a_schema_property_of_that_name(theses,
                                                                             tmp_path, client):
    out = run("theses", str(theses_csv(tmp_path)))

    assert out.splitlines() == [
        "the column 'title' fills both the record's title and the property 'title' of the "
        "feed's schema (a 'metadata.title' column would fill the property alone)",
        "theses: 50 records in 1 batch: 50 entries appended (50 created), 0 unchanged"]
    answer = client.get("/api/feeds/theses/records/t7").json()
    assert answer["title"] == "Thesis 7"
    assert answer["metadata"] == {"title": "Thesis 7", "year": 1997,
                                  "supervisor": "Supervisor 7"}


def test_a_metadata_column_fills_the_property_alone(theses, tmp_path, client):
    path = csv_file(tmp_path, "key,title,metadata.title,year,metadata.supervisor\n"
                              "t1,Moby-Dick,\"Moby-Dick; or, The Whale\",1851,Ahab\n")

    out = run("theses", str(path))

    assert out.splitlines() == [
        "theses: 1 record in 1 batch: 1 entry appended (1 created), 0 unchanged"]
    answer = client.get("/api/feeds/theses/records/t1").json()
    assert answer["title"] == "Moby-Dick"
    assert answer["metadata"] == {"title": "Moby-Dick; or, The Whale", "year": 1851,
                                  "supervisor": "Ahab"}


def test_a_reason_every_row_shares_is_said_once_and_the_one_bad_cell_first(theses, tmp_path):
    stricter = {**THESES, "required": ["title", "year", "supervisor"]}
    publishing.update_feed(feed=theses, record_schema=stricter)
    path = theses_csv(tmp_path, header="key,title,year", bad=(18, "twenty"))

    message = failure("theses", str(path))

    assert message.splitlines() == [
        "the column 'title' fills both the record's title and the property 'title' of the "
        "feed's schema (a 'metadata.title' column would fill the property alone)",
        "the feed's schema requires properties that no column fills: add the column "
        "'supervisor'",
        "49 lines (2-17, 19-51): metadata: \"supervisor\" is a required property",
        "line 18, column \"year\": 'twenty' is not an integer",
        "nothing was written; fix the file and run again"]
    assert Record.objects.filter(feed=theses).count() == 0


def test_a_links_column_stays_the_records_and_says_where_the_property_goes(theses, tmp_path,
                                                                           client):
    path = csv_file(tmp_path, (
        "key,title,year,links,metadata.links\n"
        't1,One,2001,"[{""href"": ""https://example.org/t1""}]",'
        "https://example.org/a | https://example.org/b\n"
        't2,Two,2002,"[{""href"": ""https://example.org/t2""}]",\n'))
    without = csv_file(tmp_path, "key,title,year,links\nt3,Three,2003,\n", "without.csv")

    run("theses", str(path))
    said = run("theses", str(without))

    one = client.get("/api/feeds/theses/records/t1").json()
    assert [link["href"] for link in one["links"]] == ["https://example.org/t1"]
    assert one["metadata"]["links"] == ["https://example.org/a", "https://example.org/b"]
    assert "links" not in client.get("/api/feeds/theses/records/t2").json()["metadata"]
    assert ("the column 'links' fills the record's own links, not the property 'links' of the "
            "feed's schema: a 'metadata.links' column fills that") in said.splitlines()


def test_two_columns_filling_one_property_are_refused(theses, tmp_path):
    path = csv_file(tmp_path, "key,title,year,metadata.year\nt1,One,2001,2001\n")

    assert failure("theses", str(path)).startswith(
        "line 1: the columns 'year' and 'metadata.year' both fill the property 'year'; "
        "keep one")


def test_without_a_schema_a_metadata_column_is_a_property_and_title_the_records(db, tmp_path,
                                                                                client):
    FeedFactory(slug="books")
    path = csv_file(tmp_path, "key,title,metadata.title,metadata.key\nb1,One,Un,x\n")

    out = run("books", str(path))

    assert out.splitlines() == [
        "books: 1 record in 1 batch: 1 entry appended (1 created), 0 unchanged"]
    answer = shown(client, "b1")
    assert (answer["title"], answer["metadata"]) == ("One", {"title": "Un", "key": "x"})


def test_a_metadata_cell_giving_the_property_keeps_it(theses, tmp_path, client):
    """A file of the API's answers: its metadata holds the property already."""
    path = csv_file(tmp_path, 'key,title,metadata\nt1,One,"{""title"": ""Un"", ""year"": 2001}"\n'
                              't2,Two,"{""year"": 2002}"\n')

    run("theses", str(path))

    one, two = (client.get(f"/api/feeds/theses/records/{key}").json() for key in ("t1", "t2"))
    assert (one["title"], one["metadata"]) == ("One", {"title": "Un", "year": 2001})
    assert (two["title"], two["metadata"]) == ("Two", {"year": 2002, "title": "Two"})
