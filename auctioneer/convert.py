"""Wire models <-> the engine's plain dataclasses, at the boundary of the auction.

Kept lean because issue 6 converts 1,000 cells and 250,000 instances per auction: one pass per list,
the placement fields of a desired LRP read once per LRP rather than once per instance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from common.models import (
    AcceptedWork,
    CellOffers,
    CellState,
    DesiredLRP,
    LRPPlacementFailure,
    PlacementFailures,
    Task,
    TaskPlacementFailure,
)
from placement.types import (
    AffinityRule,
    Cell,
    DeviceRequest,
    Failure,
    LRPStart,
    Resources,
    TaskStart,
    Volume,
    VolumeRequest,
    host_metrics_from,
)

from .batcher import PendingLRP, PendingTask


def cell_from_state(state: CellState) -> Cell:
    """The engine's cell from a rep's bid."""
    cell = Cell(
        cell_id=state.cell_id,
        zone=state.zone,
        total=Resources(state.total.memory_mb, state.total.disk_mb, state.total.containers),
        available=Resources(state.available.memory_mb, state.available.disk_mb, state.available.containers),
        stacks=tuple(state.stacks),
        placement_tags=frozenset(state.placement_tags),
        optional_placement_tags=frozenset(state.optional_placement_tags),
        volume_drivers=frozenset(state.volume_drivers),
        labels=dict(state.labels),
        starting_containers=state.starting_containers,
        # `available` already excludes what these hold; they count for spreading (same process, zone).
        # An instance being stopped still holds its slot but no longer counts as one of its process's.
        # Shared, not copied: the engine copies what it changes.
        lrp_counts=state.lrp_counts,
        stopping_counts=state.stopping_counts,
        tasks=[t.task_guid for t in state.tasks],
    )
    if state.offers is not None:
        add_offers(cell, state.offers)
    return cell


def add_offers(cell: Cell, offers: CellOffers) -> None:
    """What the cell offers only some strategies read: its host's load (load mark), volumes, ingress IPs and
    devices (service), cached blobs (objective)."""
    cell.host = None if offers.host is None else host_metrics_from(offers.host)
    cell.volumes = [Volume(v.name, v.size_mb, dict(v.labels), v.ephemeral, v.holder) for v in offers.volumes]
    cell.ingress_ips = list(offers.ingress_ips)
    cell.devices = dict(offers.devices)
    cell.cached_blobs = frozenset(offers.cached_blobs)


def _placement_fields(desired: DesiredLRP) -> dict:
    return {
        "process_guid": desired.process_guid,
        "memory_mb": desired.memory_mb,
        "disk_mb": desired.disk_mb,
        "stack": desired.stack,
        "placement_tags": tuple(desired.placement_tags),
        "volume_drivers": tuple(desired.volume_drivers),
        "domain": desired.domain,
        "strategy": desired.strategy,
        "objective": desired.objective,
        "total_instances": desired.instances,
        "source_blob": desired.source_blob,
        "labels_match": desired.labels_match,
        "volumes": tuple(
            VolumeRequest(v.name, v.size_mb, v.label_match, v.ephemeral) for v in desired.volumes
        ),
        "ingress_ip": desired.ingress_ip,
        "devices": tuple(DeviceRequest(d.kind, d.count) for d in desired.devices),
        "affinity": tuple(AffinityRule(a.expression, a.weight) for a in desired.affinity),
    }


# LRPStart's fields after (process_guid, index), in order: each instance is made positionally from its
# desired LRP's values, a third of the cost of keywords (one per instance, 250,000 at full scale).
_FIELDS = tuple(f.name for f in dataclasses.fields(LRPStart))
_AFTER_INDEX = _FIELDS[2:]
assert _FIELDS[:2] == ("process_guid", "index"), _FIELDS


def lrp_starts(items: Iterable[PendingLRP]) -> list[LRPStart]:
    """One LRPStart per instance; the desired LRP's fields are read once per desired LRP object."""
    by_desired: dict[int, tuple[str, tuple]] = {}
    starts: list[LRPStart] = []
    append = starts.append
    for item in items:
        found = by_desired.get(id(item.desired))
        if found is None:
            template = LRPStart(index=0, **_placement_fields(item.desired))
            found = by_desired[id(item.desired)] = (
                template.process_guid, tuple(getattr(template, name) for name in _AFTER_INDEX)
            )
        process_guid, rest = found
        append(LRPStart(process_guid, item.index, *rest))
    return starts


def task_start(task: Task) -> TaskStart:
    return TaskStart(
        task_guid=task.task_guid,
        memory_mb=task.memory_mb,
        disk_mb=task.disk_mb,
        stack=task.stack,
        placement_tags=tuple(task.placement_tags),
        volume_drivers=tuple(task.volume_drivers),
        domain=task.domain,
    )


def task_starts(items: Iterable[PendingTask]) -> list[TaskStart]:
    return [task_start(item.task) for item in items]


def placement_failures(
    failures: Iterable[Failure], accepted: dict[str, AcceptedWork] | None = None
) -> PlacementFailures:
    """An auction's report to the BBS: its failures, and what each cell accepted."""
    body = PlacementFailures(accepted=accepted or {})
    for f in failures:
        if f.task_guid is not None:
            body.tasks.append(TaskPlacementFailure(task_guid=f.task_guid, error=f.error, detail=f.detail))
        elif f.process_guid is not None and f.index is not None:
            body.lrps.append(
                LRPPlacementFailure(
                    process_guid=f.process_guid, index=f.index, error=f.error, detail=f.detail
                )
            )
    return body
