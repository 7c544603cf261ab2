import pytest

from placement.testing import holding, lrp_start
from tests.support.engine_workloads import make_cell

from ..cell_offer import CellOffer, HostMetrics
from ..scoring import lrp_score
from ..slot import CellSlot
from ..strategies.loadmark import load_mark
from ..types import LoadMarkConfig, SchedulerConfig
from ..work import LRPStart
from . import STRATEGY_MARGIN, Placed, RebalanceConfig, plan_moves

SIDE = lrp_start("side", 0, 1, 1)  # pinned, tiny: fills a cell's containers, not its memory


def web_beside(
    side: int, strategy: str | None = None, **fields
) -> tuple[list[CellOffer], list[Placed], dict]:
    """web/0 on a0 beside `side` pinned instances (of 10 containers), a1 empty, one zone."""
    requests = {"web": lrp_start("web", 0, 256, 1, strategy=strategy, **fields), "side": SIDE}
    placed = [Placed("web", 0, "a0")] + [Placed("side", i, "a0") for i in range(side)]
    cells = holding([make_cell("a0", "a"), make_cell("a1", "a")], placed, requests)
    return cells, placed, requests


def diego_score(cell: CellOffer, item: LRPStart) -> float:
    config = SchedulerConfig()
    slot = CellSlot(0, 0, cell)
    return lrp_score(slot, item.ask.memory_mb, item.ask.disk_mb, item.process_guid,
                     config.starting_container_weight, config.bin_pack_first_fit_weight)


def test_an_instance_moves_when_another_cell_beats_its_own_by_more_than_the_margin():
    cells, placed, requests = web_beside(7)
    moves = plan_moves(cells, placed, requests, pinned_apps={"side"})
    assert [(m.index, m.from_cell, m.to_cell, m.reason) for m in moves] == [(0, "a0", "a1", STRATEGY_MARGIN)]
    # like with like: a0 scored as the auction would score it without web/0, a1 as it is
    without, _, _ = web_beside(7)
    web = requests["web"]
    own = diego_score(holding([make_cell("a0", "a")], placed[1:], requests)[0], web)
    best = diego_score(without[1], web)
    assert moves[0].gain == pytest.approx(own - best) and own - best > 0.2
    assert moves[0].detail == f"diego score {own:.3f} on a0, {best:.3f} on a1"


def test_within_the_margin_nothing_moves_and_the_margin_is_a_setting():
    cells, placed, requests = web_beside(5)  # a0 about 0.17 worse than a1
    assert plan_moves(cells, placed, requests, pinned_apps={"side"}) == []
    cells, placed, requests = web_beside(5)
    moves = plan_moves(
        cells, placed, requests, pinned_apps={"side"}, rebalance=RebalanceConfig(strategy_margin=0.1)
    )
    assert [m.reason for m in moves] == [STRATEGY_MARGIN]


def test_a_move_is_not_undone_by_the_next_plan():
    cells, placed, requests = web_beside(7)
    moved = plan_moves(cells, placed, requests, pinned_apps={"side"})[0]
    placed = [Placed("web", 0, moved.to_cell)] + placed[1:]
    cells = holding([make_cell("a0", "a"), make_cell("a1", "a")], placed, requests)
    assert plan_moves(cells, placed, requests, pinned_apps={"side"}) == []


def test_two_instances_on_one_cell_part_as_the_auction_would_part_them():
    requests = {"web": lrp_start("web", 0, 256, 1)}
    placed = [Placed("web", i, "a0") for i in range(2)]
    cells = holding([make_cell("a0", "a"), make_cell("a1", "a")], placed, requests)
    moves = plan_moves(cells, placed, requests)
    assert [(m.index, m.to_cell, m.reason) for m in moves] == [(1, "a1", STRATEGY_MARGIN)]
    assert moves[0].gain == pytest.approx(1000.0, abs=0.1)  # the score's same-process term


@pytest.mark.parametrize("strategy", ["dea", "service", "binpack", "random"])
def test_strategies_without_a_comparable_score_never_move_by_a_margin(strategy):
    cells, placed, requests = web_beside(9, strategy)
    assert plan_moves(cells, placed, requests, pinned_apps={"side"}) == []


