"""The `binpack` strategy: first fit by cell position, while keeping zones balanced.

An LRP instance goes to the zone group Diego would visit first (`state.zone_groups`: zones with the
fewest instances of the process, ties together) that has a cell able to take it, and there to the
feasible cell with the lowest input position — cells fill up in order instead of spreading. A fuller
group is used only when nothing in an emptier one fits. Tasks have no zone balance in Diego's auction
either: the first feasible cell in input order.
"""

from __future__ import annotations

import numpy as np

from ..slot import CellSlot
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker

NAME = "binpack"


class BinpackReference(Picker):
    """Walk the zone groups; in each, scan its cells through the chain and keep the lowest position."""

    name = NAME

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        for group in self.state.zone_groups(item.process_guid):
            members = [slot for zone in group for slot in self.state.zone_slots[zone]]
            candidates = self.feasible_slots(item, members)
            if candidates:
                return min(candidates, key=lambda slot: slot.pos)
        return None

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        candidates = self.feasible_slots(item)
        return candidates[0] if candidates else None


class BinpackFast(FastPicker):
    """All feasible positions at once; the winner minimises (instances in its zone, position).

    Zone groups are exactly the zones of equal instance count in ascending count, so "the emptiest
    group with a feasible cell, then the lowest position" is the lexicographic minimum of that pair.
    """

    name = NAME

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if not positions.size:
            return None
        counts = self.state.zone_instances(item.process_guid)
        per_zone = np.array([counts.get(z, 0) for z in self.state.zone_names], dtype=np.int64)
        in_zone = per_zone[self.cells.zone_of[positions]]
        first = int(np.argmax(in_zone == in_zone.min()))  # positions ascend: the first is the lowest
        return self.state.slots[int(positions[first])]

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        positions = self.feasible_positions(item)
        return self.state.slots[int(positions[0])] if positions.size else None


FAST = BinpackFast
REFERENCE = BinpackReference
