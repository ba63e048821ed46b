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
