"""The working state of one auction: a mutable copy of every cell that each reservation updates.

Both engines (fast and reference) drive the same `AuctionState`; only how they *choose* a cell differs.
The state also keeps the auction's cells as numpy columns (`columns`, see columns.py), which the
vectorised filters and the fast strategies read.
Indexes that a fast strategy keeps subscribe with `on_reserve` (and `on_count`, to learn whose instance
count rose) and are told of every reservation, whichever strategy made it, so strategies can be mixed
within one batch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence

from .cell_offer import CellOffer
from .columns import CellColumns
from .filters.registry import request_filters
from .slot import CellSlot
from .types import SchedulerConfig
from .work import LRPStart, TaskStart

NO_CELLS: dict[int, int] = {}  # `holding`'s answer for a process no cell holds; never written to


ReserveListener = Callable[[CellSlot], None]
# (cell, process guid or None for a task, the cell's new count of that process's instances / of tasks)
CountListener = Callable[[CellSlot, "str | None", int], None]


class AuctionState:
    """Every cell of one auction plus the counters placement needs, kept current as work is reserved."""

    def __init__(
        self, cells: Sequence[CellOffer], config: SchedulerConfig, processes: Iterable[str] | None = None
    ) -> None:
        """`processes`: those the auction places (None: every process the cells hold), indexed up front;
        any other is indexed when first asked about (`holding`)."""
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
        # process guid -> {cell pos: ordinary instances}, for the processes indexed so far (read through
        # `holding`). Cells report some 250,000 counts at full scale, of the processes of earlier
        # auctions mostly; an auction asks about the few it places.
        self._proc_cells: dict[str, dict[int, int]] = {}
        # process guid -> {zone: instances}: made on first use from the above, then kept current
        self.zone_counts: dict[str, dict[str, int]] = {}
        self.task_cells: dict[int, int] = {}
        for slot in self.slots:
            if slot.task_count:
                self.task_cells[slot.pos] = slot.task_count
        self._index(None if processes is None else set(processes))
        self.total_starting = sum(s.starting for s in self.slots)
        self.columns = CellColumns(self.slots, self.zone_names)
        self.version = 0
        self.listeners: list[ReserveListener] = []
        self.count_listeners: list[CountListener] = []
        self.lrps_placed_by_process: dict[str, int] = {}
        self._zone_groups: dict[str, list[list[str]]] = {}
        # process guid -> instances of it in this auction's batch (deduped); filled by the scheduler through
        # `note_batch`, read by strategies that need an app's size (the objective's ai.TotalInstances).
        self.batch_instances: dict[str, int] = {}

    def note_batch(self, items: Sequence[LRPStart | TaskStart]) -> None:
        for item in items:
            if isinstance(item, LRPStart):
                self.batch_instances[item.process_guid] = self.batch_instances.get(item.process_guid, 0) + 1

    # --- reservations -------------------------------------------------------------------------------

    def on_reserve(self, listener: ReserveListener) -> None:
        self.listeners.append(listener)

    def on_count(self, listener: CountListener) -> None:
        """Also be told whose count rose on the cell: the process guid (None for a task) and its new count."""
        self.count_listeners.append(listener)

    def reserve_lrp(self, slot: CellSlot, item: LRPStart) -> None:
        ask = item.ask
        self._reserve(slot, ask.memory_mb, ask.disk_mb)
        pg = item.process_guid
        cells_of = self.holding(pg)  # indexed before the count changes
        n = slot.proc_counts.get(pg, 0) + 1
        slot.proc_counts[pg] = n
        if cells_of is NO_CELLS:
            cells_of = self._proc_cells[pg] = {}
        cells_of[slot.pos] = n
        zc = self.zone_counts.get(pg)
        if zc is not None:  # else made from proc_cells when first asked for
            zc[slot.zone] = zc.get(slot.zone, 0) + 1
        self._zone_groups.pop(pg, None)
        self.lrps_placed_by_process[pg] = self.lrps_placed_by_process.get(pg, 0) + 1
        for consumed in request_filters(item):  # what the placement uses up: an ingress IP, devices, volumes
            consumed.claim(slot, item)
        self.columns.reserved(slot)
        for listener in self.count_listeners:
            listener(slot, pg, n)
        self._notify(slot)

    def reserve_task(self, slot: CellSlot, item: TaskStart) -> None:
        self._reserve(slot, item.ask.memory_mb, item.ask.disk_mb)
        slot.task_count += 1
        self.task_cells[slot.pos] = slot.task_count
        self.columns.reserved(slot)
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

    def _notify(self, slot: CellSlot) -> None:
        for listener in self.listeners:
            listener(slot)

    # --- the process index -------------------------------------------------------------------------

    def _index(self, processes: set[str] | None) -> None:
        """Index these processes (None: every one the cells hold) in one pass over the cells."""
        proc_cells = self._proc_cells
        for pg in processes or ():
            proc_cells[pg] = {}
        for slot in self.slots:
            pos, counts = slot.pos, slot.proc_counts
            # dict_keys & set iterates the smaller in C: a cell's hundreds of counts cost little when
            # few of them are of the processes asked for
            for pg in counts if processes is None else counts.keys() & processes:
                cells_of = proc_cells.get(pg)
                if cells_of is None:
                    proc_cells[pg] = {pos: counts[pg]}
                else:
                    cells_of[pos] = counts[pg]
        self._indexed_all = processes is None

    def holding(self, process_guid: str) -> dict[int, int]:
        """Cell position -> ordinary instances of the process there (cells holding none left out). Read
        only; kept current by every reservation."""
        cells_of = self._proc_cells.get(process_guid)
        if cells_of is None:
            if self._indexed_all:
                return NO_CELLS
            cells_of = self._proc_cells[process_guid] = {
                slot.pos: slot.proc_counts[process_guid]
                for slot in self.slots
                if process_guid in slot.proc_counts
            }
        return cells_of

    def processes(self) -> list[str]:
        """Every process with an ordinary instance on some cell, reserved ones included."""
        found: dict[str, int] = {}  # a dict: first-seen order, whatever the hash seed
        for slot in self.slots:
            found.update(slot.proc_counts)
        return list(found)

    # --- queries ------------------------------------------------------------------------------------

    def zone_instances(self, process_guid: str) -> dict[str, int]:
        """Instances of the process per zone (zones holding none left out). Read only."""
        counts = self.zone_counts.get(process_guid)
        if counts is None:
            counts = self.zone_counts[process_guid] = {}
            slots = self.slots
            for pos, n in self.holding(process_guid).items():
                zone = slots[pos].zone
                counts[zone] = counts.get(zone, 0) + n
        return counts

    def zone_groups(self, process_guid: str) -> list[list[str]]:
        """Zones ordered by instances of the process (fewest first, ties by name), grouped when equal.

        Diego considers zones with equal counts together and moves to a fuller group only when no cell
        of the emptier groups fits.
        """
        cached = self._zone_groups.get(process_guid)
        if cached is not None:
            return cached
        counts = self.zone_instances(process_guid)
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
