"""The resource filters, checked last: free memory, disk and a container slot.

`least_free` says once the least free memory, disk and containers a cell must have for an item, and
`has_room` whether free amounts meet them: each filter's scalar form compares a slot's free amount with
its part, its vectorised form the column of every cell's, and a strategy holding free amounts of its own
(the Diego strategy's bounds of a pool's free amounts) asks `has_room`, the three filters' verdict in one
call. Only an inner loop that cannot afford a call per comparison (the Diego strategy's cells in one
state, cell by cell) reads the thresholds from `least_free` once per item and compares them itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .base import Example, Work

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot


def least_free(item: Work) -> tuple[int, int, int]:
    """The least free memory (MB), disk (MB) and containers a cell must have for the item."""
    ask = item.ask
    return ask.memory_mb, ask.disk_mb, 1


def has_room(free: Sequence[int], need: tuple[int, int, int]) -> bool:
    """Whether free memory (MB), disk (MB) and containers, `free[:3]`, meet an item's `least_free`: a cell
    with them passes MEMORY, DISK and CONTAINERS alike (resources_test.py holds the four to the same
    verdicts)."""
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]


class MemoryFilter:
    name = "memory"
    example = Example(lrp={"memory_mb": 50}, rejected={"available": (40, 100, 10)})
    resource = True

    def request_key(self, item: Work) -> Hashable:
        return least_free(item)[0]

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_m < least_free(item)[0]

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        return cells.avail_m >= least_free(item)[0]

    def error(self, item: Work) -> str:
        return "insufficient resources: memory"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        largest = max(s.avail_m for s in rejected)
        return f"{len(rejected)} insufficient memory (largest free {largest} MB, need {item.ask.memory_mb})"


class DiskFilter:
    name = "disk"
    example = Example(lrp={"disk_mb": 50}, rejected={"available": (100, 40, 10)})
    resource = True

    def request_key(self, item: Work) -> Hashable:
        return least_free(item)[1]

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_d < least_free(item)[1]

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        return cells.avail_d >= least_free(item)[1]

    def error(self, item: Work) -> str:
        return "insufficient resources: disk"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        largest = max(s.avail_d for s in rejected)
        return f"{len(rejected)} insufficient disk (largest free {largest} MB, need {item.ask.disk_mb})"


class ContainerFilter:
    name = "containers"
    example = Example(rejected={"available": (100, 100, 0)})
    resource = True

    def request_key(self, item: Work) -> Hashable:
        return None  # the same for every item: one container

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_c < least_free(item)[2]

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        return cells.avail_c >= least_free(item)[2]

    def error(self, item: Work) -> str:
        return "insufficient resources: containers"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} no free container slots"


MEMORY = MemoryFilter()
DISK = DiskFilter()
CONTAINERS = ContainerFilter()
