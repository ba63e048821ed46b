"""What checking a record against a feed's record schema may cost is bounded when the schema
is set (feedpub_consumer.schemabounds; docs/describing-records.md, What feedpub takes):
a schema that would apply subschemas without bound at one place of a record, or hold a
pattern the regex engine would write out at length, is refused naming record_schema; one
under the bounds is taken, and any record written under it is answered."""

from __future__ import annotations

import json
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from feedpub_consumer.checking import check_feed
from feedpub_consumer.schemabounds import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERN_SIZE,
    MAX_RECORD_BYTES,
    MAX_SCHEMA_STEPS,
    REGEX_FORMAT_WEIGHT,
    UNREPORTED_MISMATCH,
    pattern_size,
    schema_steps,
)
from lxml import html

from archives.log import publishing
from archives.models import Entry, Feed, Record, RecordSchema
from archives.validation import RecordChecker

from .broken_feeds import FeedServer
from .factories import record_data
from .oai import ask
from .test_api import FEED_PERMS, RECORD_PERMS, UserFactory, token_client
from .test_checkfeed_schema import linked_feed, messages, serve_schema


@pytest.fixture
def api(db):
    return token_client(UserFactory(perms=RECORD_PERMS + FEED_PERMS))


@pytest.fixture
def server():
    with FeedServer() as server:
        yield server


