"""The cache term beyond Diego: the `cache_locality` scorer, the diego strategy with a cache weight, and
its fast engine against the reference."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from placement.cell_offer import CellOffer, Resources
from placement.explain import explain
from placement.scheduler import schedule
from placement.scoring import cache_locality, cached_lrp_score, lrp_score, lrp_score_components
from placement.slot import CellSlot
from placement.strategies import diego_fast
from placement.testing import lrp_start
from placement.types import SchedulerConfig
from tests.support.engine_workloads import Workload, assert_engines_agree, diego_workloads, run

BLOB = "sha256:" + "ab" * 32


def cell(cell_id: str, zone: str = "z0", free_mb: int = 4096,
         blobs: frozenset[str] = frozenset()) -> CellOffer:
    return CellOffer(cell_id, zone, Resources(4096, 8192, 10), Resources(free_mb, 8192, 10),
                     cached_blobs=blobs)


def slot_of(offer: CellOffer) -> CellSlot:
    return CellSlot(0, 0, offer)


def test_the_scorer_lowers_a_cell_caching_the_blob_by_the_weight() -> None:
    warm, cold = slot_of(cell("w", blobs=frozenset({BLOB}))), slot_of(cell("c"))
    assert cache_locality(warm, BLOB, 0.5) == -0.5
    assert cache_locality(cold, BLOB, 0.5) == 0.0
    assert cache_locality(warm, None, 0.5) == 0.0
    assert cached_lrp_score(warm, 64, 64, "web", 0.25, 0.0, BLOB, 0.5) == \
        lrp_score(warm, 64, 64, "web", 0.25, 0.0) - 0.5


def test_components_say_whether_the_cell_caches_the_blob_and_add_up() -> None:
    warm = slot_of(cell("w", blobs=frozenset({BLOB})))
    weighted = lrp_score_components(warm, 64, 64, "web", 0.25, 0.0, BLOB, 0.5)
    assert weighted["cached"] == 1.0 and weighted["cache_locality"] == -0.5
    assert weighted["score"] == lrp_score(warm, 64, 64, "web", 0.25, 0.0) - 0.5
    unweighted = lrp_score_components(warm, 64, 64, "web", 0.25, 0.0, BLOB, 0.0)
    assert unweighted["cached"] == 1.0 and "cache_locality" not in unweighted
    assert unweighted["score"] == lrp_score(warm, 64, 64, "web", 0.25, 0.0)
    assert "cached" not in lrp_score_components(warm, 64, 64, "web", 0.25, 0.0)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_with_a_weight_the_warm_cell_wins_over_a_less_loaded_cold_one(engine: str) -> None:
    # the cold cell is emptier: Diego alone picks it; a weight above the load difference picks the warm one
    cells = [cell("cold"), cell("warm", free_mb=2048, blobs=frozenset({BLOB}))]
    item = [lrp_start("web", 0, 64, 64, source_blob=BLOB)]
    def placed(weight: float) -> str:
        config = SchedulerConfig(engine=engine, cache_weight=weight)
        return schedule(cells, item, config=config).lrp_assignments[0].cell_id
    assert placed(0.0) == "cold"
    assert placed(0.1) == "cold"  # the warm cell is 1/6 more loaded: a smaller weight does not outweigh it
    assert placed(0.5) == "warm"


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_zone_balance_still_comes_first(engine: str) -> None:
    # web already runs in z1: the next instance goes to z0 whatever z1's cache holds
    cells = [cell("a", "z0"), cell("b", "z1", blobs=frozenset({BLOB}))]
    held = dataclasses.replace(cells[1], lrp_counts={"web": 1})
    items = [lrp_start("web", 1, 64, 64, source_blob=BLOB)]
    result = schedule([cells[0], held], items, config=SchedulerConfig(engine=engine, cache_weight=100.0))
    assert result.lrp_assignments[0].cell_id == "a"


def without_cache(workload: Workload) -> Workload:
    cells = [dataclasses.replace(c, cached_blobs=frozenset()) for c in workload.cells]
    lrps = [dataclasses.replace(i, ask=dataclasses.replace(i.ask, source_blob=None)) for i in workload.lrps]
    config = {k: v for k, v in workload.config.items() if k != "cache_weight"}
    return Workload(cells, lrps, workload.tasks, workload.seed, config)


@settings(max_examples=80, deadline=None)
@given(diego_workloads(cache=True))
def test_weight_zero_places_as_diego_does(workload: Workload) -> None:
    workload.config["cache_weight"] = 0.0
    diego = without_cache(workload)
    for engine in ("fast", "reference"):
        with_blobs, plain = run(workload, "diego", engine), run(diego, "diego", engine)
        assert (with_blobs.lrp_assignments, with_blobs.task_assignments, with_blobs.failures) == \
            (plain.lrp_assignments, plain.task_assignments, plain.failures)


@settings(max_examples=150, deadline=None)
@given(diego_workloads(cache=True))
def test_fast_equals_reference_with_the_cache_term(workload: Workload) -> None:
    assert_engines_agree(workload, "diego")


def test_fast_equals_reference_judging_the_cells_caching_a_blob_over_columns() -> None:
    # the fast engine judges many cells caching one blob over numpy columns: here every pool does so
    @settings(max_examples=300, deadline=None)
    @given(diego_workloads(cache=True))
    def agree(workload: Workload) -> None:
        assert_engines_agree(workload, "diego")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(diego_fast, "VECTOR", 0)
        agree()


def test_explain_shows_the_cache_term() -> None:
    cells = [cell("cold"), cell("warm", free_mb=2048, blobs=frozenset({BLOB}))]
    item = lrp_start("web", 0, 64, 64, source_blob=BLOB)
    explained = explain(cells, ("web", 0), [item], config=SchedulerConfig(cache_weight=0.5))
    assert explained.chosen == "warm"
    parts = {v.cell_id: v.components for v in explained.cells}
    assert (parts["warm"]["cached"], parts["warm"]["cache_locality"]) == (1.0, -0.5)
    assert (parts["cold"]["cached"], parts["cold"]["cache_locality"]) == (0.0, 0.0)
