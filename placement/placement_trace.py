"""Why the live auction put each instance where it did (or nowhere), kept cheaply while it runs.

`simulate --explain` (explain.py) replays a batch and scores every cell for one item: far too costly for
every instance of a live auction. Here the auction records, as it goes, only what it computed anyway:

- a placed instance: the candidates its picker scored in the winning zone group (the fast engine scores
  the best cell of each pool, the reference engine every feasible cell), of which the `keep` best are kept
  as compact tuples of the cell's state *at that moment* (free memory, disk, containers, starting, the
  process's instances there); the zone order it followed (instances of the process and room per zone);
- an instance nothing could take: its Failure, whose detail is the per-filter breakdown.

Score components and the deciding tie-break are worked out from those tuples only when the explanations
are wanted (`explanations`), by the very functions that score (scoring.lrp_score_components). At most
`limit` instances are recorded per auction: after that the picker stops collecting, so a huge batch costs
a bounded amount more.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from .scoring import lrp_score_components
from .slot import CellSlot
from .state import AuctionState
from .types import Failure
from .work import LRPStart

KEEP = 5  # candidates kept per placed instance: the winner and the four nearest to it


@dataclass(slots=True)
class _Placed:
    item: LRPStart
    strategy: str
    pos: int  # the winning cell
    groups: list[list[str]]  # the zone groups tried, in order
    zone_counts: dict[str, int] | None  # instances of the process per zone (a copy), when the order mattered
    rooms: list[int] | None  # per zone of `groups` flattened: its room for the item (zone_room.py)
    # each candidate as it stood: (rank of its zone in the group, position, avail_m, avail_d, avail_c,
    # starting, instances of the process); None for a strategy that does not report candidates
    seen: list[tuple[int, int, int, int, int, int, int]] | None
    components: dict[str, float] | None  # a strategy's own components for the winner (no candidates)


class _Seen:
    """A cell as one snapshot saw it: what lrp_score_components reads of a CellSlot."""

    __slots__ = ("avail_m", "avail_d", "avail_c", "total_m", "total_d", "total_c", "starting", "proc_counts",
                 "zone_pos", "cached_blobs")

    def __init__(self, slot: CellSlot, snapshot: tuple, process_guid: str) -> None:
        _rank, _pos, self.avail_m, self.avail_d, self.avail_c, self.starting, n = snapshot
        self.total_m, self.total_d, self.total_c = slot.total_m, slot.total_d, slot.total_c
        self.zone_pos = slot.zone_pos
        self.proc_counts = {process_guid: n}
        self.cached_blobs = slot.cached_blobs


class PlacementTrace:
    """What one auction decided, per LRP instance, for `vendue why`; fed by the scheduler."""

    def __init__(self, limit: int, keep: int = KEEP) -> None:
        self.limit = limit
        self.keep = keep
        self.placed_records: list[_Placed] = []
        self.failures: list[Failure] = []
        self.state: AuctionState | None = None

    @property
    def full(self) -> bool:
        return len(self.placed_records) + len(self.failures) >= self.limit

    def begin(self, state: AuctionState, pickers: dict[str, Any]) -> None:
        """Ask every picker that can to collect the candidates it scores."""
        self.state = state
        for picker in pickers.values():
            if hasattr(picker, "candidates"):
                picker.candidates = [] if self.limit > 0 else None

    def placed(self, picker: Any, strategy: str, item: LRPStart, slot: CellSlot) -> None:
        """Record `item`'s win on `slot`; called before the reservation, so the state is what it met. Only
        copies what changes later (each candidate's free resources and counts); scores are worked out
        when the explanations are read."""
        if self.full:
            picker.candidates = None  # stop collecting: nothing more is recorded this auction
            return
        state = self.state
        assert state is not None
        scored = getattr(picker, "candidates", None)
        seen = components = zone_counts = rooms = None
        groups: list[list[str]] = []
        if scored:
            pg, slots = item.process_guid, state.slots
            if len(scored) > self.keep:  # the reference engine scores every feasible cell
                scored[:] = heapq.nsmallest(self.keep, scored)
            positions = [(c[1], c[3]) for c in scored]
            if len(positions) < self.keep and hasattr(picker, "runners_up"):
                rank = next(r for r, pos in positions if pos == slot.pos)
                taken = {pos for _r, pos in positions}
                positions.extend((rank, pos) for pos in picker.runners_up(item, slot, self.keep - 1)
                                 if pos not in taken)
            seen = []
            for rank, pos in positions:
                s = slots[pos]
                seen.append(
                    (rank, pos, s.avail_m, s.avail_d, s.avail_c, s.starting, s.proc_counts.get(pg, 0))
                )
            scored.clear()
            groups = picker.groups_seen
            if len(groups) > 1:
                zone_counts = dict(state.zone_instances(pg))
                room = picker.room
                if room is not None:
                    ask = item.ask
                    rooms = [room.room(z, ask.memory_mb, ask.disk_mb) for group in groups for z in group]
        elif hasattr(picker, "components"):
            components = picker.components(slot, item)
        self.placed_records.append(
            _Placed(item, strategy, slot.pos, groups, zone_counts, rooms, seen, components)
        )

    def failed(self, failure: Failure) -> None:
        if failure.process_guid is not None and not self.full:
            self.failures.append(failure)

    # --- read back ------------------------------------------------------------------------------

    def explanations(self) -> list[dict[str, Any]]:
        """Every recorded instance as plain data (the wire's PlacementExplanation)."""
        out = [self._explain_placed(record) for record in self.placed_records]
        out.extend(
            {"process_guid": f.process_guid, "index": f.index, "placed": False, "cell_id": None,
             "error": f.error, "detail": f.detail}
            for f in self.failures
        )
        return out

    def _explain_placed(self, record: _Placed) -> dict[str, Any]:
        state = self.state
        assert state is not None
        item, slots = record.item, state.slots
        winner = slots[record.pos]
        sw = state.config.starting_container_weight
        bw = state.config.bin_pack_first_fit_weight
        ranked = []
        for snapshot in record.seen or ():
            slot = slots[snapshot[1]]
            parts = lrp_score_components(
                _Seen(slot, snapshot, item.process_guid),
                item.ask.memory_mb,
                item.ask.disk_mb,
                item.process_guid,
                sw,
                bw,
                item.ask.source_blob,
                state.config.cache_weight,
            )
            ranked.append((parts["score"], snapshot[0], slot.zone_pos, slot.pos, parts))
        ranked.sort(key=lambda r: r[:4])  # the engine's order: score, zone rank in group, index in zone
        ranked = ranked[:self.keep]
        candidates = [{"cell_id": slots[pos].cell_id, "zone": slots[pos].zone, "zone_index": zone_pos,
                       "components": parts, "chosen": pos == record.pos}
                      for _score, _rank, zone_pos, pos, parts in ranked]
        if record.seen is None:
            candidates.append({"cell_id": winner.cell_id, "zone": winner.zone, "zone_index": winner.zone_pos,
                               "components": record.components or {}, "chosen": True})
        zones = []
        flat = [(g, z) for g, group in enumerate(record.groups) for z in group]
        for i, (g, z) in enumerate(flat):
            zones.append({"zone": z, "group": g,
                          "instances": None if record.zone_counts is None else record.zone_counts.get(z, 0),
                          "room": None if record.rooms is None else record.rooms[i]})
        return {
            "process_guid": item.process_guid, "index": item.index, "placed": True, "cell_id": winner.cell_id,
            "strategy": record.strategy, "zones": zones, "candidates": candidates,
            "decided_by": decided_by([r[:2] for r in ranked] if record.seen is not None else None),
            "zone_order": zone_order(zones, winner.zone, item.process_guid),
        }


def decided_by(ranked: list[tuple[float, int]] | None) -> str:
    """What set the winner (the first of (score, zone rank) best first) apart from the next: the lowest
    score; at equal score, the zone met first in the group; in the same zone, the lowest cell index."""
    if ranked is None:
        return "strategy"
    if len(ranked) < 2:
        return "only candidate"
    (score, rank), (next_score, next_rank) = ranked[0], ranked[1]
    if score != next_score:
        return "score"
    return "zone order" if rank != next_rank else "cell index"


def zone_order(zones: list[dict[str, Any]], chosen: str, process_guid: str) -> str:
    """Why the winner's zone was tried before the zones of later groups (empty with one group): fewer
    instances of the process there, or, at equal count, more room for it."""
    mine = next((z for z in zones if z["zone"] == chosen), None)
    later = [z for z in zones if mine is not None and z["group"] > mine["group"]]
    if mine is None or not later:
        return ""
    if mine["group"] > 0:
        return f"no cell of the zones tried before {chosen} fits"
    if any(z["instances"] > mine["instances"] for z in later):
        return (f"{chosen} first: fewest instances of {process_guid} ({mine['instances']}; "
                + ", ".join(f"{z['zone']}: {z['instances']}" for z in later) + ")")
    return (f"{chosen} first: most room for {process_guid} ({mine['room']} instances; "
            + ", ".join(f"{z['zone']}: {z['room']}" for z in later) + ")")
