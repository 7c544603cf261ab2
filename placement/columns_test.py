"""The auction's columns follow every reservation, derived columns too, and static filters are asked once
per class of equivalent cells."""

from placement.testing import lrp_start, task_start
from tests.support.engine_workloads import make_cell

from .ask import DeviceRequest
from .filters import LABELS, STACK
from .state import AuctionState
from .types import SchedulerConfig


def test_reservations_reach_the_columns_by_the_time_they_are_read():
    state = AuctionState(
        [make_cell("a", devices={"gpu": 2}, ingress_ips=["ip"]), make_cell("b")], SchedulerConfig()
    )
    columns = state.columns
    before = columns.avail_m.tolist()
    gpus = columns.devices("gpu")
    instances = columns.derived("instances", lambda slot: sum(slot.proc_counts.values()), int)
    state.reserve_lrp(
        state.slots[0], lrp_start("web", 0, 100, 10, ingress_ip=True, devices=(DeviceRequest("gpu"),))
    )
    state.reserve_task(state.slots[1], task_start("t", 50, 5))
    assert columns.avail_m.tolist() == [before[0] - 100, before[1] - 50]
    assert columns.avail_c.tolist() == [s.avail_c for s in state.slots]
    assert columns.ingress_free.tolist() == [0, 0]
    assert gpus.tolist() == [1, 0]  # the same array, brought up to date
    assert columns.derived("instances", lambda slot: -1, int).tolist() == [1, 0]
    assert instances.tolist() == [1, 0]


def test_static_filters_run_once_per_class_of_cells_and_per_request(monkeypatch):
    cells = [make_cell(f"c{i}", labels={"disk": "ssd" if i % 2 else "hdd"}) for i in range(6)]
    state = AuctionState(cells, SchedulerConfig())
    columns = state.columns
    asked = []
    real = LABELS.rejects

    def counting(slot, item):
        asked.append(slot.cell_id)
        return real(slot, item)

    monkeypatch.setattr(LABELS, "rejects", counting)
    item = lrp_start("db", 0, 1, 1, labels_match="disk=ssd")
    assert columns.static_mask(LABELS, item).tolist() == [False, True] * 3
    assert columns.static_mask(LABELS, lrp_start("db", 1, 1, 1, labels_match="disk=ssd")) is \
        columns.static_mask(LABELS, item)
    assert asked == ["c0", "c1"]  # one representative per class, once
    assert len(columns.classes(STACK).representatives) == 1
