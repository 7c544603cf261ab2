"""Diego's auction, written exactly as specified: every feasible cell scored for every item.

This is the executable specification the fast engine is tested against. Zones are visited in groups
of equal instance count of the process (fewest first, ties by zone name); within a group the lowest
score wins, ties going to the first cell met (zone order, then the cells' input order), as Diego's
`score < winnerScore` loop does. A fuller group is tried only when nothing in the emptier ones fits.
Tasks ignore zones: the lowest score over all cells in input order.
"""

from __future__ import annotations

from ..scoring import lrp_score, task_score
from ..state import CellSlot
from ..types import LRPStart, TaskStart
from .base import Picker


class DiegoReference(Picker):
    name = "diego"

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        sw = self.config.starting_container_weight
        bw = self.config.bin_pack_first_fit_weight
        for group in self.state.zone_groups(item.process_guid):
            best: CellSlot | None = None
            best_score = 0.0
            for zone in group:
                for slot in self.feasible_slots(item, self.state.zone_slots[zone]):
                    score = lrp_score(slot, item.memory_mb, item.disk_mb, item.process_guid, sw, bw)
                    if best is None or score < best_score:
                        best, best_score = slot, score
            if best is not None:
                return best
        return None

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        sw = self.config.starting_container_weight
        best: CellSlot | None = None
        best_score = 0.0
        for slot in self.feasible_slots(item):
            score = task_score(slot, item.memory_mb, item.disk_mb, sw)
            if best is None or score < best_score:
                best, best_score = slot, score
        return best