def doubling(levels: int) -> dict:
    """The issue's schema: `levels` of anyOf, each naming the next level twice."""
    defs = {f"d{n}": {"anyOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]}
            for n in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


# Every node of one level counts once at the place: 2 ** (levels + 1) - 1 in all.
UNDER = doubling(5)  # 63 subschemas at metadata.x, 65 with the $refs to them
DESCENDING = {"$defs": {"a": {"type": "object", "properties": {"x": {"anyOf": [
    {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}}}}, "$ref": "#/$defs/a"}


def set_schema(api, schema, slug="bounded"):
    return api.post("/api/feeds/", {"slug": slug, "title": "Bounded", "record_schema": schema},
                    format="json")


def refusal(answer) -> str:
    assert answer.status_code == 400, answer.content
    [said] = answer.json()["errors"]["record_schema"]
    return said


@pytest.mark.parametrize(("schema", "said"), [
    (doubling(18), f"more than {MAX_SCHEMA_STEPS} subschemas at one place"),
    (doubling(12), f"more than {MAX_SCHEMA_STEPS} subschemas at one place"),
    (DESCENDING, f"more than {MAX_SCHEMA_STEPS} subschemas at one place"),
    ({"properties": {"s": {"pattern": "x{5000}y"}}},
     f"at properties/s/pattern, the pattern 'x{{5000}}y' repeats more than {MAX_PATTERN_SIZE} "
     "times once its counted repetitions ({n}, {n,m}) are written out (5,001)"),
    ({"properties": {"s": {"pattern": "x{65535}{65535}"}}}, "(4,294,836,225)"),
    ({"patternProperties": {"(a{1000}){1000}": {}}}, "at patternProperties, the pattern"),
    ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
      "properties": {"x": {"$ref": "#/$defs/a"}}},
     "a $ref leads back to where it is without going deeper into the record"),
], ids=["anyOf-18", "anyOf-12", "descending", "counted", "nested-count", "pattern-key",
        "ref-cycle"])
def test_a_schema_whose_checking_could_blow_up_is_refused_naming_why(api, schema, said):
    began = time.perf_counter()
    message = refusal(set_schema(api, schema))
    assert message.startswith("Refused: ")
    assert said in message
    assert time.perf_counter() - began < 5  # decided from the schema, no record checked


def test_a_schema_change_over_the_bounds_is_refused_too(api):
    assert set_schema(api, {"type": "object"}).status_code == 201
    answer = api.patch("/api/feeds/bounded/", {"record_schema": doubling(14)}, format="json")
    assert "subschemas at one place" in refusal(answer)


def test_a_schema_under_the_bounds_is_taken_and_a_write_under_it_is_answered(api):
    assert schema_steps(UNDER) <= MAX_SCHEMA_STEPS
    assert set_schema(api, UNDER).status_code == 201
    began = time.perf_counter()
    answer = api.put("/api/feeds/bounded/records/k", {"title": "K", "metadata": {"x": "str"}},
                     format="json")
    assert answer.status_code == 400
    [said] = answer.json()["errors"]["metadata"]
    assert said.startswith('metadata.x: "str" is not valid under any of the schemas')
    assert api.put("/api/feeds/bounded/records/k", {"title": "K", "metadata": {"x": 7}},
                   format="json").status_code == 201
    assert time.perf_counter() - began < 5


def test_a_large_record_under_a_branching_schema_is_refused_without_naming_every_place(api):
    branching = {"properties": {"a": {"type": "array", "items": {
        "anyOf": [{"minimum": n} for n in range(1, 100)]}}}}
    assert set_schema(api, branching).status_code == 201
    began = time.perf_counter()
    answer = api.put("/api/feeds/bounded/records/k",
                     {"title": "K", "metadata": {"a": [0] * 30_000}}, format="json")
    assert answer.json()["errors"]["metadata"] == [UNREPORTED_MISMATCH]
    assert time.perf_counter() - began < 10  # (the validator's every error: minutes)
    small = api.put("/api/feeds/bounded/records/k", {"title": "K", "metadata": {"a": [0]}},
                    format="json")
    assert small.json()["errors"]["metadata"][0].startswith("metadata.a[0]: 0 is not valid")


def test_pattern_and_format_regex_take_the_same_expressions(api):
    schema = {"properties": {"re": {"type": "string", "format": "regex"}}}
    assert set_schema(api, schema).status_code == 201
    for expression in ("(a{1000}){1000}", "x{65535}{65535}", "x{5000}y", "(unclosed"):
        as_pattern = set_schema(api, {"properties": {"s": {"pattern": expression}}}, "other")
        as_format = api.put("/api/feeds/bounded/records/k",
                            {"title": "K", "metadata": {"re": expression}}, format="json")
        assert (as_pattern.status_code, as_format.status_code) == (400, 400), expression
    for expression in ("^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$", "x{120}", "(?=a)a"):
        assert api.put("/api/feeds/bounded/records/k",
                       {"title": "K", "metadata": {"re": expression}},
                       format="json").status_code in (200, 201), expression


@pytest.mark.parametrize(("pattern", "size"), [
    ("^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$", 12), ("x{5000}y", 5001), ("(ab){3}", 6),
    ("(a{1000}){1000}", 1_000_000), ("x{2,}", 3), ("a|bc", 3), ("\\u{1F600}{2}", 2),
    ("[{}]{4}", 4), ("\\{5}", 3), ("a{,5}", 5),
])
def test_a_patterns_size_is_its_length_with_counted_repetitions_written_out(pattern, size):
    assert pattern_size(pattern) == size


def test_an_enum_refusal_names_every_value(api):
    values = ["Dataset", "Collection", "Image", "Sound", "Text"]
    assert set_schema(api, {"properties": {"kind": {"enum": values}}}).status_code == 201
    answer = api.put("/api/feeds/bounded/records/k",
                     {"title": "K", "metadata": {"kind": "Book"}}, format="json")
    assert answer.json()["errors"]["metadata"] == [
        'metadata.kind: "Book" is not one of "Dataset", "Collection", "Image", "Sound" or '
        '"Text"']
    assert RecordChecker({"properties": {"k": {"enum": [1]}}}).errors({"k": 2}) == [
        "metadata.k: 2 is not one of 1"]


def test_checkfeed_says_it_could_not_check_against_a_hostile_schema_and_goes_on(server):
    hostile = serve_schema(server, "/schemas/hostile", doubling(24))
    fine = serve_schema(server, "/schemas/fine", {"properties": {"x": {"type": "integer"}}})
    began = time.perf_counter()
    feed = linked_feed(server, [{"x": "str"}, {"x": "str"}], hostile)
    result = check_feed(feed.latest)
    assert time.perf_counter() - began < 10
    [said] = messages(result, "schema.invalid")
    assert said.startswith(f"could not check records against {hostile}: "
                           "checking a record against it could apply more than")
    assert "0 records checked against 0 record schemas (1 unusable)" in result.notes
    feed = linked_feed(server, [{"x": "str"}, {"x": 1}], fine)
    assert messages(check_feed(feed.latest), "schema.record")



def test_a_schema_too_intricate_to_count_is_refused_at_once(api):
    """A $ref to the whole at each of a thousand properties: counting its cost level by
    level took a minute; it is cut short, and said."""
    whole = {"type": "object", "properties": {f"p{n}": {"$ref": "#"} for n in range(1000)}}
    began = time.perf_counter()
    said = refusal(set_schema(api, whole))
    assert time.perf_counter() - began < 10
    assert said.startswith("Refused: it is too intricate to bound what checking a record")


@pytest.mark.parametrize("schema", [
    {"$id": "http://[x/"}, {"properties": {"a": {"$ref": "http://[x/"}}},
    {"$ref": "#/allOf/\u00b2"}])
def test_a_reference_that_is_no_uri_is_refused_not_an_error(api, schema):
    assert refusal(set_schema(api, schema)).startswith("Not a valid JSON Schema")


def test_a_regex_format_counts_as_the_python_it_runs(api):
    """Each string under `format: "regex"` is read by Python, some 2 us: it weighs
    REGEX_FORMAT_WEIGHT steps, so a few at one place, not a hundred."""
    def regexes(n):
        return {"properties": {"l": {"items": {"allOf": [{"format": "regex"}] * n}}}}
    most = (MAX_SCHEMA_STEPS - 1) // REGEX_FORMAT_WEIGHT
    assert set_schema(api, regexes(most)).status_code == 201
    assert "more than 128 subschemas" in refusal(set_schema(api, regexes(most + 1), "more"))
    began = time.perf_counter()
    answer = api.put("/api/feeds/bounded/records/k", {"title": "K", "metadata": {
        "l": ["(a|b)c"] * 9_000}}, format="json")
    assert answer.status_code == 201
    assert time.perf_counter() - began < 5


def test_a_long_pattern_is_refused_before_it_is_read_through(api):
    long = "[ab]" * (MAX_PATTERN_LENGTH // 4 + 1)
    assert refusal(set_schema(api, {"properties": {"s": {"pattern": long}}})).endswith(
        f"characters long; at most {MAX_PATTERN_LENGTH:,}. (feedpub bounds what checking a "
        "record may cost: docs/describing-records.md, What feedpub takes.)")


def test_a_stored_pattern_that_is_not_ecma_262_still_runs(db):
    """0.3.0 took `(?i)`, which the validator runs: a stored version holding one is not
    over the bounds (a new schema is refused it, as not ECMA-262)."""
    stored = RecordChecker({"properties": {"s": {"type": "string", "pattern": "(?i)^[a-z]+$"}}},
                           1, "old")
    assert stored.over_bounds is None
    assert stored.errors({"s": "ABC"}) == []
    assert stored.errors({"s": "1"}) == ['metadata.s: "1" does not match "(?i)^[a-z]+$"']


def test_checkfeed_does_not_check_a_record_larger_than_the_bounds_hold_for(server):
    fine = serve_schema(server, "/schemas/fine", {"properties": {"x": {"type": "string"}}})
    feed = linked_feed(server, [{"x": "y" * 100_001}, {"x": 1}], fine)
    result = check_feed(feed.latest)
    [large] = [said for said in messages(result, "schema.record") if "could not" in said]
    assert large.endswith(f"its metadata is 100,010 bytes of JSON, more than "
                          f"{MAX_RECORD_BYTES:,}")
    assert len(messages(result, "schema.record")) == 2  # the other record is checked

# A version stored before the bounds -------------------------------------------------------
# An upgrade keeps the versions an older release stored, over the bounds or not: one over
# them is never run against a record (archives.validation.RecordChecker), so the feed takes
# no put until its maintainer sets a new schema; deletes and every read go on.

STORED_OVER = {"properties": {"s": {"type": "string", "pattern": "x{5000}y", "x-dc": "subject"}}}
WHY_OVER = ("The record schema in force for the feed 'old' (version 1) was stored before "
            "feedpub bounded what checking a record may cost, and is over those bounds: at "
            f"properties/s/pattern, the pattern 'x{{5000}}y' repeats more than "
            f"{MAX_PATTERN_SIZE} times")


@pytest.fixture
def old(db):
    """A feed with one live record, whose schema an older release stored over the bounds
    (as it stored it: the row, and the feed and its record and entry naming it)."""
    feed = publishing.create_feed(slug="old", title="Old")
    publishing.put_record(feed=feed, key="k1", data=record_data(1, metadata={"s": "xy"}))
    RecordSchema.objects.create(feed=feed, version=1, text=json.dumps(STORED_OVER),
                                created=timezone.now())
    Feed.objects.filter(pk=feed.pk).update(schema_version=1)
    Record.objects.filter(feed=feed).update(schema_version=1)
    Entry.objects.filter(feed=feed).update(schema_version=1)
    feed.refresh_from_db()
    return feed


def written(feed) -> list[tuple[int, str, str]]:
    return list(Entry.objects.filter(feed=feed).order_by("seq").values_list(
        "seq", "kind", "record__key"))


def conflict(answer) -> str:
    assert answer.status_code == 409, answer.content
    assert "errors" not in answer.json()  # the feed's state, not the request, refuses it
    return answer.json()["detail"]


def test_a_put_under_a_stored_version_over_the_bounds_is_refused_naming_why(api, old):
    answer = api.put("/api/feeds/old/records/k2",
                     {"title": "K", "metadata": {"s": "x" * 5000 + "y"}}, format="json")
    said = conflict(answer)
    assert said.startswith(WHY_OVER)
    assert "until its maintainer sets a new schema" in said
    assert "deleting records still works" in said
    retried = api.put("/api/feeds/old/records/k1", record_data(1, metadata={"s": "xy"}),
                      format="json")  # a put that would change nothing is refused too
    assert conflict(retried).startswith(WHY_OVER)
    assert written(old) == [(1, "create", "k1")]


def test_a_batch_needing_it_is_refused_whole(api, old):
    answer = api.post("/api/feeds/old/batch", {"operations": [
        {"op": "delete", "key": "k1"},
        {"op": "put", "key": "k2", "record": {"title": "K", "metadata": {"s": "y"}}}]},
        format="json")
    assert conflict(answer).startswith(WHY_OVER)
    assert written(old) == [(1, "create", "k1")]


def test_deleting_records_still_works(api, old):
    assert api.post("/api/feeds/old/batch", {"operations": [
        {"op": "delete", "key": "k1"}]}, format="json").status_code == 200
    assert api.put("/api/feeds/old/records/k1", record_data(1),
                   format="json").status_code == 409  # (restoring it is a put)
    assert written(old) == [(1, "create", "k1"), (2, "delete", "k1")]


def test_an_admin_save_is_refused_with_the_message_and_writes_nothing(admin_client, old):
    record = Record.objects.get(feed=old, key="k1")
    answer = admin_client.post(f"/admin/archives/record/{record.pk}/change/", {
        "title": "Changed", "summary": "", "metadata": json.dumps({"s": "y"}),
        "links": "[]"})
    assert answer.status_code == 200
    shown = " ".join(html.fromstring(answer.content.decode()).xpath(
        "string(//ul[contains(@class, 'errorlist')])").split())
    assert shown.startswith(WHY_OVER)
    assert written(old) == [(1, "create", "k1")]


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["import", "dry-run"])
def test_an_import_is_refused_with_the_message_and_writes_nothing(old, tmp_path, dry_run):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in [
        {"key": "k1", "deleted": True}, {"key": "k2", "title": "Two", "metadata": {"s": "y"}},
        {"key": "k3", "title": "Three", "metadata": {"s": "y"}}]) + "\n")
    with pytest.raises(CommandError) as failure:
        call_command("import_records", "old", str(path), "--no-progress", *dry_run,
                     stdout=StringIO(), stderr=StringIO())
    assert str(failure.value).startswith(f"2 lines (2-3): {WHY_OVER}")
    assert written(old) == [(1, "create", "k1")]


