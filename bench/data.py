"""The records the write benchmarks put (bench/run.py, bench/write_floors.py)."""

from __future__ import annotations


def record(i: int) -> dict:
    """A realistic small metadata record (about what a catalogue entry carries)."""
    return {
        "title": f"Dataset {i}: observations of station {i % 977}",
        "summary": f"Hourly observations from station {i % 977}, quality controlled; "
                   f"release {i % 13}.",
        "metadata": {"id": i, "station": i % 977, "licence": "CC-BY-4.0",
                     "keywords": ["weather", "hourly", f"region-{i % 31}"]},
        "links": [{"href": f"https://data.example.org/datasets/{i}.csv", "rel": "enclosure",
                   "type": "text/csv", "title": "data"}],
    }


# A catalogue's schema of ten properties (bench/schema_cost.py), and records that match it.
CATALOGUE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "title": "Number"},
        "station": {"type": "integer", "title": "Station"},
        "licence": {"type": "string", "enum": ["CC-BY-4.0", "CC0-1.0"], "x-dc": "rights"},
        "keywords": {"type": "array", "items": {"type": "string"}, "x-dc": "subject"},
        "issued": {"type": "string", "format": "date", "x-dc": "date"},
        "creators": {"type": "array", "x-dc": "creator", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "orcid": {"type": "string"}}}},
        "language": {"type": "string", "x-dc": "language"},
        "publisher": {"type": "string", "x-dc": "publisher"},
        "doi": {"type": "string", "pattern": "^10\\.", "x-dc": "identifier"},
        "size": {"type": "number", "minimum": 0},
    },
    "required": ["id", "licence", "issued"],
    "additionalProperties": False,
}


def catalogue_record(i: int) -> dict:
    """A record of ten metadata properties that CATALOGUE_SCHEMA accepts."""
    base = record(i)
    return {**base, "metadata": {
        "id": i, "station": i % 977, "licence": "CC-BY-4.0",
        "keywords": ["weather", "hourly", f"region-{i % 31}"],
        "issued": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "creators": [{"name": f"Observer {i % 53}", "orcid": f"0000-0002-{i % 9999:04d}-0000"}],
        "language": "en", "publisher": "Weather Service", "doi": f"10.5555/obs.{i}",
        "size": 1024.5 + i,
    }}
