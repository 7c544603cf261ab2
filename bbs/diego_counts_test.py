"""Diego's counts as a convergence pass makes them: through the pass's own decision function."""

from __future__ import annotations

import dataclasses

from bbs.convergence import ConvergenceConfig
from bbs.diego_counts import PassCounts
from bbs.operations.convergence import _decide
from bbs.placements import PlacementLog
from bbs.records import (
    CLAIMED,
    COMPLETED,
    CRASHED,
    RUNNING,
    TASK_RUNNING,
    ActualRecord,
    CellRecord,
    DesiredSize,
    TaskRecord,
    unclaimed,
)

NOW = 10.0


def on_cell(process_guid: str, index: int, cell: str, state: str = RUNNING, **fields) -> ActualRecord:
    return dataclasses.replace(
        unclaimed(process_guid, index, "d", 0.0),
        state=state,
        cell_id=cell,
        instance_guid=f"{process_guid}-{index}",
        **fields,
    )


def task(guid: str, state: str, **fields) -> TaskRecord:
    return TaskRecord(
        guid, "d", {"command": ["x"]}, state=state, created_at=NOW, updated_at=NOW, auctioned_at=NOW, **fields
    )


def test_a_pass_counts_what_it_leaves_behind() -> None:
    desired = [DesiredSize("web", "d", 4), DesiredSize("api", "d", 1)]
    cells = {
        "c1": CellRecord("c1", {"rep_url": "http://c1", "zone": "z"}, 1000.0, False),
        "c2": CellRecord("c2", {"rep_url": "http://c2", "zone": "z"}, 5.0, False),  # presence expired
    }
    snapshot = [
        on_cell("web", 0, "c1"),
        on_cell("web", 1, "c1", CLAIMED),
        on_cell("web", 2, "c2"),  # becomes SUSPECT, with an UNCLAIMED replacement
        # web 3 has no record: the pass creates it UNCLAIMED
        on_cell("web", 7, "c1"),  # beyond the count: extra
        on_cell("gone", 0, "c1"),  # of no desired LRP: extra
        on_cell("api", 0, "", CRASHED, crash_count=5, since=NOW),  # in its backoff: stays CRASHED
    ]
    tasks = [
        task("waiting", "PENDING"),
        task("lost", TASK_RUNNING, cell_id="c2"),  # its cell is gone: failed, COMPLETED
        task("old", COMPLETED, first_completed_at=0.0),  # long completed: deleted
    ]
    *_, counts = _decide(
        desired,
        snapshot,
        tasks,
        cells,
        NOW,
        dataclasses.replace(ConvergenceConfig(), task_retention=5.0),
        {},
        {},
        PlacementLog(),
        [],
        [],
    )
    assert counts == PassCounts(
        lrps_desired=5,
        lrps_unclaimed=2,  # web 2's replacement and web 3
        lrps_claimed=1,
        lrps_running=1,
        lrps_missing=3,  # web 2, web 3, api 0
        lrps_extra=2,
        crashed_actual_lrps=1,
        crashing_desired_lrps=1,
        suspect_running_actual_lrps=1,
        suspect_claimed_actual_lrps=0,
        present_cells=1,
        suspect_cells=1,
        tasks_pending=1,
        tasks_running=0,
        tasks_completed=1,
        tasks_resolving=0,
    )


def test_settled_instances_are_counted_without_being_decided_about() -> None:
    desired = [DesiredSize("web", "d", 3)]
    cells = {"c1": CellRecord("c1", {"rep_url": "http://c1", "zone": "z"}, 1000.0, False)}
    snapshot = [on_cell("web", i, "c1") for i in range(3)]
    *_, counts = _decide(
        desired, snapshot, [], cells, NOW, ConvergenceConfig(), {}, {}, PlacementLog(), [], []
    )
    assert (counts.lrps_desired, counts.lrps_running, counts.lrps_missing, counts.lrps_extra) == (3, 3, 0, 0)
    assert counts.present_cells == 1 and counts.suspect_cells == 0
