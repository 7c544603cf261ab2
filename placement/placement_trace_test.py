import pytest

from placement.cell_offer import CellOffer, Resources
from placement.explain import explain
from placement.placement_trace import PlacementTrace, decided_by
from placement.scheduler import schedule
from placement.testing import lrp_start
from placement.types import SchedulerConfig


def cell(cell_id: str, zone: str, memory: int = 1000, disk: int = 1000) -> CellOffer:
    return CellOffer(cell_id, zone, Resources(memory, disk, 100), Resources(memory, disk, 100))


def cluster() -> list[CellOffer]:
    # two pools in z0 (different totals), one in z1: the fast engine compares three pool bests
    return [cell("a", "z0"), cell("b", "z0"), cell("c", "z0", memory=2000), cell("d", "z1"), cell("e", "z1")]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_each_candidate_is_scored_as_the_reference_explain_scores_that_cell_then(engine):
    cells = cluster()
    lrps = [lrp_start("web", i, 100, 10) for i in range(4)] + [lrp_start("api", 0, 300, 10)]
    trace = PlacementTrace(limit=100)
    result = schedule(cells, lrps, config=SchedulerConfig(engine=engine), trace=trace)

    placed = {(a.process_guid, a.index): a.cell_id for a in result.lrp_assignments}
    explained = trace.explanations()
    assert {(e["process_guid"], e["index"]) for e in explained} == set(placed)
    for why in explained:
        reference = explain(cells, (why["process_guid"], why["index"]), lrps)
        assert why["cell_id"] == placed[(why["process_guid"], why["index"])] == reference.chosen
        chosen = [c for c in why["candidates"] if c["chosen"]]
        assert [c["cell_id"] for c in chosen] == [why["cell_id"]]
        assert why["candidates"][0]["chosen"], "candidates come best first"
        seen_then = {v.cell_id: v.components for v in reference.cells}
        for candidate in why["candidates"]:
            assert candidate["components"] == seen_then[candidate["cell_id"]], candidate["cell_id"]
        scores = [c["components"]["score"] for c in why["candidates"]]
        assert scores == sorted(scores)


def test_the_zone_order_says_why_the_winning_zone_came_first():
    cells = [cell("a", "z0"), cell("b", "z1")]
    lrps = [lrp_start("web", 0, 100, 10), lrp_start("web", 1, 100, 10)]
    trace = PlacementTrace(limit=10)
    schedule(cells, lrps, trace=trace)
    first, second = trace.explanations()
    # web/0 meets two empty zones in one group; web/1 goes to the zone without an instance of web
    assert first["zone_order"] == ""
    assert [z["group"] for z in first["zones"]] == [0, 0]
    assert second["cell_id"] != first["cell_id"]
    assert second["zone_order"].startswith(
        f"{second['candidates'][0]['zone']} first: fewest instances of web"
    )
    assert second["decided_by"] == "only candidate"


def test_a_miss_keeps_the_per_filter_breakdown():
    trace = PlacementTrace(limit=10)
    schedule(
        [cell("a", "z0", memory=50), cell("b", "z0", memory=60)], [lrp_start("big", 0, 100, 10)], trace=trace
    )
    (why,) = trace.explanations()
    assert why == {"process_guid": "big", "index": 0, "placed": False, "cell_id": None,
                   "error": "insufficient resources: memory",
                   "detail": "0/2 cells fit: 2 insufficient memory (largest free 60 MB, need 100)"}


def test_records_at_most_limit_instances_and_nothing_when_zero():
    lrps = [lrp_start("web", i, 10, 10) for i in range(20)]
    trace = PlacementTrace(limit=3)
    result = schedule(cluster(), lrps, trace=trace)
    assert len(result.lrp_assignments) == 20
    assert [(e["process_guid"], e["index"]) for e in trace.explanations()] == [
        ("web", 0),
        ("web", 1),
        ("web", 2),
    ]
    off = PlacementTrace(limit=0)
    schedule(cluster(), lrps, trace=off)
    assert off.explanations() == []


def test_decided_by_names_the_first_difference():
    assert decided_by([(0.5, 0)]) == "only candidate"
    assert decided_by([(0.5, 0), (0.6, 0)]) == "score"
    assert decided_by([(0.5, 0), (0.5, 1)]) == "zone order"
    assert decided_by([(0.5, 0), (0.5, 0)]) == "cell index"
    assert decided_by(None) == "strategy"
