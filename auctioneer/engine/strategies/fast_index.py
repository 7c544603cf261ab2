"""The fast engines' feasibility index: which cells can take an item, as numpy arrays over input order.

The reference pickers run every filter on every cell for every item. This index instead keeps what
changes as the batch fills (free memory, disk, container slots, ingress IPs, devices) in arrays it
updates through `state.on_reserve`, and caches what never changes during an auction (stack, volume
drivers and placement tags compatibility; label expression matches) per distinct request, so one item
costs a handful of vector operations. Only volume requests, which need a per-cell plan, are checked
cell by cell, and only on the cells that survived everything else. Filters are a conjunction, so the
order they are applied in does not change the answer: positions come back ascending, in input order,
exactly the cells `Picker.feasible_slots` returns.
"""

from __future__ import annotations

import numpy as np

from common.labels import parse_label_expression

from ..filters import COMPATIBILITY, Work
from ..state import AuctionState, CellSlot
from ..types import LRPStart
from .service_filters import VOLUMES, devices_wanted


class FeasibleIndex:
    def __init__(self, state: AuctionState) -> None:
        self.state = state
        slots = state.slots
        self.size = len(slots)
        self.avail_m = np.array([s.avail_m for s in slots], dtype=np.int64)
        self.avail_d = np.array([s.avail_d for s in slots], dtype=np.int64)
        self.avail_c = np.array([s.avail_c for s in slots], dtype=np.int64)
        self.ingress_free = np.array([len(s.ingress_free) for s in slots], dtype=np.int64)
        zone_number = {z: i for i, z in enumerate(state.zone_names)}  # zone names are sorted
        self.zone_of = np.array([zone_number[s.zone] for s in slots], dtype=np.int64)
        self.cell_pos = {s.cell_id: s.pos for s in slots}
        self._devices: dict[str, np.ndarray] = {}
        self._compatible: dict[tuple, np.ndarray] = {}
        self._labels: dict[str, np.ndarray] = {}
        state.on_reserve(self._on_reserve)

    def _on_reserve(self, slot: CellSlot) -> None:
        p = slot.pos
        self.avail_m[p] = slot.avail_m
        self.avail_d[p] = slot.avail_d
        self.avail_c[p] = slot.avail_c
        self.ingress_free[p] = len(slot.ingress_free)
        for kind, free in self._devices.items():
            free[p] = slot.devices_free.get(kind, 0)

    # --- static masks, cached per distinct request -------------------------------------------------

    def compatible(self, item: Work) -> np.ndarray:
        key = (item.stack, item.placement_tags, item.volume_drivers)
        mask = self._compatible.get(key)
        if mask is None:
            mask = np.array(
                [not any(f.rejects(s, item) for f in COMPATIBILITY) for s in self.state.slots], dtype=bool
            )
            self._compatible[key] = mask
        return mask

    def labels(self, expression: str) -> np.ndarray:
        """Cells whose labels match the expression (labels never change during an auction)."""
        mask = self._labels.get(expression)
        if mask is None:
            selector = parse_label_expression(expression)
            mask = np.array([selector.matches(s.cell.labels) for s in self.state.slots], dtype=bool)
            self._labels[expression] = mask
        return mask

    def devices(self, kind: str) -> np.ndarray:
        free = self._devices.get(kind)
        if free is None:
            free = np.array([s.devices_free.get(kind, 0) for s in self.state.slots], dtype=np.int64)
            self._devices[kind] = free
        return free

    # --- the query ----------------------------------------------------------------------------------

    def feasible(self, item: Work, extra: np.ndarray | None = None) -> np.ndarray:
        """Ascending positions of the cells that pass the whole chain; `extra` is a strategy's own mask."""
        mask = self.compatible(item) & (self.avail_m >= item.memory_mb)
        mask &= self.avail_d >= item.disk_mb
        mask &= self.avail_c >= 1
        if extra is not None:
            mask &= extra
        if isinstance(item, LRPStart):
            if item.labels_match:
                mask &= self.labels(item.labels_match)
            if item.ingress_ip:
                mask &= self.ingress_free >= 1
            for kind, count in devices_wanted(item).items():
                mask &= self.devices(kind) >= count
        positions = np.flatnonzero(mask)
        if isinstance(item, LRPStart) and item.volumes and positions.size:
            slots = self.state.slots
            keep = np.array([not VOLUMES.rejects(slots[p], item) for p in positions], dtype=bool)
            positions = positions[keep]
        return positions
