"""A cell's state as Diego's rep serves it (`GET <rep_url>/state`, JSON), for Cloud Foundry's tools: `cfdot
cell-states` reads the URL a cell advertises on the BBS's Diego API (common/diego_state.py) and adds
`/state`. A pure function of the cell's detail (CellDetail): Go decodes field names without regard to case
and ignores what it does not know, so only fields Diego's CellState has are sent."""

from __future__ import annotations

from typing import Any

from common.models.cell import CellDetail

# Vendue's instance states, as Diego's rep names its containers' (reserved, initializing, running, ...).
LRP_STATE = {"reserved": "RESERVED", "starting": "INITIALIZING", "running": "RUNNING",
             "stopping": "COMPLETED"}


def _resources(memory_mb: int, disk_mb: int, containers: int) -> dict[str, int]:
    return {"MemoryMB": memory_mb, "DiskMB": disk_mb, "Containers": containers}


def diego_cell_state(detail: CellDetail) -> dict[str, Any]:
    bid = detail.bid
    available = bid.available
    return {
        "cell_id": bid.cell_id,
        "rep_url": detail.rep_url,
        "Zone": bid.zone,
        "AvailableResources": _resources(available.memory_mb, available.disk_mb, available.containers),
        "TotalResources": _resources(bid.total.memory_mb, bid.total.disk_mb, bid.total.containers),
        "LRPs": [{"process_guid": lrp.process_guid, "index": lrp.index, "instance_guid": lrp.instance_guid,
                  "MemoryMB": lrp.memory_mb, "DiskMB": lrp.disk_mb, "state": LRP_STATE.get(lrp.state, "")}
                 for lrp in detail.lrps],
        "Tasks": [{"task_guid": t.task_guid, "MemoryMB": t.memory_mb, "DiskMB": t.disk_mb,
                   "state": "RUNNING"} for t in bid.tasks],
        "StartingContainerCount": bid.starting_containers,
        "Evacuating": bid.evacuating,
        "VolumeDrivers": list(bid.volume_drivers),
        "PlacementTags": list(bid.placement_tags),
        "OptionalPlacementTags": list(bid.optional_placement_tags),
    }
