from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.engine_workloads import make_cell, workloads

from ..state import AuctionState
from ..types import DeviceRequest, LRPStart, SchedulerConfig, TaskStart, Volume, VolumeRequest
from .base import Picker
from .fast_index import FeasibleIndex


def positions_by_scan(state, item):
    return [s.pos for s in Picker(state).feasible_slots(item)]


def test_follows_reservations():
    cells = [make_cell("a", memory_mb=600, ingress_ips=["ip"], devices={"gpu": 1}), make_cell("b")]
    state = AuctionState(cells, SchedulerConfig())
    index = FeasibleIndex(state)
    item = LRPStart("web", 0, 500, 1, ingress_ip=True)
    assert list(index.feasible(item)) == [0]
    state.reserve_lrp(state.slots[0], item)
    assert list(index.feasible(item)) == []
    assert list(index.feasible(LRPStart("web", 1, 100, 1))) == [0, 1]
    gpu = LRPStart("gpu", 0, 10, 1, devices=(DeviceRequest("gpu"),))
    assert list(index.feasible(gpu)) == [0]
    state.reserve_lrp(state.slots[0], gpu)
    assert list(index.feasible(LRPStart("gpu", 1, 10, 1, devices=(DeviceRequest("gpu"),)))) == []


def test_volumes_are_checked_on_the_survivors():
    cells = [make_cell("a", volumes=[Volume("v", 100)]), make_cell("b", volumes=[Volume("v", 5000)])]
    state = AuctionState(cells, SchedulerConfig())
    item = LRPStart("db", 0, 1, 1, volumes=(VolumeRequest("data", 1000),))
    assert list(FeasibleIndex(state).feasible(item)) == [1]


def test_extra_mask_and_label_cache():
    cells = [make_cell("a", labels={"k": "v"}), make_cell("b", labels={"k": "v"}), make_cell("c")]
    state = AuctionState(cells, SchedulerConfig())
    index = FeasibleIndex(state)
    item = LRPStart("web", 0, 1, 1, labels_match="k=v")
    assert list(index.feasible(item)) == [0, 1]
    assert list(index.feasible(item, index.labels("k=v") & False)) == []
    assert index.labels("k=v") is index.labels("k=v")


@settings(max_examples=30, deadline=None)
@given(workloads(service=True), st.data())
def test_same_cells_as_the_filter_chain_as_the_batch_fills(workload, data):
    state = AuctionState(workload.cells, SchedulerConfig())
    index = FeasibleIndex(state)
    for item in [*workload.lrps, *workload.tasks]:
        expected = positions_by_scan(state, item)
        assert list(index.feasible(item)) == expected
        if expected:
            slot = state.slots[data.draw(st.sampled_from(expected))]
            if isinstance(item, TaskStart):
                state.reserve_task(slot, item)
            else:
                state.reserve_lrp(slot, item)
