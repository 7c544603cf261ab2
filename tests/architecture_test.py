"""The house the imports draw, held to docs/architecture.md's dependency rule: `common/` imports none of the
others; the placement library imports `common/` only; the auctioneer, the BBS and the rep import `common/`
and `placement/` only (they meet over the wire, never through each other's modules); `deploy/` may import
them all. And the engine's and the BBS's modules import one another without a cycle."""

from __future__ import annotations

import pytest

from tests.support.import_graph import PACKAGES, find_cycle, import_graph

ALLOWED = {
    "common": {"common"},
    "placement": {"placement", "common"},
    "auctioneer": {"auctioneer", "placement", "common"},
    "bbs": {"bbs", "placement", "common"},
    "rep": {"rep", "common"},
    "deploy": set(PACKAGES),
}


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_the_dependency_rule_allows(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 5, f"the walk found {package}'s modules: {sorted(graph)}"
    wrong = sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] in PACKAGES and target.split(".")[0] not in ALLOWED[package]
    )
    assert wrong == [], f"{package}/ may import only {sorted(ALLOWED[package])}: {wrong}"


@pytest.mark.parametrize("package", ["placement", "bbs"])
def test_the_modules_of_the_engine_and_of_the_bbs_import_one_another_without_a_cycle(package: str) -> None:
    graph = import_graph(package)
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_graph_follows_relative_imports() -> None:
    graph = import_graph("bbs")
    assert "bbs.unit_of_work" in graph["bbs.operations.cells"], sorted(graph["bbs.operations.cells"])


def test_a_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"x"}}) is None


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support/ or a conftest.py, never in a test module another one imports."""
    from tests.support.import_graph import ROOT, imported, module_name

    def is_test_module(name: str) -> bool:
        last = name.rpartition(".")[2]
        return last.startswith("test_") or last.endswith("_test")

    paths = [p for p in sorted(ROOT.rglob("*.py")) if ".venv" not in p.parts and is_test_module(p.stem)]
    assert len(paths) > 100, "the walk found the test modules"
    known = {module_name(p): p for p in paths}
    wrong = sorted(
        (name, target)
        for name, path in known.items()
        for target in imported(name, path, known)
        if is_test_module(target) and target != name
    )
    assert wrong == [], f"test modules importing test modules: {wrong}"
