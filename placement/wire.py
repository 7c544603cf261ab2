"""The one adapter from the wire's models (common/models.py) to the engine's vocabulary.

Every caller converts here, never field by field on its own: the auctioneer (a desired LRP's indices, a
task, a rep's bid), the simulator (a workload's LRPs, which are the wire's `PlacementFields`) and the
BBS's rebalancer (a stored definition, a heartbeat). wire_test.py fails when a field of the wire's
`PlacementFields`, `CellState` or `CellOffers` is not carried.

Kept lean because an auction converts 1,000 cells and 250,000 instances: an app's `Ask` is made once and
shared by its instances, each of which is then four plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from common.models import CellOffers, CellState, HostMetricsModel, PlacementFields, ResourcesModel, Task

from .ask import DEFAULT_STACK, AffinityRule, Ask, DeviceRequest, VolumeRequest
from .cell_offer import CellOffer, Resources, Volume, host_metrics_from
from .work import LRPStart, TaskStart


def ask_of(fields: PlacementFields) -> Ask:
    """What an app (a desired LRP, an auction request, a workload's LRP) asks of a cell."""
    return Ask(
        memory_mb=fields.memory_mb,
        disk_mb=fields.disk_mb,
        stack=fields.stack,
        placement_tags=tuple(fields.placement_tags),
        volume_drivers=tuple(fields.volume_drivers),
        labels_match=fields.labels_match,
        volumes=tuple(VolumeRequest(v.name, v.size_mb, v.label_match, v.ephemeral) for v in fields.volumes),
        ingress_ip=fields.ingress_ip,
        devices=tuple(DeviceRequest(d.kind, d.count) for d in fields.devices),
        affinity=tuple(AffinityRule(a.expression, a.weight) for a in fields.affinity),
        strategy=fields.strategy,
        objective=fields.objective,
        source_blob=fields.source_blob,
    )


def stored_placement_fields(definition: Mapping[str, Any]) -> PlacementFields:
    """The placement fields of a stored desired LRP's definition (JSON data of a DesiredLRPCreate)."""
    return PlacementFields.model_validate({k: definition[k] for k in PlacementFields.model_fields
                                           if k in definition})


def lrp_starts(process_guid: str, indices: Iterable[int], ask: Ask, total_instances: int = 0,
               previous_cell: str | None = None) -> list[LRPStart]:
    """One LRPStart per index, all sharing the app's ask."""
    return [LRPStart(process_guid, index, ask, total_instances, previous_cell) for index in indices]


def task_ask(task: Task) -> Ask:
    """What a task asks of a cell: resources and what the cell must be."""
    tags, drivers = tuple(task.placement_tags), tuple(task.volume_drivers)
    return Ask(task.memory_mb, task.disk_mb, task.stack, tags, drivers)


def task_start(task: Task) -> TaskStart:
    return TaskStart(task.task_guid, task_ask(task))


def cell_offer(state: CellState) -> CellOffer:
    """The engine's cell from a rep's bid. What the bid holds is shared, not copied: the engine copies
    what it changes."""
    total, available = state.total, state.available
    cell = CellOffer(
        cell_id=state.cell_id,
        zone=state.zone,
        total=Resources(total.memory_mb, total.disk_mb, total.containers),
        available=Resources(available.memory_mb, available.disk_mb, available.containers),
        stacks=tuple(state.stacks),
        placement_tags=frozenset(state.placement_tags),
        optional_placement_tags=frozenset(state.optional_placement_tags),
        volume_drivers=frozenset(state.volume_drivers),
        labels=dict(state.labels),
        starting_containers=state.starting_containers,
        # `available` already excludes what these hold; they count for spreading (same process, zone).
        # An instance being stopped still holds its slot but no longer counts as one of its process's.
        lrp_counts=state.lrp_counts,
        stopping_counts=state.stopping_counts,
        tasks=[t.task_guid for t in state.tasks],
    )
    if state.offers is not None:
        add_offers(cell, state.offers)
    return cell


def add_offers(cell: CellOffer, offers: CellOffers) -> None:
    """What the cell offers only some strategies read: its host's load (load mark), volumes, ingress IPs and
    devices (service), cached blobs (objective)."""
    cell.host = None if offers.host is None else host_metrics_from(offers.host)
    cell.volumes = [Volume(v.name, v.size_mb, dict(v.labels), v.ephemeral, v.holder) for v in offers.volumes]
    cell.ingress_ips = list(offers.ingress_ips)
    cell.devices = dict(offers.devices)
    cell.cached_blobs = frozenset(offers.cached_blobs)


def stored_cell_offer(cell_id: str, presence: Mapping[str, Any]) -> CellOffer:
    """A cell as the BBS holds its heartbeat (JSON data of a `CellPresence`), all of its total free: the
    caller takes what it holds. No volumes, ingress IPs or devices: only its rep's bid carries them."""
    total = ResourcesModel.model_validate(presence.get("total") or _NOTHING)
    host = presence.get("host")
    return CellOffer(
        cell_id=cell_id,
        zone=str(presence.get("zone", "")),
        total=Resources(total.memory_mb, total.disk_mb, total.containers),
        available=Resources(total.memory_mb, total.disk_mb, total.containers),
        stacks=tuple(presence.get("stacks") or (DEFAULT_STACK,)),
        placement_tags=frozenset(presence.get("placement_tags") or ()),
        optional_placement_tags=frozenset(presence.get("optional_placement_tags") or ()),
        volume_drivers=frozenset(presence.get("volume_drivers") or ()),
        labels=dict(presence.get("labels") or {}),
        host=None if host is None else host_metrics_from(HostMetricsModel.model_validate(host)),
        cached_blobs=frozenset(presence.get("cached_blobs") or ()),
    )


_NOTHING = {"memory_mb": 0, "disk_mb": 0, "containers": 0}
