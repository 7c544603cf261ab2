"""The rep's batched lifecycle report (POST /v1/lifecycle): claims, running, crashes, removals and task
results."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from .actual import PortMapping
from .fields import (
    MAX_ITEMS,
    MAX_RESULT_CHARS,
    ExitStatus,
    Guid,
    Host,
    Open,
    ProcessText,
    StoreInt,
    nul_replaced,
)


class InstanceRef(Open):
    process_guid: Guid
    index: StoreInt
    instance_guid: Guid


class ClaimedInstance(InstanceRef):
    version: StoreInt = 1  # the definition version the instance was started for (its start request's)


class RunningInstanceReport(InstanceRef):
    host: Host = "127.0.0.1"
    ports: list[PortMapping] = Field(default_factory=list, max_length=16)  # DesiredLRPCreate.ports at most


class CrashReport(InstanceRef):
    reason: ProcessText = ""


class TaskCompletion(Open):
    task_guid: Guid
    failed: bool = False
    failure_reason: ProcessText = ""
    exit_status: ExitStatus | None = None
    result: Annotated[str, Field(max_length=MAX_RESULT_CHARS), AfterValidator(nul_replaced)] = ""


class CellLifecycle(Open):
    """Everything one cell has to tell the BBS this round, in one request."""

    claimed: list[ClaimedInstance] = Field(default_factory=list, max_length=MAX_ITEMS)
    running: list[RunningInstanceReport] = Field(default_factory=list, max_length=MAX_ITEMS)
    crashed: list[CrashReport] = Field(default_factory=list, max_length=MAX_ITEMS)
    removed: list[InstanceRef] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks_started: list[Guid] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks_completed: list[TaskCompletion] = Field(default_factory=list, max_length=MAX_ITEMS)


class LifecycleResult(Open):
    """What the BBS refused: the rep stops instances whose claim or report was refused."""

    refused: list[InstanceRef] = Field(default_factory=list)
    refused_tasks: list[str] = Field(default_factory=list)


class HostLifecycle(Open):
    """POST /v1/lifecycle: the lifecycle reports of the cells of one rep process, in one request."""

    cells: dict[Guid, CellLifecycle] = Field(max_length=10_000)


class HostLifecycleResult(Open):
    cells: dict[str, LifecycleResult] = Field(default_factory=dict)
