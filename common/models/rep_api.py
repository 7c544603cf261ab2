"""The bodies of the rep's API (HTTP, and the same over NATS): cell states, work, stops, cancels, cordons
and evacuation, for the cells of one rep process."""

from __future__ import annotations

from pydantic import Field, model_validator

from .cell import CellDetail, CellState
from .desired import DesiredLRP
from .fields import MAX_ITEMS, CellIds, FencingToken, Guid, Open, StoreInt, Strict
from .task import Task


class LRPWork(Open):
    """Auctioneer -> rep: run this instance. The rep claims it in the BBS before starting it."""

    desired: DesiredLRP
    index: int


class WorkResult(Open):
    """The part of one cell's work the rep rejected (not enough room, stale token, evacuating)."""

    rejected_lrps: list[LRPWork] = Field(default_factory=list)
    rejected_tasks: list[Task] = Field(default_factory=list)
    reason: str = ""


class HostCellStates(Open):
    """GET {rep_url}/state[?lrps=counts] (and the reply on vendue.cells.state.<rep_id>): the bids of the
    live cells of one rep process, or of those the request named that it hosts."""

    cells: list[CellState] = Field(default_factory=list)


class HostCellDetails(Open):
    """GET {rep_url}/state?lrps=full: the same cells as HostCellStates, each in detail (CellDetail)."""

    cells: list[CellDetail] = Field(default_factory=list)


class HostLRPGroup(Strict):
    """Instances of one desired LRP for one cell: `desired` is its position in HostWork.desired."""

    desired: int = Field(ge=0, le=MAX_ITEMS)
    indices: list[StoreInt] = Field(max_length=MAX_ITEMS)


class HostCellWork(Strict):
    lrp_groups: list[HostLRPGroup] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks: list[Task] = Field(default_factory=list, max_length=MAX_ITEMS)


class HostWork(Strict):
    """POST {rep_url}/work (and vendue.rep.<rep_id>.work): the work of one or more cells of one rep process,
    in one request. Each desired LRP is written (and validated) once however many of the cells get its
    instances; cells name it by position. Every part was placed under `fencing_token` (the auctioneer
    lease's token: a rep refuses an older or unknown one)."""

    desired: list[DesiredLRP] = Field(default_factory=list, max_length=MAX_ITEMS)
    cells: dict[Guid, HostCellWork] = Field(max_length=10_000)
    fencing_token: FencingToken = 0

    @model_validator(mode="after")
    def _references_exist(self) -> HostWork:
        for cell_id, work in self.cells.items():
            for i, group in enumerate(work.lrp_groups):
                if group.desired >= len(self.desired):
                    raise ValueError(
                        f"cells.{cell_id}.lrp_groups.{i}.desired: {group.desired} names no entry of"
                        f" `desired` ({len(self.desired)} entries)"
                    )
        return self

    def instances(self, cell_id: str) -> list[tuple[DesiredLRP, int]]:
        """One cell's LRP instances as (desired LRP, index), group by group."""
        desired = self.desired
        return [(desired[g.desired], index) for g in self.cells[cell_id].lrp_groups for index in g.indices]


class HostWorkResult(Open):
    """Each cell's WorkResult. A cell of the request that is not (or no longer) hosted here is absent:
    none of its work was taken."""

    cells: dict[str, WorkResult] = Field(default_factory=dict)


class InstanceStop(Strict):
    cell_id: Guid
    process_guid: str = Field(min_length=1, max_length=128)
    instance_guid: str = Field(min_length=1, max_length=128)


class StopInstances(Strict):
    """POST {rep_url}/stop (and vendue.rep.<rep_id>.stop): stop these instances (the BBS, in one batch)."""

    instances: list[InstanceStop] = Field(min_length=1, max_length=MAX_ITEMS)


class TaskCancel(Strict):
    cell_id: Guid
    task_guid: str = Field(min_length=1, max_length=128)


class CancelTasks(Strict):
    """POST {rep_url}/cancel (and vendue.rep.<rep_id>.cancel): cancel these tasks (the BBS, in one batch)."""

    tasks: list[TaskCancel] = Field(min_length=1, max_length=MAX_ITEMS)


class CellCordon(Strict):
    cell_id: Guid
    cordoned: bool


class CordonCells(Strict):
    """POST {rep_url}/cordon (and vendue.rep.<rep_id>.cordon): the operator cordoned (or drains) these cells,
    or uncordoned them (the BBS, at once; every heartbeat's answer says it again). Answered with Found: the
    cell ids hosted there."""

    cells: list[CellCordon] = Field(min_length=1, max_length=10_000)


class Found(Open):
    """The answer to a stop or a cancel: the guids (instance or task) the rep held and now stops."""

    found: list[str] = Field(default_factory=list)


class EvacuateCells(Strict):
    """POST {rep_url}/evacuate: the cells to evacuate (none named: every cell of the process)."""

    cells: CellIds | None = None
