"""Diego's auction, written exactly as specified: every feasible cell scored for every item.

This is the executable specification the fast engine is tested against. Zones are visited in groups
of equal instance count of the process (fewest first). For a process with at least as many instances
as zones, zones of equal count are further ordered by their room for the item (most first: free
capacity less what the batch still owes the zone, `AuctionState.zone_room`), then by name, and only
zones equal in count *and* room share a group (`AuctionState.zone_groups_by_room`); for a smaller
process a group is all zones of equal count, in name order. Within a group the lowest score wins, ties
going to the first cell met (zone order, then the cells' input order), as Diego's `score < winnerScore`
loop does. A later group is tried only when nothing in the earlier ones fits. Tasks ignore zones: the
lowest score over all cells in input order.

Why room before score between equal-count zones: which zones get an app's n % Z extra instances is the
only freedom a zone-balanced split has, and spending it on filling the zones evenly is what keeps every
app within one instance per zone on a cluster the work fills exactly. Diego gives equal-count zones
no defined order (they come from a Go map) and takes the lowest score among them; by that and then
by name, a zone with more room (more cells) kept it until the last apps, which then found room in
that zone only. With the batch order (`batch.order_batch`: each app's last partial round last) this is the
whole of the zone-balance rule; see `AuctionState.zone_groups_by_room`.
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
        for group in self.state.zone_groups_by_room(item.process_guid, item.memory_mb, item.disk_mb):
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
