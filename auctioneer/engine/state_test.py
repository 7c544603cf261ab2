"""The Diego strategy's zone order: counts of the process first, then room for the item."""

from auctioneer.engine.state import AuctionState
from auctioneer.engine.types import Cell, LRPStart, Resources, RunningInstance, SchedulerConfig


def cell(cell_id: str, zone: str, free_containers: int, prefill=()) -> Cell:
    return Cell(cell_id, zone, Resources(1000, 1000, 10), Resources(1000, 1000, free_containers),
                lrps=list(prefill))


def state_for(cells, batch) -> AuctionState:
    state = AuctionState(cells, SchedulerConfig())
    state.note_batch(batch)
    return state


def test_equal_counts_go_roomiest_first_and_equal_room_stays_one_group():
    cells = [cell("a", "za", 4), cell("b", "zb", 7), cell("c", "zc", 7)]
    batch = [LRPStart("web", i, 10, 10) for i in range(3)]  # a share of 1 in each zone
    state = state_for(cells, batch)
    # room = free containers less the one web still owes each zone: 3, 6, 6
    assert [state.zone_room(z, 10, 10) for z in ("za", "zb", "zc")] == [3, 6, 6]
    assert state.zone_groups_by_room("web", 10, 10) == [["zb", "zc"], ["za"]]
    state.reserve_lrp(state.slots[1], batch[0])  # web/0 on zb: one owed instance placed, room unchanged
    assert [state.zone_room(z, 10, 10) for z in ("za", "zb", "zc")] == [3, 6, 6]
    assert state.zone_groups_by_room("web", 10, 10) == [["zc"], ["za"], ["zb"]]  # counts come first


def test_memory_can_be_what_limits_the_room():
    cells = [Cell("a", "za", Resources(1000, 1000, 10), Resources(100, 1000, 10)),
             Cell("b", "zb", Resources(1000, 1000, 10), Resources(900, 1000, 5))]
    state = state_for(cells, [LRPStart("web", i, 50, 1) for i in range(2)])
    # za: min(10 - 1, (100 - 50) // 50) = 1; zb: min(5 - 1, (900 - 50) // 50) = 4
    assert state.zone_groups_by_room("web", 50, 1) == [["zb"], ["za"]]


def test_a_process_with_fewer_instances_than_zones_keeps_diego_s_groups():
    cells = [cell("a", "za", 4), cell("b", "zb", 7), cell("c", "zc", 7, [RunningInstance("old", 0)])]
    batch = [LRPStart("solo", 0, 10, 10), LRPStart("pair", 0, 10, 10), LRPStart("pair", 1, 10, 10)]
    state = state_for(cells, batch)
    assert state.zone_groups_by_room("solo", 10, 10) == [["za", "zb", "zc"]]  # lowest score decides
    assert state.zone_groups_by_room("pair", 10, 10) == state.zone_groups("pair")
    # "old" has 1 on the cells and none in the batch: no share either
    assert state.zone_groups_by_room("old", 10, 10) == [["za", "zb"], ["zc"]]
