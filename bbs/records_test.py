"""The records' state names are exactly the wire models' enums, and what they keep of a request body has
exactly the wire model's fields."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import BaseModel

from bbs import records
from bbs.operations.cells import BBS_CELL_FIELDS
from common.models import (
    ActualState,
    CellPresence,
    DesiredLRPCreate,
    HealthCheck,
    Presence,
    ResourcesModel,
    TaskCreate,
    TaskState,
)


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


@pytest.mark.parametrize("stored, model, left_out", [
    (records.DesiredDefinition, DesiredLRPCreate, set()),
    (records.HealthCheckData, HealthCheck, set()),
    (records.TaskDefinition, TaskCreate, set()),
    (records.StoredPresence, CellPresence, BBS_CELL_FIELDS),
    (records.ResourcesData, ResourcesModel, set()),
])
def test_what_a_record_keeps_of_a_body_has_the_wire_models_fields(stored: type, model: type[BaseModel],
                                                                  left_out: set[str]) -> None:
    assert set(stored.__annotations__) == set(model.model_fields) - left_out


def test_a_records_properties_read_the_body_the_bbs_stored() -> None:
    # As the BBS stores them (bbs/operations): a misspelt key would read as absent.
    body = CellPresence(cell_id="c1", zone="z1", rep_url="http://127.0.0.1:1800", rep_id="r1", boot_id="b1",
                        evacuating=True, total={"memory_mb": 1, "disk_mb": 1, "containers": 1})
    cell = records.CellRecord("c1", body.model_dump(mode="json", exclude=BBS_CELL_FIELDS), expires_at=0.0)
    assert (cell.rep_url, cell.rep_id, cell.zone, cell.boot_id, cell.evacuating) == (
        "http://127.0.0.1:1800", "r1", "z1", "b1", True)
    task = TaskCreate(task_guid="t", command=["true"], completion_callback_url="http://127.0.0.1:9/done")
    assert records.TaskRecord("t", "d", task.model_dump(mode="json")).callback_url == "http://127.0.0.1:9/done"
