"""What a simulator run places: cells (with what they already run), apps and tasks.

A workload file (docs/workload-format.md) lists LRP *instances*; the auctioneer and the BBS deal in apps (a
desired LRP and the indices to start). `SimInput` is the app-level view both transports start from:
`from_workload` groups a file's instances into apps, `to_workload` writes a scenario back as a workload
file (the contract other tools read), and a scenario can build one directly (250,000 instances are
5,000 apps, not 250,000 validated models).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from common.models import PlacementFields

from .workload import CellSpec, LRPSpec, PrefillInstance, SchedulerSettings, TaskSpec, Workload

# What a desired LRP carries besides guid, memory and disk: the wire's placement fields, its domain and
# what the BBS does on the loss of its cell (wire names, shared with DesiredLRP).
APP_FIELDS = set(PlacementFields.model_fields) - {"memory_mb", "disk_mb"} | {"domain", "on_cell_loss"}
_LRP_DEFAULTS = {name: f.get_default(call_default_factory=True) for name, f in LRPSpec.model_fields.items()}


@dataclass(slots=True)
class App:
    """One desired LRP: `indices` are the instances to place; `fields` its other placement fields."""

    process_guid: str
    memory_mb: int
    disk_mb: int
    indices: tuple[int, ...]
    fields: dict[str, Any] = field(default_factory=dict)  # wire names, non-default values only
    instances: int = 0  # the desired instance count; 0: max(index) + 1

    @property
    def desired_instances(self) -> int:
        return max(self.instances, max(self.indices, default=-1) + 1)

    @property
    def stack(self) -> str:
        return self.fields.get("stack", _LRP_DEFAULTS["stack"])

    @property
    def placement_tags(self) -> tuple[str, ...]:
        return tuple(self.fields.get("placement_tags", ()))


@dataclass(slots=True)
class SimInput:
    name: str
    cells: list[CellSpec]
    apps: list[App]
    tasks: list[TaskSpec] = field(default_factory=list)
    description: str = ""
    config: SchedulerSettings = field(default_factory=SchedulerSettings)
    now: float | None = None
    notes: list[str] = field(default_factory=list)  # what the conversion left out, for the report

    @property
    def instances(self) -> int:
        return sum(len(a.indices) for a in self.apps)

    @property
    def prefill_instances(self) -> int:
        return sum(len(c.prefill) for c in self.cells)

    @property
    def zones(self) -> list[str]:
        return sorted({c.zone for c in self.cells})


def app(process_guid: str, instances: int, memory_mb: int, disk_mb: int, **fields: Any) -> App:
    """An app whose instances 0..instances-1 are all to be placed."""
    return App(process_guid, memory_mb, disk_mb, tuple(range(instances)), dict(fields), instances)


def _signature(lrp: LRPSpec) -> str:
    dumped = {k: v for k, v in lrp.model_dump(include=APP_FIELDS).items() if v != _LRP_DEFAULTS[k]}
    return json.dumps([lrp.process_guid, lrp.memory_mb, lrp.disk_mb, dumped], sort_keys=True, default=str)


def from_workload(workload: Workload) -> SimInput:
    """Group a workload's instances into apps: one per process guid and set of placement fields."""
    apps: dict[str, App] = {}
    for lrp in workload.lrps:
        key = _signature(lrp)
        found = apps.get(key)
        if found is None:
            _, _, _, fields = json.loads(key)
            found = apps[key] = App(lrp.process_guid, lrp.memory_mb, lrp.disk_mb, (), fields, 0)
        found.indices += (lrp.index,)
        found.instances = max(found.instances, lrp.total_instances)
    notes = []
    if any(lrp.previous_cell for lrp in workload.lrps):
        notes.append("lrps[].previous_cell: a desired LRP has no previous cell; the auctioneer never sees it")
    return SimInput(
        name=workload.name, cells=list(workload.cells), apps=list(apps.values()), tasks=list(workload.tasks),
        config=workload.config, now=workload.now, notes=notes,
    )


def to_workload(sim: SimInput) -> dict[str, Any]:
    """The run as a workload file (docs/workload-format.md), instance by instance."""
    lrps: list[dict[str, Any]] = []
    for a in sim.apps:
        for index in a.indices:
            lrps.append({"process_guid": a.process_guid, "index": index, "memory_mb": a.memory_mb,
                         "disk_mb": a.disk_mb, **a.fields, "total_instances": a.desired_instances})
    data: dict[str, Any] = {
        "name": sim.name,
        "cells": [c.model_dump(mode="json", exclude_defaults=True) for c in sim.cells],
        "lrps": lrps,
        "tasks": [t.model_dump(mode="json", exclude_defaults=True) for t in sim.tasks],
    }
    if sim.now is not None:
        data["now"] = sim.now
    if sim.config != SchedulerSettings():
        data["config"] = sim.config.model_dump(exclude_defaults=True)
    return data


def cell(cell_id: str, zone: str, memory_mb: int, disk_mb: int, containers: int,
         prefill: Iterable[tuple[str, int, int, int]] = (), **extra: Any) -> CellSpec:
    """A cell; `prefill` as (process_guid, index, memory_mb, disk_mb)."""
    return CellSpec(
        id=cell_id, zone=zone, memory_mb=memory_mb, disk_mb=disk_mb, containers=containers,
        prefill=[PrefillInstance(process_guid=g, index=i, memory_mb=m, disk_mb=d) for g, i, m, d in prefill],
        **extra,
    )
