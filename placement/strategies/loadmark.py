"""The `loadmark` strategy: place on the least loaded host, spreading a process's instances.

    load mark = (swap_used/swap_total × 1 + mem_used/mem_total × 0.2 + disk_used/disk_total × 0.5 + la) × 100
    la        = load5 / (cores × 2), counted as 0 while it is ≤ 1 (a host not yet overloaded)

The coefficients and the critical marks come from `SchedulerConfig.loadmark`. A cell above any
critical mark (load mark 300, memory 80 %, swap 50 %, disk 85 % by default; strictly above, judged on
the cell as it is before this item) is filtered out. Among the rest, an LRP instance goes to a cell
without an instance of its process while there is one, and the least loaded cell wins (ties: input
order). Tasks: the least loaded feasible cell.

Host metrics come from `cell.host`; memory and disk totals fall back to the cell's totals, and used to
total − available when absent. Work placed in this batch adds its memory and disk to used, so a cell's
mark rises as the batch fills it. No swap (swap_total 0) means no swap term.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ..cell_offer import HostMetrics
from ..columns import CellColumns
from ..filters import Example, Work
from ..slot import CellSlot
from ..state import AuctionState
from ..types import LoadMarkConfig
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker

NAME = "loadmark"

NO_HOST = HostMetrics()


@dataclass(slots=True, frozen=True)
class HostUsage:
    """Fractions used (0..1) and the load term `la` of one host."""

    swap: float
    memory: float
    disk: float
    load: float


def _fraction(used: float, total: float) -> float:
    return used / total if total > 0 else 0.0


def host_usage(slot: CellSlot) -> HostUsage:
    host = slot.cell.host or NO_HOST
    available = slot.cell.available  # as advertised, before this batch
    mem_total = host.mem_total_mb if host.mem_total_mb is not None else slot.total_m
    disk_total = host.disk_total_mb if host.disk_total_mb is not None else slot.total_d
    if host.mem_used_mb is not None:
        mem_used = host.mem_used_mb + (available.memory_mb - slot.avail_m)
    else:
        mem_used = mem_total - slot.avail_m
    if host.disk_used_mb is not None:
        disk_used = host.disk_used_mb + (available.disk_mb - slot.avail_d)
    else:
        disk_used = disk_total - slot.avail_d
    la = host.load5 / (max(host.cores, 1) * 2)
    return HostUsage(
        swap=_fraction(host.swap_used_mb, host.swap_total_mb),
        memory=_fraction(mem_used, mem_total),
        disk=_fraction(disk_used, disk_total),
        load=la if la > 1 else 0.0,
    )


def load_mark_of(usage: HostUsage, config: LoadMarkConfig) -> float:
    return (
        usage.swap * config.swap_weight
        + usage.memory * config.memory_weight
        + usage.disk * config.disk_weight
        + usage.load
    ) * 100


def load_mark(slot: CellSlot, config: LoadMarkConfig) -> float:
    return load_mark_of(host_usage(slot), config)


def above_critical(slot: CellSlot, config: LoadMarkConfig) -> bool:
    usage = host_usage(slot)
    return (
        load_mark_of(usage, config) > config.critical_load_mark
        or usage.memory > config.critical_memory
        or usage.swap > config.critical_swap
        or usage.disk > config.critical_disk
    )


def least_loaded(candidates: Sequence[CellSlot], config: LoadMarkConfig) -> CellSlot | None:
    """The candidate with the lowest load mark (ties: input order)."""
    if not candidates:
        return None
    return min(candidates, key=lambda slot: (load_mark(slot, config), slot.pos))


def preferred(candidates: Sequence[CellSlot], item: LRPStart, config: LoadMarkConfig) -> CellSlot | None:
    """The cell the strategy places an LRP instance on among feasible candidates: one without an instance
    of its process while there is one, then the least loaded. The reference picker's rule; the rebalance
    planner follows the same order over its rankings of cells (rebalance/load_mark.py)."""
    without = [slot for slot in candidates if slot.proc_counts.get(item.process_guid, 0) == 0]
    return least_loaded(without or candidates, config)


class CriticalLoadFilter:
    name = "critical_load"
    example = Example(rejected={"host": HostMetrics(swap_used_mb=90, swap_total_mb=100)})  # swap above 50 %
    resource = False

    def __init__(self, config: LoadMarkConfig) -> None:
        self.config = config

    def request_key(self, item: Work) -> Hashable:
        return None  # judged on the cell alone

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return above_critical(slot, self.config)

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        # a derived column: recomputed for the reserved cell only, as its mark rises
        return cells.derived(self, self.below_critical, bool)  # keyed by the filter: hashing the config costs

    def below_critical(self, slot: CellSlot) -> bool:
        return not above_critical(slot, self.config)

    def error(self, item: Work) -> str:
        return "found no compatible cell below the critical load marks"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} above critical load"


class LoadmarkReference(Picker):
    """Every feasible cell's mark computed afresh for every item."""

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.filters = (CriticalLoadFilter(self.config.loadmark),)

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        return preferred(self.feasible_slots(item), item, self.config.loadmark)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return least_loaded(self.feasible_slots(item), self.config.loadmark)


class LoadmarkFast(FastPicker):
    """Marks (and the critical filter's mask) as derived columns, recomputed only for the cell a
    reservation touched."""

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.filters = (CriticalLoadFilter(self.config.loadmark),)

    def marks(self) -> np.ndarray:
        return self.cells.derived(self, self.mark)  # keyed by the picker: hashing the config costs

    def mark(self, slot: CellSlot) -> float:
        return load_mark(slot, self.config.loadmark)

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        positions = self.feasible_positions(item)
        holding = self.state.holding(item.process_guid)
        if holding and positions.size:
            occupied = np.fromiter((p for p, n in holding.items() if n > 0), dtype=np.int64)
            without = positions[~np.isin(positions, occupied)]
            if without.size:
                positions = without
        return self._least_loaded(positions)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return self._least_loaded(self.feasible_positions(item))

    def _least_loaded(self, positions: np.ndarray) -> CellSlot | None:
        if not positions.size:
            return None
        return self.state.slots[int(positions[np.argmin(self.marks()[positions])])]


FAST = LoadmarkFast
REFERENCE = LoadmarkReference
