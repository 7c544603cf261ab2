"""The auction's cells as numpy columns: what the vectorised filters and the fast strategies read.

One `CellColumns` per auction, owned by the `AuctionState` and told by it of every reservation (before
any listener runs), so every strategy reads the same columns whichever strategy reserved. The entries
of reserved cells are written when the columns are next read, not at each reservation: a strategy
that never reads them while picking (the Diego strategy, until a diagnosis) pays nothing for them.

Three kinds of column:
- what a reservation changes and every auction needs (free memory, disk, containers, ingress IPs);
- devices of one kind and *derived* columns (a per-cell value a strategy or filter computes from a
  slot, such as a load mark), made on first use and then recomputed for the reserved cell only;
- *classes* of equivalent cells per static filter: cells the filter cannot tell apart (same stacks,
  same tags, same labels...) share a class, so the filter's scalar form runs once per class and its
  verdict is spread over the cells (`static_mask`), cached per distinct request. This generalises the
  signature pools of the Diego strategy to every filter that depends only on what an auction never
  changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

import numpy as np

from .slot import CellSlot
from .work import Work

SlotValue = Callable[[CellSlot], Any]


class ClassedFilter(Protocol):
    """What the columns read of a static filter (`filters.base.StaticFilter`) to class the cells and
    spread its verdicts over them."""

    def cell_key(self, slot: CellSlot) -> Hashable: ...

    def request_key(self, item: Work) -> Hashable: ...

    def rejects(self, slot: CellSlot, item: Work) -> bool: ...


class CellClasses:
    """The cells grouped by what one static filter reads of them."""

    __slots__ = ("class_of", "representatives")

    def __init__(self, slots: Sequence[CellSlot], cell_key: Callable[[CellSlot], Hashable]) -> None:
        number: dict[Hashable, int] = {}
        self.representatives: list[CellSlot] = []
        classes = []
        for slot in slots:
            key = cell_key(slot)
            found = number.get(key)
            if found is None:
                found = number[key] = len(self.representatives)
                self.representatives.append(slot)
            classes.append(found)
        self.class_of = np.array(classes, dtype=np.int64).reshape(len(slots))


class CellColumns:
    def __init__(self, slots: Sequence[CellSlot], zone_names: Sequence[str]) -> None:
        self.slots = slots
        self.size = n = len(slots)
        self._avail_m = np.array([s.avail_m for s in slots], dtype=np.int64).reshape(n)
        self._avail_d = np.array([s.avail_d for s in slots], dtype=np.int64).reshape(n)
        self._avail_c = np.array([s.avail_c for s in slots], dtype=np.int64).reshape(n)
        self._ingress_free = np.array([len(s.ingress_free) for s in slots], dtype=np.int64).reshape(n)
        self._reserved: dict[int, CellSlot] = {}  # cells reserved on since the columns were last read
        zone_number = {z: i for i, z in enumerate(zone_names)}
        self.zone_of = np.array([zone_number[s.zone] for s in slots], dtype=np.int64).reshape(n)
        self.cell_pos = {s.cell_id: s.pos for s in slots}
        self.with_volumes = [s.pos for s in slots if s.volumes]  # volumes are never added during an auction
        self._devices: dict[str, np.ndarray] = {}
        self._derived: dict[Hashable, tuple[np.ndarray, SlotValue]] = {}
        self._classes: dict[ClassedFilter, CellClasses] = {}
        self._static: dict[tuple[ClassedFilter, Hashable], np.ndarray] = {}

    def reserved(self, slot: CellSlot) -> None:
        """A reservation changed the cell: its entries are rewritten before the columns are next read."""
        self._reserved[slot.pos] = slot

    def _catch_up(self) -> None:
        for pos, slot in self._reserved.items():
            self._avail_m[pos] = slot.avail_m
            self._avail_d[pos] = slot.avail_d
            self._avail_c[pos] = slot.avail_c
            self._ingress_free[pos] = len(slot.ingress_free)
            for kind, free in self._devices.items():
                free[pos] = slot.devices_free.get(kind, 0)
            for column, value_of in self._derived.values():
                column[pos] = value_of(slot)
        self._reserved.clear()

    @property
    def avail_m(self) -> np.ndarray:
        """Free memory per cell (MB)."""
        if self._reserved:
            self._catch_up()
        return self._avail_m

    @property
    def avail_d(self) -> np.ndarray:
        """Free disk per cell (MB)."""
        if self._reserved:
            self._catch_up()
        return self._avail_d

    @property
    def avail_c(self) -> np.ndarray:
        """Free container slots per cell."""
        if self._reserved:
            self._catch_up()
        return self._avail_c

    @property
    def ingress_free(self) -> np.ndarray:
        """Free ingress IPs per cell."""
        if self._reserved:
            self._catch_up()
        return self._ingress_free

    def devices(self, kind: str) -> np.ndarray:
        """Free devices of one kind per cell."""
        if self._reserved:
            self._catch_up()
        free = self._devices.get(kind)
        if free is None:
            free = self._devices[kind] = np.array([s.devices_free.get(kind, 0) for s in self.slots],
                                                  dtype=np.int64).reshape(self.size)
        return free

    def derived(self, key: Hashable, value_of: SlotValue, dtype: type = np.float64) -> np.ndarray:
        """`value_of(slot)` per cell, made on first use under `key`, then kept current."""
        if self._reserved:
            self._catch_up()
        found = self._derived.get(key)
        if found is None:
            column: np.ndarray = np.array([value_of(s) for s in self.slots], dtype=dtype).reshape(self.size)
            found = self._derived[key] = (column, value_of)
        return found[0]

    def classes(self, static: ClassedFilter) -> CellClasses:
        found = self._classes.get(static)
        if found is None:
            found = self._classes[static] = CellClasses(self.slots, static.cell_key)
        return found

    def static_mask(self, static: ClassedFilter, item: Work) -> np.ndarray:
        """Cells the static filter admits for the item: its scalar form once per class of cells."""
        return self.class_mask(static, static.request_key(item), lambda slot: not static.rejects(slot, item))

    def class_mask(
        self, static: ClassedFilter, key: Hashable, holds: Callable[[CellSlot], bool]
    ) -> np.ndarray:
        """Per cell, `holds` of its class's representative, cached under `key`: `holds` may read of a
        cell only what the filter's `cell_key` does."""
        cache_key = (static, key)
        mask = self._static.get(cache_key)
        if mask is None:
            classes = self.classes(static)
            verdicts = np.array([holds(s) for s in classes.representatives], dtype=bool)
            mask = self._static[cache_key] = verdicts[classes.class_of]
        return mask
