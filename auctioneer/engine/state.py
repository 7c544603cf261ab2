"""The working state of one auction: a mutable copy of every cell that each reservation updates.

Both engines (fast and reference) drive the same `AuctionState`; only how they *choose* a cell differs.
Indexes that a fast strategy keeps subscribe with `on_reserve` (and `on_count`, to learn whose instance
count rose) and are told of every reservation, whichever strategy made it, so strategies can be mixed
within one batch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from .types import Cell, LRPStart, SchedulerConfig, TaskStart, Volume


def instance_key(process_guid: str, index: int) -> str:
    return f"{process_guid}/{index}"


class CellSlot:
    """One cell as the auction sees it while reserving: what is left, and what it holds."""

    __slots__ = (
        "pos", "cell", "cell_id", "zone", "zone_pos",
        "total_m", "total_d", "total_c", "avail_m", "avail_d", "avail_c", "starting",
        "stacks", "tags", "optional_tags", "drivers",
        "proc_counts", "delayed_counts", "task_count", "ingress_free", "devices_free", "volumes",
    )

    def __init__(self, pos: int, zone_pos: int, cell: Cell) -> None:
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
        self.proc_counts: dict[str, int] = {}
        self.delayed_counts: dict[str, int] = {}
        for inst in cell.lrps:
            counts = self.delayed_counts if inst.delayed_shutdown else self.proc_counts
            counts[inst.process_guid] = counts.get(inst.process_guid, 0) + 1
        self.task_count = len(cell.tasks)
        self.ingress_free: list[str] = list(cell.ingress_ips)
        self.devices_free: dict[str, int] = dict(cell.devices)
        self.volumes: list[Volume] = list(cell.volumes)

    def fits(self, memory_mb: int, disk_mb: int) -> bool:
        return self.avail_m >= memory_mb and self.avail_d >= disk_mb and self.avail_c >= 1

    def lacking(self, memory_mb: int, disk_mb: int) -> set[str]:
        """Which of Diego's resource problems this cell has for the request."""
        problems = set()
        if self.avail_m < memory_mb:
            problems.add("memory")
        if self.avail_d < disk_mb:
            problems.add("disk")
        if self.avail_c < 1:
            problems.add("containers")
        return problems

    def instances(self, process_guid: str) -> int:
        return self.proc_counts.get(process_guid, 0)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"CellSlot({self.cell_id}, zone={self.zone}, mem={self.avail_m}/{self.total_m})"


EMPTY_COUNTS: dict[str, int] = {}  # never written to

ReserveListener = Callable[[CellSlot], None]
# (cell, process guid or None for a task, the cell's new count of that process's instances / of tasks)
CountListener = Callable[[CellSlot, "str | None", int], None]


