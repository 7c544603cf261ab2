"""Diego's auction, written exactly as specified: every feasible cell scored for every item.

This is the executable specification the fast engine is tested against. Zones are visited in groups
of equal instance count of the process (fewest first, ties by zone name). Where Vendue departs from
Diego: for a process with at least as many instances as zones, equal-count zones are further ordered
by their room for the item (most first: free capacity less what the batch still owes each zone), and
only zones equal in count *and* room share a group (`zone_room.ZoneRoom`, which says why). Within a
group the lowest score wins, ties going to the first cell met (zone order, then the cells' input order),
as Diego's `score < winnerScore` loop does. A later group is tried only when nothing in the earlier ones
fits. Tasks ignore zones: the lowest score over all cells in input order. Beyond Diego, a cluster's cache
weight adds the cache term (`scoring.cached_lrp_score`) to the score of an app that names a source blob.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..scoring import cached_lrp_score, lrp_score, task_score, uses_cache
from ..slot import CellSlot
from ..work import LRPStart, TaskStart
from .base import Picker
from .zone_room import ZoneRoom, zone_groups


class DiegoReference(Picker):
    name = "diego"
    room: ZoneRoom | None = None  # set by note_batch; without it, Diego's own zone groups
    # When a placement trace asks (placement_trace.py): every candidate scored for the current item, as
    # (score, rank of its zone in the group, index in zone, position); None: not collected.
    candidates: list[tuple[float, int, int, int]] | None = None
    groups_seen: list[list[str]] = []  # with candidates: the zone groups of the current item, in order

    def note_batch(self, batch: Sequence[LRPStart | TaskStart]) -> None:
        self.room = ZoneRoom(self.state, batch)

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        sw = self.config.starting_container_weight
        bw = self.config.bin_pack_first_fit_weight
        cw, blob = self.config.cache_weight, item.ask.source_blob
        cached = uses_cache(blob, cw)
        memory, disk, pg = item.ask.memory_mb, item.ask.disk_mb, item.process_guid
        scored = self.candidates
        groups = zone_groups(self.room, self.state, item)
        if scored is not None:
            self.groups_seen = groups
        for group in groups:
            best: CellSlot | None = None
            best_score = 0.0
            for rank, zone in enumerate(group):
                for slot in self.feasible_slots(item, self.state.zone_slots[zone]):
                    if cached:
                        score = cached_lrp_score(slot, memory, disk, pg, sw, bw, blob, cw)
                    else:
                        score = lrp_score(slot, memory, disk, pg, sw, bw)
                    if scored is not None:
                        scored.append((score, rank, slot.zone_pos, slot.pos))
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
            score = task_score(slot, item.ask.memory_mb, item.ask.disk_mb, sw)
            if best is None or score < best_score:
                best, best_score = slot, score
        return best
