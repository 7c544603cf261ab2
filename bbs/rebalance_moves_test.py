from placement.rebalance import Placed

from .actual_set import ActualSet
from .rebalance_moves import abandon_move, move_outcome, pinned, placement_request, planner_cells, start_move
from .records import (
    CLAIMED,
    EVACUATING,
    KEEP_REPLICAS,
    ORDINARY,
    RUNNING,
    UNCLAIMED,
    ActualRecord,
    CellRecord,
    DesiredRecord,
)


def actual(
    index: int, state: str = RUNNING, cell: str = "c1", presence: str = ORDINARY, **more
) -> ActualRecord:
    guid = f"{cell}-{index}" if state in (CLAIMED, RUNNING) else ""
    return ActualRecord(
        "web", index, presence, state=state, cell_id=cell if guid else "", instance_guid=guid, **more
    )


def desired(**definition) -> DesiredRecord:
    return DesiredRecord("web", "d", 3, {"memory_mb": 256, "disk_mb": 64, **definition}, 0.0, "e")


def cell(cell_id: str, zone: str = "z1", **flags) -> CellRecord:
    total = {"memory_mb": 1024, "disk_mb": 4096, "containers": 10}
    return CellRecord(cell_id, {"zone": zone, "total": total, "placement_tags": ["t"]}, 1e12, **flags)


def test_a_move_starts_only_on_a_lone_running_instance_and_completes_once_the_new_one_runs() -> None:
    rows = ActualSet([actual(0, crash_count=2), actual(1, CLAIMED)])
    assert not start_move(rows, "web", 1, "c1", 1.0), "a starting instance does not move"
    assert not start_move(rows, "web", 0, "c2", 1.0), "nor one that runs elsewhere than planned"
    assert start_move(rows, "web", 0, "c1", 1.0)
    assert rows.get("web", 0, EVACUATING).cell_id == "c1"
    assert (rows.get("web", 0).state, rows.get("web", 0).crash_count) == (UNCLAIMED, 2)
    assert not start_move(rows, "web", 0, "c1", 1.0), "one move per index"
    assert move_outcome(rows, "web", 0, 2) == "moving"
    rows.remove(rows.get("web", 0, EVACUATING))  # the lifecycle stops it once the new one runs
    rows.put(actual(0, cell="c2", crash_count=2))
    assert move_outcome(rows, "web", 0, 2) == "completed"


def test_abandoning_stops_the_claimed_replacement_and_keeps_the_old_instance() -> None:
    rows = ActualSet([actual(0)])
    start_move(rows, "web", 0, "c1", 1.0)
    rows.put(actual(0, cell="c2", crash_count=1))  # claimed, ran, crashed once (restarted at once)
    assert move_outcome(rows, "web", 0, 0) == "failed"
    stops = abandon_move(rows, "web", 0)
    assert [(s.cell_id, s.instance_guid) for s in stops] == [("c2", "c2-0")]
    assert [(r.presence, r.cell_id) for r in rows.at_index("web", 0)] == [(ORDINARY, "c1")]
    assert abandon_move(rows, "web", 0) == [], "nothing left to abandon"


def test_the_old_instance_gone_without_a_running_replacement_is_lost() -> None:
    rows = ActualSet([actual(0)])
    start_move(rows, "web", 0, "c1", 1.0)
    rows.remove(rows.get("web", 0, EVACUATING))
    assert move_outcome(rows, "web", 0, 0) == "lost"


def test_the_planner_sees_schedulable_cells_with_what_they_hold_and_the_movable_instances() -> None:
    requests = {"web": placement_request(desired(placement_tags=["t"], labels_match="disk=ssd"))}
    ask = requests["web"].ask
    assert (ask.memory_mb, ask.placement_tags, ask.labels_match) == (
        256,
        ("t",),
        "disk=ssd",
    )
    rows = [
        actual(0),
        actual(1, presence=EVACUATING),
        actual(1, UNCLAIMED),
        actual(2, cell="c3"),
        actual(3, CLAIMED),
    ]
    cells, placed = planner_cells(
        [cell("c1"), cell("c2", cordoned=True), cell("c3", draining=True)], rows, requests
    )
    assert [c.cell_id for c in cells] == ["c1"], "cordoned and draining cells are neither source nor target"
    [c1] = cells
    # three hold room (the evacuating one too), two count as the app's: the running one and the starting one
    assert (c1.available.memory_mb, c1.available.containers, c1.lrp_counts) == (1024 - 3 * 256, 7, {"web": 2})
    assert c1.placement_tags == frozenset({"t"})
    assert placed == [Placed("web", 0, "c1")], "only lone RUNNING ORDINARY instances move"


def test_keep_replicas_apps_and_those_asking_for_a_cells_volumes_are_pinned() -> None:
    def pinned_app(d: DesiredRecord) -> bool:
        return pinned(d, placement_request(d))

    assert not pinned_app(desired())
    assert pinned_app(DesiredRecord("web", "d", 3, {}, 0.0, "e", on_cell_loss=KEEP_REPLICAS))
    assert pinned_app(desired(volumes=[{"name": "data", "size_mb": 10}]))
