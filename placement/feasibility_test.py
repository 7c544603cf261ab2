"""The filters' vectorised form (over the auction's columns) keeps exactly the cells their scalar form
keeps, as the batch fills."""

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.testing import lrp_start
from tests.support.engine_workloads import make_cell, workloads

from .ask import DeviceRequest, VolumeRequest
from .cell_offer import Volume
from .filters import LABELS, feasible_positions, filter_chain
from .state import AuctionState
from .strategies.base import Picker
from .types import SchedulerConfig
from .work import TaskStart


def positions_by_scan(state, item):
    return [s.pos for s in Picker(state).feasible_slots(item)]


def vectorised(state, item):
    return list(feasible_positions(state.columns, item, filter_chain(item)))


def test_follows_reservations():
    cells = [make_cell("a", memory_mb=600, ingress_ips=["ip"], devices={"gpu": 1}), make_cell("b")]
    state = AuctionState(cells, SchedulerConfig())
    item = lrp_start("web", 0, 500, 1, ingress_ip=True)
    assert vectorised(state, item) == [0]
    state.reserve_lrp(state.slots[0], item)
    assert vectorised(state, item) == []
    assert vectorised(state, lrp_start("web", 1, 100, 1)) == [0, 1]
    gpu = lrp_start("gpu", 0, 10, 1, devices=(DeviceRequest("gpu"),))
    assert vectorised(state, gpu) == [0]
    state.reserve_lrp(state.slots[0], gpu)
    assert vectorised(state, lrp_start("gpu", 1, 10, 1, devices=(DeviceRequest("gpu"),))) == []


def test_volumes_are_planned_on_the_cells_that_have_volumes():
    cells = [
        make_cell("a", volumes=[Volume("v", 100)]),
        make_cell("b", volumes=[Volume("v", 5000)]),
        make_cell("c"),
    ]
    state = AuctionState(cells, SchedulerConfig())
    item = lrp_start("db", 0, 1, 1, volumes=(VolumeRequest("data", 1000),))
    assert vectorised(state, item) == [1]


def test_label_matches_are_cached_per_expression_and_computed_once_per_class_of_cells():
    cells = [make_cell("a", labels={"k": "v"}), make_cell("b", labels={"k": "v"}), make_cell("c")]
    state = AuctionState(cells, SchedulerConfig())
    assert vectorised(state, lrp_start("web", 0, 1, 1, labels_match="k=v")) == [0, 1]
    assert LABELS.matching(state.columns, "k=v") is LABELS.matching(state.columns, "k=v")
    assert len(state.columns.classes(LABELS).representatives) == 2


@settings(max_examples=30, deadline=None)
@given(workloads(service=True), st.data())
def test_same_cells_as_the_filter_chain_as_the_batch_fills(workload, data):
    state = AuctionState(workload.cells, SchedulerConfig())
    for item in [*workload.lrps, *workload.tasks]:
        expected = positions_by_scan(state, item)
        assert vectorised(state, item) == expected
        if expected:
            slot = state.slots[data.draw(st.sampled_from(expected))]
            if isinstance(item, TaskStart):
                state.reserve_task(slot, item)
            else:
                state.reserve_lrp(slot, item)
