"""A cell's holdings in the counts form (what reps report) schedule exactly like the full form."""

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.testing import lrp_start
from tests.support.engine_workloads import NOW, PROCESSES, Workload, make_cell, workloads

from .ask import STRATEGIES
from .cell_offer import CellOffer, RunningInstance
from .scheduler import schedule
from .slot import CellSlot
from .state import AuctionState
from .types import SchedulerConfig


def counts_form(cell: CellOffer) -> CellOffer:
    """The same cell as a rep reports it: instances per process guid, no instance entries."""
    ordinary = Counter(i.process_guid for i in cell.lrps if not i.delayed_shutdown)
    stopping = Counter(i.process_guid for i in cell.lrps if i.delayed_shutdown)
    return replace(cell, lrps=[], lrp_counts=dict(ordinary), stopping_counts=dict(stopping))


def test_a_slot_adds_up_both_forms_and_leaves_the_cells_counts_alone():
    cell = make_cell("c", lrps=[RunningInstance("web", 0), RunningInstance("old", 1, delayed_shutdown=True)],
                     lrp_counts={"web": 2, "api": 1}, stopping_counts={"old": 3})
    slot = CellSlot(0, 0, cell)
    assert slot.proc_counts == {"web": 3, "api": 1}
    assert slot.delayed_counts == {"old": 4}

    state = AuctionState([cell], SchedulerConfig())
    state.reserve_lrp(state.slots[0], lrp_start("web", 5, 1, 1))
    assert state.slots[0].proc_counts["web"] == 4
    assert cell.lrp_counts == {"web": 2, "api": 1}  # the caller's cell is not changed


def test_counts_spread_an_app_like_instances_do():
    cells = [make_cell(f"c{i}", zone=f"z{i % 2}") for i in range(4)]
    counted = [replace(cells[0], lrp_counts={"web": 2}), replace(cells[1], lrp_counts={"web": 1}), *cells[2:]]
    full = [replace(cells[0], lrps=[RunningInstance("web", 0), RunningInstance("web", 1)]),
            replace(cells[1], lrps=[RunningInstance("web", 2)]), *cells[2:]]
    more = [lrp_start("web", i, 64, 64) for i in range(3, 6)]

    result = schedule(counted, more)

    assert result == schedule(full, more)
    # z1 holds fewer (1 against 2): its empty cell first; then the zones are even and z0's empty cell
    # wins; then z1 again, where c1 (one held) has no new start and so beats c3
    assert [a.cell_id for a in result.lrp_assignments] == ["c3", "c2", "c1"]


@settings(max_examples=40, deadline=None)
@given(
    workloads(service=True, mixed=True), st.sampled_from(STRATEGIES), st.sampled_from(["fast", "reference"])
)
def test_every_strategy_places_the_same_from_the_counts_form(workload: Workload, strategy: str, engine: str):
    config = SchedulerConfig(strategy=strategy, engine=engine, seed=workload.seed, now=NOW)
    full = schedule(workload.cells, workload.lrps, workload.tasks, config)
    counted = schedule([counts_form(c) for c in workload.cells], workload.lrps, workload.tasks, config)
    assert counted == full


@settings(max_examples=60, deadline=None)
@given(workloads(), st.data())
def test_indexing_only_the_batchs_processes_answers_like_indexing_every_one(workload: Workload, data):
    cells = [counts_form(c) for c in workload.cells]
    asked = data.draw(st.sets(st.sampled_from([*PROCESSES, "never-held"])))
    every = AuctionState(cells, SchedulerConfig())
    some = AuctionState(cells, SchedulerConfig(), asked)
    for item in workload.lrps:  # the same reservations on both, whether their process was asked for or not
        pos = data.draw(st.integers(0, len(cells) - 1))
        every.reserve_lrp(every.slots[pos], item)
        some.reserve_lrp(some.slots[pos], item)
    for pg in [*PROCESSES, "never-held"]:
        assert some.holding(pg) == every.holding(pg) == {
            s.pos: s.proc_counts[pg] for s in every.slots if pg in s.proc_counts
        }
        assert some.zone_instances(pg) == every.zone_instances(pg)
    assert sorted(some.processes()) == sorted(every.processes())