def test_reads_go_on(client, old):
    served = client.get("/feeds/old/schema/1")
    assert served.status_code == 200
    assert json.loads(served.content) == STORED_OVER
    assert client.get("/feeds/old/records/k1").status_code == 200
    assert client.get("/feeds/old/records/k1",
                      HTTP_ACCEPT="application/json").json()["metadata"] == {"s": "xy"}
    dc = ask(client, verb="GetRecord", metadataPrefix="oai_dc",
             identifier=f"oai:feedpub.localhost:{old.uuid}/k1")
    assert [subject.text for subject in dc.iter("{*}subject")] == ["xy"]


def test_setting_a_new_schema_restores_writes(api, old):
    assert api.patch("/api/feeds/old/", {"title": "Renamed"}, format="json").json()[
        "record_schema"] == STORED_OVER  # (the feed itself changes as ever)
    fixed = {"properties": {"s": {"type": "string", "pattern": "^x{1,120}y$"}}}
    assert api.patch("/api/feeds/old/", {"record_schema": fixed},
                     format="json").status_code == 200
    assert api.put("/api/feeds/old/records/k2", {"title": "K", "metadata": {"s": "xxy"}},
                   format="json").status_code == 201
    refused = api.put("/api/feeds/old/records/k3", {"title": "K", "metadata": {"s": "y"}},
                      format="json")
    assert refused.status_code == 400  # checked, under version 2
    assert [kind for _, kind, _ in written(old)] == ["create", "create"]


def test_a_new_schema_the_live_records_break_is_refused_as_usual(api, old):
    answer = api.patch("/api/feeds/old/", {"record_schema": {"properties": {
        "s": {"type": "integer"}}}}, format="json")
    assert answer.status_code == 409
    assert answer.json()["errors"]["record_schema"][0].startswith(
        "1 live record(s) do not match this schema; the first, 'k1': metadata.s:")


def test_a_command_lists_the_feeds_whose_schema_in_force_is_over_the_bounds(old):
    publishing.create_feed(slug="fine", title="Fine", record_schema=UNDER)
    out = StringIO()
    call_command("schemas_over_bounds", stdout=out)
    listed = out.getvalue().splitlines()
    assert listed[0].startswith("old: version 1: at properties/s/pattern, the pattern")
    assert listed[1:] == ["1 of 2 feeds with a record schema is over the bounds"]
