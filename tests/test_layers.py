"""The shape of the house (archives/__init__.py): layers that only import downwards, no
import cycle, and consumer tools (the distribution feedpub-consumer, consumer/) that import
nothing of Django or the server and declare exactly what else they import.

The import graph is grimp's, which counts every import: inside functions and under
TYPE_CHECKING too, so a cycle hidden in a lazy import is still a cycle here.
"""

from __future__ import annotations

import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import grimp
import pytest

# Highest first. A module may import its own package and any lower layer; packages that
# share a layer are independent of each other.
LAYERS = [
    ["feedpub"],
    ["archives.urls", "archives.admin", "archives.api", "archives.management"],
    ["archives.serving", "archives.oai"],
    ["archives.log", "archives.push"],
    ["archives.storage", "archives.html"],
    ["archives.documents"],
    ["archives.db"],
    ["archives.models", "archives.jsoninput"],
    ["archives.validation", "archives.formats"],
]
# Imported by anything (the app's config) or by nothing of the app (migrations run alone).
UNLAYERED = {"archives", "archives.apps", "archives.migrations"}
# The consumer tools: a distribution of their own, which the server depends on.
CONSUMER = "feedpub_consumer"
CONSUMER_PYPROJECT = Path(__file__).resolve().parents[1] / "consumer" / "pyproject.toml"
# What the consumer tools may import besides themselves: the standard library, lxml, a
# caller's tqdm progress bar, and jsonschema-rs for record schemas (as the server).
CONSUMER_MAY_USE = {"lxml", "tqdm", "jsonschema_rs"}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("archives", "feedpub", CONSUMER, include_external_packages=True,
                              cache_dir=None)


def internal(module: str) -> bool:
    return module.split(".")[0] in ("archives", "feedpub")


def project_modules() -> list[str]:
    return sorted(m for m in graph().modules
                  if internal(m) and not m.startswith("archives.migrations"))


def consumer_modules() -> list[str]:
    return sorted(m for m in graph().modules if m.split(".")[0] == CONSUMER)


def package_of(module: str) -> str | None:
    """The LAYERS entry that holds `module` (the longest matching name)."""
    names = [name for layer in LAYERS for name in layer
             if module == name or module.startswith(name + ".")]
    return max(names, key=len, default=None)


def layer_of(module: str) -> int | None:
    package = package_of(module)
    return None if package is None else next(
        number for number, layer in enumerate(LAYERS) if package in layer)


def test_every_module_has_a_place_in_the_layers():
    homeless = [m for m in project_modules() if layer_of(m) is None and m not in UNLAYERED]
    assert homeless == []


def test_lower_layers_never_import_higher_ones_nor_their_neighbours():
    wrong = []
    for importer in project_modules():
        if layer_of(importer) is None:
            continue
        for imported in graph().find_modules_directly_imported_by(importer):
            if not internal(imported) or imported in UNLAYERED:
                continue
            here, there = layer_of(importer), layer_of(imported)
            if there is None or there < here or (
                    there == here and package_of(imported) != package_of(importer)):
                wrong.append(f"{importer} -> {imported}")
    assert wrong == []


def cycles(modules: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one that imports
    itself (Tarjan's algorithm, iterative)."""
    edges = {m: sorted(i for i in graph().find_modules_directly_imported_by(m) if i in modules)
             for m in modules}
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_module_takes_part_in_an_import_cycle():
    assert cycles(project_modules()) == []
    assert cycles(consumer_modules()) == []


def test_the_cycle_finder_finds_a_cycle(monkeypatch):
    """So that the test above can fail: a lazy import back from a format checker's base
    (as the checker once had) is a cycle."""
    real = graph()

    class WithCycle:
        modules = real.modules

        @staticmethod
        def find_modules_directly_imported_by(module):
            imported = set(real.find_modules_directly_imported_by(module))
            if module == "archives.documents.atom":
                imported.add("archives.documents.base")
            return imported

    monkeypatch.setattr("tests.test_layers.graph", lambda: WithCycle)
    assert any({"archives.documents.atom", "archives.documents.base"} <= set(component)
               for component in cycles(project_modules()))


@pytest.mark.parametrize("module", sorted(grimp.build_graph(CONSUMER, cache_dir=None).modules))
def test_the_consumer_tools_import_nothing_of_django_or_the_server(module):
    imported = graph().find_modules_directly_imported_by(module)
    foreign = sorted(i for i in imported
                     if internal(i) or i.split(".")[0] in {"django", "rest_framework"})
    external = {i.split(".")[0] for i in imported} - {CONSUMER}
    assert foreign == []
    assert external <= CONSUMER_MAY_USE | STDLIB


def test_the_consumer_distribution_requires_exactly_what_its_modules_import():
    """consumer/pyproject.toml's dependencies are the packages the tools import: installing
    feedpub-consumer brings nothing more (no Django), and nothing it needs is missing."""
    imported = {i.split(".")[0] for m in consumer_modules()
                for i in graph().find_modules_directly_imported_by(m)} - {CONSUMER} - STDLIB
    declared = tomllib.loads(CONSUMER_PYPROJECT.read_text())["project"]["dependencies"]
    assert {re.split(r"[\[=<>!~;\s]", line, maxsplit=1)[0].replace("-", "_")
            for line in declared} == imported == CONSUMER_MAY_USE

