"""The Diego strategy's zone order: counts of the process first, then room for the item."""

from placement.cell_offer import CellOffer, Resources, RunningInstance
from placement.state import AuctionState
from placement.strategies.zone_room import ZoneRoom
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig


def cell(cell_id: str, zone: str, free_containers: int, prefill=()) -> CellOffer:
    return CellOffer(cell_id, zone, Resources(1000, 1000, 10), Resources(1000, 1000, free_containers),
                lrps=list(prefill))


def room_for(cells, batch) -> tuple[AuctionState, ZoneRoom]:
    state = AuctionState(cells, SchedulerConfig())
    state.note_batch(batch)  # as the scheduler does before making the pickers
    return state, ZoneRoom(state, batch)


def test_equal_counts_go_roomiest_first_and_equal_room_stays_one_group():
    cells = [cell("a", "za", 4), cell("b", "zb", 7), cell("c", "zc", 7)]
    batch = [lrp_start("web", i, 10, 10) for i in range(3)]  # a share of 1 in each zone
    state, room = room_for(cells, batch)
    # room = free containers less the one web still owes each zone: 3, 6, 6
    assert [room.room(z, 10, 10) for z in ("za", "zb", "zc")] == [3, 6, 6]
    assert room.zone_groups("web", 10, 10) == [["zb", "zc"], ["za"]]
    state.reserve_lrp(state.slots[1], batch[0])  # web/0 on zb: one owed instance placed, room unchanged
    assert [room.room(z, 10, 10) for z in ("za", "zb", "zc")] == [3, 6, 6]
    assert room.zone_groups("web", 10, 10) == [["zc"], ["za"], ["zb"]]  # counts come first


def test_work_nobody_owed_takes_room_whoever_places_it():
    cells = [cell("a", "za", 8), cell("b", "zb", 8)]
    batch = [lrp_start("web", i, 10, 10) for i in range(2)] + [
        lrp_start("solo", 0, 10, 10),
        task_start("t", 10, 10),
    ]
    state, room = room_for(cells, batch)
    assert [room.room(z, 10, 10) for z in ("za", "zb")] == [7, 7]
    state.reserve_lrp(state.slots[0], batch[2])  # solo has no share: its instance takes room
    state.reserve_task(state.slots[1], batch[3])
    state.reserve_lrp(state.slots[1], batch[0])  # web's share in zb: set aside already
    assert [room.room(z, 10, 10) for z in ("za", "zb")] == [6, 6]
    state.reserve_lrp(state.slots[1], batch[1])  # web's second in zb is beyond its share there
    assert [room.room(z, 10, 10) for z in ("za", "zb")] == [6, 5]


def test_memory_can_be_what_limits_the_room():
    cells = [CellOffer("a", "za", Resources(1000, 1000, 10), Resources(100, 1000, 10)),
             CellOffer("b", "zb", Resources(1000, 1000, 10), Resources(900, 1000, 5))]
    _, room = room_for(cells, [lrp_start("web", i, 50, 1) for i in range(2)])
    # za: min(10 - 1, (100 - 50) // 50) = 1; zb: min(5 - 1, (900 - 50) // 50) = 4
    assert room.zone_groups("web", 50, 1) == [["zb"], ["za"]]


def test_a_process_with_fewer_instances_than_zones_keeps_diego_s_groups():
    cells = [cell("a", "za", 4), cell("b", "zb", 7), cell("c", "zc", 7, [RunningInstance("old", 0)])]
    batch = [lrp_start("solo", 0, 10, 10), lrp_start("pair", 0, 10, 10), lrp_start("pair", 1, 10, 10)]
    state, room = room_for(cells, batch)
    assert room.zone_groups("solo", 10, 10) == [["za", "zb", "zc"]]  # lowest score decides
    assert room.zone_groups("pair", 10, 10) == state.zone_groups("pair")
    # "old" has 1 on the cells and none in the batch: no share either
    assert room.zone_groups("old", 10, 10) == [["za", "zb"], ["zc"]]


def test_instances_already_on_the_cells_count_towards_the_share():
    # web has 2 in za; with 4 more in the batch it has 6 = a share of 2 per zone, owed 2 in zb and zc
    cells = [cell("a", "za", 8, [RunningInstance("web", 0), RunningInstance("web", 1)]),
             cell("b", "zb", 10), cell("c", "zc", 10)]
    _, room = room_for(cells, [lrp_start("web", i, 10, 10) for i in range(2, 6)])
    assert [room.room(z, 10, 10) for z in ("za", "zb", "zc")] == [8, 8, 8]