class AuctionState:
    """Every cell of one auction plus the counters placement needs, kept current as work is reserved."""

    def __init__(self, cells: Sequence[Cell], config: SchedulerConfig) -> None:
        self.config = config
        self.zone_names: list[str] = sorted({c.zone for c in cells})
        self.zone_slots: dict[str, list[CellSlot]] = {z: [] for z in self.zone_names}
        self.slots: list[CellSlot] = []
        seen: set[str] = set()
        for pos, cell in enumerate(cells):
            if cell.cell_id in seen:
                raise ValueError(f"duplicate cell id {cell.cell_id!r}")
            seen.add(cell.cell_id)
            members = self.zone_slots[cell.zone]
            slot = CellSlot(pos, len(members), cell)
            members.append(slot)
            self.slots.append(slot)
        # process guid -> {cell pos: ordinary instances}, and -> {zone: instances}
        self.proc_cells: dict[str, dict[int, int]] = {}
        self.zone_counts: dict[str, dict[str, int]] = {}
        self.task_cells: dict[int, int] = {}
        for slot in self.slots:
            for pg, n in slot.proc_counts.items():
                self.proc_cells.setdefault(pg, {})[slot.pos] = n
                zc = self.zone_counts.setdefault(pg, {})
                zc[slot.zone] = zc.get(slot.zone, 0) + n
            if slot.task_count:
                self.task_cells[slot.pos] = slot.task_count
        self.total_starting = sum(s.starting for s in self.slots)
        # zone -> [containers, memory, disk] left for others: the free capacity summed over its cells, less
        # what the batch's LRPs still owe the zone for their equal shares (`note_batch`). Every reservation
        # takes from it, and gives back when it was an owed instance. Read by `zone_room`.
        self.zone_left: dict[str, list[int]] = {z: [0, 0, 0] for z in self.zone_names}
        for slot in self.slots:
            left = self.zone_left[slot.zone]
            left[0] += slot.avail_c
            left[1] += slot.avail_m
            left[2] += slot.avail_d
        # process guid -> (equal share per zone, memory, disk), for the batch's processes with a share ≥ 1
        self._shares: dict[str, tuple[int, int, int]] = {}
        self.version = 0
        self.listeners: list[ReserveListener] = []
        self.count_listeners: list[CountListener] = []
        self.lrps_placed_by_process: dict[str, int] = {}
        self._zone_groups: dict[str, list[list[str]]] = {}
        # process guid -> instances of it in this auction's batch (deduped); filled by the scheduler through
        # `note_batch`, read by strategies that need an app's size (the objective's ai.TotalInstances).
        self.batch_instances: dict[str, int] = {}

    def note_batch(self, items: Sequence[LRPStart | TaskStart]) -> None:
        """Count the batch's instances per process, and what each process owes each zone.

        With Z zones, a zone-balanced process of n instances (on the cells and in this batch) ends with
        at least n // Z — its equal share — in every zone. What it still lacks of that share in a zone is
        *owed* there: capacity the zone must keep for it, whatever else the batch places first.
        """
        sizes: dict[str, tuple[int, int]] = {}
        for item in items:
            if isinstance(item, LRPStart):
                self.batch_instances[item.process_guid] = self.batch_instances.get(item.process_guid, 0) + 1
                sizes.setdefault(item.process_guid, (item.memory_mb, item.disk_mb))
        zones = len(self.zone_names)
        if zones < 2:
            return
        for pg, (memory_mb, disk_mb) in sizes.items():
            counts = self.zone_counts.get(pg, EMPTY_COUNTS)
            share = (sum(counts.values()) + self.batch_instances[pg]) // zones
            if share < 1:
                continue
            self._shares[pg] = (share, memory_mb, disk_mb)
            for zone in self.zone_names:
                lacking = share - counts.get(zone, 0)
                if lacking > 0:
                    left = self.zone_left[zone]
                    left[0] -= lacking
                    left[1] -= lacking * memory_mb
                    left[2] -= lacking * disk_mb

    # --- reservations -------------------------------------------------------------------------------

    def on_reserve(self, listener: ReserveListener) -> None:
        self.listeners.append(listener)

    def on_count(self, listener: CountListener) -> None:
        """Also be told whose count rose on the cell: the process guid (None for a task) and its new count."""
        self.count_listeners.append(listener)

    def reserve_lrp(self, slot: CellSlot, item: LRPStart) -> None:
        self._reserve(slot, item.memory_mb, item.disk_mb)
        pg = item.process_guid
        n = slot.proc_counts.get(pg, 0) + 1
        slot.proc_counts[pg] = n
        self.proc_cells.setdefault(pg, {})[slot.pos] = n
        zc = self.zone_counts.setdefault(pg, {})
        before = zc.get(slot.zone, 0)
        zc[slot.zone] = before + 1
        self._zone_groups.pop(pg, None)
        shares = self._shares.get(pg)
        if shares is not None and before < shares[0]:  # an owed instance: what it took was set aside
            left = self.zone_left[slot.zone]
            left[0] += 1
            left[1] += shares[1]
            left[2] += shares[2]
        self.lrps_placed_by_process[pg] = self.lrps_placed_by_process.get(pg, 0) + 1
        if item.ingress_ip and slot.ingress_free:
            slot.ingress_free.pop(0)
        for dev in item.devices:
            slot.devices_free[dev.kind] = slot.devices_free.get(dev.kind, 0) - dev.count
        if item.volumes:
            self._claim_volumes(slot, item)
        for listener in self.count_listeners:
            listener(slot, pg, n)
        self._notify(slot)

    def reserve_task(self, slot: CellSlot, item: TaskStart) -> None:
        self._reserve(slot, item.memory_mb, item.disk_mb)
        slot.task_count += 1
        self.task_cells[slot.pos] = slot.task_count
        for listener in self.count_listeners:
            listener(slot, None, slot.task_count)
        self._notify(slot)

    def _reserve(self, slot: CellSlot, memory_mb: int, disk_mb: int) -> None:
        slot.avail_m -= memory_mb
        slot.avail_d -= disk_mb
        slot.avail_c -= 1
        slot.starting += 1
        self.total_starting += 1
        self.version += 1
        left = self.zone_left[slot.zone]
        left[0] -= 1
        left[1] -= memory_mb
        left[2] -= disk_mb

    def _notify(self, slot: CellSlot) -> None:
        for listener in self.listeners:
            listener(slot)

    def _claim_volumes(self, slot: CellSlot, item: LRPStart) -> None:
        # Imported here: the service strategy owns volume matching; the state only records the claim.
        # `volume_plan` is the same choice the volumes filter made, so the claim never disagrees with it.
        from .strategies.service_filters import volume_plan

        holder = instance_key(item.process_guid, item.index)
        plan = volume_plan(slot.volumes, item.volumes, holder) or ()
        for i, request in zip(plan, item.volumes, strict=False):
            volume = slot.volumes[i]
            if volume.holder is None:  # a volume the instance already holds stays as it is
                slot.volumes[i] = Volume(volume.name, volume.size_mb, volume.labels, request.ephemeral, holder)

    # --- queries ------------------------------------------------------------------------------------

    def zone_instances(self, process_guid: str) -> dict[str, int]:
        return self.zone_counts.get(process_guid, {})

    def zone_groups(self, process_guid: str) -> list[list[str]]:
        """Zones ordered by instances of the process (fewest first, ties by name), grouped when equal.

        Diego considers zones with equal counts together and moves to a fuller group only when no cell
        of the emptier groups fits.
        """
        cached = self._zone_groups.get(process_guid)
        if cached is not None:
            return cached
        counts = self.zone_counts.get(process_guid)
        if not counts:
            groups = [self.zone_names]
        else:
            ordered = sorted((counts.get(z, 0), z) for z in self.zone_names)
            groups = []
            last = -1
            for n, zone in ordered:
                if n == last:
                    groups[-1].append(zone)
                else:
                    groups.append([zone])
                    last = n
        self._zone_groups[process_guid] = groups
        return groups

    def zone_room(self, zone: str, memory_mb: int, disk_mb: int) -> int:
        """How many instances of this size the zone has room for beyond what the batch's processes owe
        it (`note_batch`): its summed free containers, memory and disk less the owed ones (zone totals,
        not cell by cell: a measure of how full the zone will be, not a promise that a cell fits)."""
        containers, memory, disk = self.zone_left[zone]
        room = containers
        if memory_mb > 0 and memory // memory_mb < room:
            room = memory // memory_mb
        if disk_mb > 0 and disk // disk_mb < room:
            room = disk // disk_mb
        return room

    def zone_groups_by_room(self, process_guid: str, memory_mb: int, disk_mb: int) -> list[list[str]]:
        """The order in which the Diego strategy visits zones for an instance of the process.

        Diego's zone groups (`zone_groups`: instances of the process, fewest first), and for a process
        with an equal share in every zone (`note_batch`: at least as many instances as zones) each
        group split by `zone_room` for the item: most room first, then by name; zones equal in count
        *and* room form one group, within which the lowest score wins. A later group is tried only when
        nothing in the earlier ones fits, so a fuller zone (by count) is still used only when no cell of
        an emptier one can take the instance, and a zone with less room only when the roomier one has
        no cell that fits.

        Why room: a zone-balanced app of n instances has n // Z in every zone and a +1 in n % Z of them;
        only where those +1s go is free to choose. Sending each to the equal-count zone with the most
        room left after what the batch still owes (water-filling) keeps the zones' free capacity level,
        so every later app's equal share still fits and, on a cluster the work fills exactly, the last
        apps find room in every zone. The lowest cell score cannot do this: it sees one cell, not the
        zone, and at scale its memory term varies far more from cell to cell than the zones' free
        capacity differs. (The scale benchmark's shape — 250,000 instances filling 1,000 cells of 250
        containers in zones of 336/332/332 — ended with up to 158 apps 2 to 11 instances apart, the
        last ones placed, by the lowest score and then the zone name.)
        Why only processes with a share: smaller ones (fewer instances than zones, Diego's unique-app
        simulations among them) need no zone to keep room for them and keep Diego's plain lowest score,
        which spreads them evenly over the cells whatever the zones' room.
        """
        groups = self.zone_groups(process_guid)
        if process_guid not in self._shares:
            return groups
        left = self.zone_left
        split: list[list[str]] | None = None  # a copy of `groups` (cached, never changed) once one splits
        for i, group in enumerate(groups):
            if len(group) == 1:
                if split is not None:
                    split.append(group)
                continue
            if split is None:
                split = groups[:i]
            keyed = []
            for zone in group:  # `zone_room`, inlined: this runs for most items
                room, memory, disk = left[zone]
                if memory_mb > 0 and memory // memory_mb < room:
                    room = memory // memory_mb
                if disk_mb > 0 and disk // disk_mb < room:
                    room = disk // disk_mb
                keyed.append((-room, zone))
            if len(keyed) == 2:
                (ra, a), (rb, b) = keyed
                split += [[a, b]] if ra == rb else [[a], [b]] if ra < rb else [[b], [a]]
                continue
            keyed.sort()
            last = None
            for negative_room, zone in keyed:
                if negative_room == last:
                    split[-1].append(zone)
                else:
                    split.append([zone])
                    last = negative_room
        return groups if split is None else split

    def process_instances(self, process_guid: str) -> int:
        """Instances of the process on the cells (ordinary ones, as counted for zone balance)."""
        return sum(self.zone_counts.get(process_guid, EMPTY_COUNTS).values())

    def inflight_limit_reached(self) -> bool:
        limit = self.config.max_inflight_starts
        return limit > 0 and self.total_starting >= limit


def app_id(process_guid: str) -> int:
    """The objective language's AppID: the guid's trailing number, else a stable CRC32 of it."""
    digits = ""
    for ch in reversed(process_guid):
        if not ch.isdigit():
            break
        digits = ch + digits
    if digits:
        return int(digits)
    return zlib.crc32(process_guid.encode())
