"""The house the imports draw, held to docs/architecture.md's dependency rule: `common/` imports none of the
others; the placement library imports `common/` only; the auctioneer, the BBS and the rep import `common/`
and `placement/` only (they meet over the wire, never through each other's modules); `deploy/` may import
them all. And the engine's and the BBS's modules import one another without a cycle."""

from __future__ import annotations

import pytest

from tests.support.import_graph import PACKAGES, ROOT, find_cycle, import_graph

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


# Geometric growth left outside common/retry.py on purpose: (sites in the module, why).
GROWTH_KEPT = {
    "bbs.restart_policy": (1, "Diego's restart schedule for crashed instances: a product rule with "
                              "documented, deterministic steps (docs/configuration.md), not a retry"),
    "rep.cgroups": (2, "polls a local cgroup emptying after a signal: no peer to come back in step with"),
    "rep.process_executor": (1, "polls an instance's own port until it listens: local, no peer"),
}


def test_retry_delays_come_from_the_one_jittered_policy() -> None:
    """Every retry's backoff is common/retry.py's (tenacity, with jitter): after a BBS restart, reps and
    auctioneers whose delays were grown by hand would all come back on the same schedule."""
    from tests.support.backoff_finder import growths_in
    from tests.support.import_graph import modules

    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for name, path in modules(package).items():
            if name != "common.retry" and (sites := growths_in(path)):
                found[name] = [f"{path.relative_to(ROOT)}:{g.line}: {g.source}" for g in sites]
    unexpected = {
        name: sites for name, sites in found.items() if len(sites) != GROWTH_KEPT.get(name, (0, ""))[0]
    }
    assert unexpected == {}, (
        "a delay grown by hand: take it from common/retry.py (a named Backoff, `retrying` or `delays()`), "
        f"or say in GROWTH_KEPT why it is not a retry: {unexpected}"
    )
    assert "common.retry" in modules("common"), "the policy's module moved: this check would pass blind"


@pytest.mark.parametrize("source", [
    "delay = min(delay * 2, cap)",
    "delay *= 2",
    "self._retry_s = min(2 * self._retry_s, limit)",
    "wait = min(wait, FIRST_S * 2 ** min(failures - 1, 20))",
    "time.sleep(min(MAX_S, FIRST_S * 2 ** attempt))",
    "component.next_delay_s = min(2 * delay, MAX_DELAY_S)",
    "backoff = FIRST_S * (1 << attempt)",
])
def test_the_finder_sees_a_hand_written_backoff(source: str) -> None:
    from tests.support.backoff_finder import growths

    assert [g.line for g in growths(source)] == [1], source


@pytest.mark.parametrize("source", [
    "INT32_MAX = 2**31 - 1",
    "variance = sum((v - mean) ** 2 for v in values)",
    "size = count * 2",
    "delay = next(delays)",
    "timeout = min(bbs_timeout, ttl / 3)",
])
def test_the_finder_leaves_what_is_not_growth(source: str) -> None:
    from tests.support.backoff_finder import growths

    assert list(growths(source)) == [], source
