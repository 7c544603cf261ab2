"""The reps' lifecycle reports as plain data: TypedDicts validated straight from the request bytes.

`CellLifecycle` and `HostLifecycle` (common/models/lifecycle.py) define the wire format. A scale run sends
250,000 claimed and 250,000 running reports, and building a model instance for each costs about as
much again as parsing the JSON; these TypedDicts accept exactly the same bodies (same fields, types,
defaults, bounds and unknown fields ignored; lifecycle_wire_test.py holds them to it) but validate into
plain dicts, which the decisions in lifecycle.py read.
"""

from __future__ import annotations

from typing import Annotated, NotRequired

from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict

from common.models import MAX_ITEMS, Guid, Host, Port, ProcessText, StoreInt, TaskCompletion


class PortMapping(TypedDict):
    container_port: Port
    host_port: Port


class InstanceRef(TypedDict):
    process_guid: Guid
    index: StoreInt
    instance_guid: Guid


class ClaimRef(InstanceRef):
    version: Annotated[NotRequired[StoreInt], Field(default=1)]


class RunningReport(InstanceRef):
    host: Annotated[NotRequired[Host], Field(default="127.0.0.1")]
    ports: Annotated[NotRequired[list[PortMapping]], Field(default_factory=list, max_length=16)]


class CrashReport(InstanceRef):
    reason: Annotated[NotRequired[ProcessText], Field(default="")]


class CellReport(TypedDict):
    """One cell's report (CellLifecycle). Task completions stay models: they are few."""

    claimed: Annotated[NotRequired[list[ClaimRef]], Field(default_factory=list, max_length=MAX_ITEMS)]
    running: Annotated[NotRequired[list[RunningReport]], Field(default_factory=list, max_length=MAX_ITEMS)]
    crashed: Annotated[NotRequired[list[CrashReport]], Field(default_factory=list, max_length=MAX_ITEMS)]
    removed: Annotated[NotRequired[list[InstanceRef]], Field(default_factory=list, max_length=MAX_ITEMS)]
    tasks_started: Annotated[NotRequired[list[Guid]], Field(default_factory=list, max_length=MAX_ITEMS)]
    tasks_completed: Annotated[
        NotRequired[list[TaskCompletion]], Field(default_factory=list, max_length=MAX_ITEMS)
    ]


class HostReport(TypedDict):
    """The reports of several cells of one rep process (HostLifecycle)."""

    cells: Annotated[dict[Guid, CellReport], Field(max_length=10_000)]


CELL_REPORT = TypeAdapter(CellReport)
HOST_REPORT = TypeAdapter(HostReport)
