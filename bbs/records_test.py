"""The records' state names are exactly the wire models' enums."""

from __future__ import annotations

from typing import get_args

from bbs import records
from common.models import ActualState, Presence, TaskState


def test_the_state_names_are_the_wire_enums_values() -> None:
    assert set(get_args(records.ActualStateName)) == {s.value for s in ActualState}
    assert set(get_args(records.PresenceName)) == {p.value for p in Presence}
    assert set(get_args(records.TaskStateName)) == {s.value for s in TaskState}
    states = [records.UNCLAIMED, records.CLAIMED, records.RUNNING, records.CRASHED]
    assert states == [s.value for s in ActualState]
    assert [records.ORDINARY, records.EVACUATING, records.SUSPECT] == [p.value for p in Presence]
    assert [records.PENDING, records.TASK_RUNNING, records.COMPLETED, records.RESOLVING] == [
        s.value for s in TaskState
    ]


def test_a_task_says_where_its_outcome_goes_and_a_cell_its_boot() -> None:
    task = records.TaskRecord("t", "d", {"completion_callback_url": "http://cb"})
    assert (task.callback_url, records.TaskRecord("t", "d", {}).callback_url) == ("http://cb", "")
    cell = records.CellRecord("c1", {"boot_id": "b1"}, expires_at=0.0)
    assert (cell.boot_id, records.CellRecord("c2", {}, expires_at=0.0).boot_id) == ("b1", "")
