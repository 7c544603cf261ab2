import pytest

from placement.testing import holding, lrp_start
from tests.support.engine_workloads import make_cell

from ..cell_offer import CellOffer, HostMetrics
from ..slot import CellSlot
from ..strategies.loadmark import load_mark
from ..types import LoadMarkConfig
from . import CELL_LOAD, LOAD_MARK, Placed, plan_moves

LM = lrp_start("lm", 0, 256, 16, strategy="loadmark")


def swapping(percent: float) -> HostMetrics:
    return HostMetrics(swap_used_mb=percent, swap_total_mb=100)


def mark(cell: CellOffer) -> float:
    return load_mark(CellSlot(0, 0, cell), LoadMarkConfig())


def test_a_cell_far_above_the_mean_mark_sheds_to_the_cell_the_strategy_prefers():
    # marks about 45, 20 and 10 (mean 25): a0 is more than 10 points above; a2 is the least loaded but
    # holds an instance of lm already, so the strategy (and the plan) prefers a1
    placed = [Placed("lm", 0, "a0"), Placed("lm", 1, "a2")]
    cells = holding(
        [make_cell("a0", "a", host=swapping(45)), make_cell("a1", "a", host=swapping(20)),
         make_cell("a2", "a", host=swapping(10))],
        placed,
        {"lm": LM},
    )
    before = mark(cells[0])
    moves = plan_moves(cells, placed, {"lm": LM})
    assert [(m.index, m.from_cell, m.to_cell, m.reason) for m in moves] == [(0, "a0", "a1", LOAD_MARK)]
    after = mark(holding([make_cell("a0", "a", host=swapping(45))], [], {})[0])
    assert moves[0].gain == pytest.approx(before - after)  # what lm/0 added to a0's mark
    assert moves[0].detail.startswith(f"a0 load mark {before:.1f} above the mean")


def test_a_cell_above_a_critical_mark_never_takes_an_instance():
    # a1's host uses 85 % of its memory (critical: 80 %) though its mark (17) is the lowest; a2 would
    # cross the critical memory mark with the instance (79 % + 6.25 %); a3 takes it
    placed = [Placed("lm", 0, "a0")]
    cells = holding(
        [
            make_cell("a0", "a", host=swapping(45)),
            make_cell("a1", "a", host=HostMetrics(mem_used_mb=0.85 * 4096)),
            make_cell("a2", "a", host=HostMetrics(mem_used_mb=0.79 * 4096)),
            make_cell("a3", "a", host=swapping(20)),
        ],
        placed,
        {"lm": LM},
    )
    assert [mark(c) for c in cells[1:3]] < [mark(cells[3])] * 2
    moves = plan_moves(cells, placed, {"lm": LM})
    assert [(m.to_cell, m.reason) for m in moves] == [("a3", LOAD_MARK)]


def test_a_cell_sheds_no_more_than_its_targets_take_within_the_tolerance():
    # a0's swap keeps it far above the mean whatever leaves it (60 + 2.6 a 1 GiB instance). a1 (45) takes
    # instances while its mark stays within 10 points of the mean (46.9): four; a2 is full (a pinned app)
    big = lrp_start("lm", 0, 1024, 16, strategy="loadmark")
    requests = {"lm": big, "fill": lrp_start("fill", 0, 8192, 16)}
    placed = [Placed("lm", i, "a0") for i in range(6)] + [Placed("fill", 0, "a2")]

    def cells() -> list[CellOffer]:
        return holding(
            [make_cell(c, "a", memory_mb=8192, containers=20, host=host)
             for c, host in (("a0", swapping(60)), ("a1", swapping(45)), ("a2", None))],
            placed,
            requests,
        )

    marks = [mark(c) for c in cells()]
    mean = sum(marks) / 3
    moves = plan_moves(cells(), placed, requests, pinned_apps={"fill"})
    assert [(m.to_cell, m.reason) for m in moves] == [("a1", LOAD_MARK)] * 4
    a1 = holding([make_cell("a1", "a", memory_mb=8192, containers=20, host=swapping(45))],
                 [Placed("lm", i, "a1") for i in range(4)], requests)[0]
    assert mark(a1) <= mean + 10 < mark(a1) + (mark(a1) - marks[1]) / 4  # a fifth would go beyond


def test_the_memory_rule_leaves_loadmark_apps_to_the_load_mark():
    # a0 holds half its memory, a1 nothing: for the memory rule a0 is 0.25 above the mean; its load mark
    # (0.2 of the memory fraction, ×100) only 5 points above: within the tolerance
    for strategy, expected in (("loadmark", []), (None, [CELL_LOAD])):
        item = lrp_start("app", 0, 256, 1, strategy=strategy)
        placed = [Placed("app", i, "a0") for i in range(8)]
        cells = holding([make_cell("a0", "a"), make_cell("a1", "a")], placed, {"app": item})
        assert [m.reason for m in plan_moves(cells, placed, {"app": item})][:1] == expected, strategy