def test_the_margin_never_undoes_the_zone_spread():
    # web 1/1 over two zones; its b0 cell is crowded, but the only better cell is in zone a: moving there
    # would leave a zone empty (2/0)
    requests = {"web": lrp_start("web", 0, 256, 1), "side": SIDE}
    placed = [Placed("web", 0, "a0"), Placed("web", 1, "b0")] + [Placed("side", i, "b0") for i in range(8)]
    cells = holding([make_cell("a0", "a"), make_cell("a1", "a"), make_cell("b0", "b")], placed, requests)
    assert plan_moves(cells, placed, requests, pinned_apps={"side"}) == []


def test_the_margin_never_takes_a_cell_above_the_load_tolerance():
    # a1 beats web's crowded a0 by the margin, but holds the most memory; a2 (one container) lowers the
    # mean: web on a1 ends 0.136 against a mean of 0.046
    requests = {"web": lrp_start("web", 0, 256, 1), "side": SIDE, "big": lrp_start("big", 0, 300, 1)}
    placed = [Placed("web", 0, "a0")] + [Placed("side", i, "a0") for i in range(8)] + [Placed("big", 0, "a1")]

    def cells() -> list[CellOffer]:
        return holding([make_cell("a0", "a"), make_cell("a1", "a"), make_cell("a2", "a", containers=1)],
                       placed, requests)

    strict = RebalanceConfig(load_tolerance=0.05)
    assert plan_moves(cells(), placed, requests, pinned_apps={"side", "big"}, rebalance=strict) == []
    moves = plan_moves(cells(), placed, requests, pinned_apps={"side", "big"})  # the default 0.10
    assert [(m.to_cell, m.reason) for m in moves] == [("a1", STRATEGY_MARGIN)]


def test_loadmark_apps_move_by_a_margin_of_load_mark_points():
    # marks 25, 25 and 0: a0 is within the load-mark tolerance of the mean (16.7 + 10), yet a2 beats it
    # by more than 20 points (0.2 of the mark's unit)
    swap = HostMetrics(swap_used_mb=25, swap_total_mb=100)
    requests = {"lm": lrp_start("lm", 0, 64, 1, strategy="loadmark")}
    placed = [Placed("lm", 0, "a0")]
    cells = holding(
        [make_cell("a0", "a", host=swap), make_cell("a1", "a", host=swap), make_cell("a2", "a")],
        placed,
        requests,
    )
    marks = [load_mark(CellSlot(i, i, c), LoadMarkConfig()) for i, c in enumerate(cells)]
    moves = plan_moves(cells, placed, requests)
    assert [(m.to_cell, m.reason) for m in moves] == [("a2", STRATEGY_MARGIN)]
    without_lm = 0.2 * 64 / 4096 * 100 + 0.5 * 1 / 8192 * 100  # what lm/0 adds to a0's mark
    assert moves[0].gain == pytest.approx(marks[0] - without_lm - marks[2])


def objective_app_beside_a_disk_hog() -> tuple[list[CellOffer], list[Placed], dict[str, LRPStart]]:
    """An objective app valuing free disk on a0, whose disk a pinned app mostly takes; a1 is empty."""
    requests = {
        "obj": lrp_start("obj", 0, 64, 1, strategy="objective", total_instances=1,
                        objective="r.AvailableDiskMB / r.TotalDiskMB"),
        "disk": lrp_start("disk", 0, 1, 4096),
    }
    placed = [Placed("obj", 0, "a0"), Placed("disk", 0, "a0")]
    cells = holding([make_cell("a0", "a"), make_cell("a1", "a")], placed, requests)
    return cells, placed, requests


def test_objective_apps_move_by_a_margin_of_their_objective():
    cells, placed, requests = objective_app_beside_a_disk_hog()
    moves = plan_moves(cells, placed, requests, pinned_apps={"disk"})
    assert [(m.to_cell, m.reason) for m in moves] == [("a1", STRATEGY_MARGIN)]
    assert moves[0].gain == pytest.approx(0.5)  # free disk before placing: 0.5 on a0 (lifted), 1 on a1
    assert moves[0].detail == "objective score 0.500 on a0, 1.000 on a1"  # as the objective states it


def test_objective_scores_stop_at_their_budget():
    cells, placed, requests = objective_app_beside_a_disk_hog()
    budget = RebalanceConfig(instance_score_budget=1)  # fewer than the app's two candidate cells
    assert plan_moves(cells, placed, requests, pinned_apps={"disk"}, rebalance=budget) == []
