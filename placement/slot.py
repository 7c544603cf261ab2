"""One cell as an auction sees it while reserving (`CellSlot`): what is left, and what it holds.

Its own module, apart from the auction's state, so that the filters, the columns and the strategies
read slots without importing the state that holds them.
"""

from __future__ import annotations

from .cell_offer import CellOffer, Volume


class CellSlot:
    """One cell as the auction sees it while reserving: what is left, and what it holds."""

    __slots__ = (
        "pos", "cell", "cell_id", "zone", "zone_pos",
        "total_m", "total_d", "total_c", "avail_m", "avail_d", "avail_c", "starting",
        "stacks", "tags", "optional_tags", "drivers",
        "proc_counts", "delayed_counts", "task_count", "ingress_free", "devices_free", "volumes",
        "cached_blobs",
    )

    def __init__(self, pos: int, zone_pos: int, cell: CellOffer) -> None:
        self.pos = pos
        self.cell = cell
        self.cell_id = cell.cell_id
        self.zone = cell.zone
        self.zone_pos = zone_pos
        self.total_m = cell.total.memory_mb
        self.total_d = cell.total.disk_mb
        self.total_c = cell.total.containers
        self.avail_m = cell.available.memory_mb
        self.avail_d = cell.available.disk_mb
        self.avail_c = cell.available.containers
        self.starting = cell.starting_containers
        self.stacks = frozenset(cell.stacks)
        self.tags = cell.placement_tags
        self.optional_tags = cell.optional_placement_tags
        self.drivers = cell.volume_drivers
        # Copies: reservations raise these, and the cell stays as its caller made it.
        self.proc_counts: dict[str, int] = dict(cell.lrp_counts)
        self.delayed_counts: dict[str, int] = dict(cell.stopping_counts)
        for inst in cell.lrps:
            counts = self.delayed_counts if inst.delayed_shutdown else self.proc_counts
            counts[inst.process_guid] = counts.get(inst.process_guid, 0) + 1
        self.task_count = len(cell.tasks)
        self.ingress_free: list[str] = list(cell.ingress_ips)
        self.devices_free: dict[str, int] = dict(cell.devices)
        self.volumes: list[Volume] = list(cell.volumes)
        self.cached_blobs = cell.cached_blobs  # what its host caches: never changed by an auction

    def instances(self, process_guid: str) -> int:
        return self.proc_counts.get(process_guid, 0)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"CellSlot({self.cell_id}, zone={self.zone}, mem={self.avail_m}/{self.total_m})"
