"""The zone-spread rule: an app whose instances per zone differ by more than one while a zone with fewer
has a cell with room: an instance of its fullest zone (from the cell holding most of it) goes to the best
cell of its emptiest zone (the auction's filter chain, and the app's strategy's order of cells:
`Planner.target_order`), until within one. It runs first, and again last (`plan_moves`): the later
rules' moves may make room where an app lacked some."""

from __future__ import annotations

import heapq

from ..slot import CellSlot
from ..work import LRPStart
from .moves import ZONE_SPREAD
from .planner import Planner, zone_skew


def spread_zones(planner: Planner) -> None:
    """Every app in guid order; an app left skewed for want of room is tried again after a pass that moved
    something (another app's moves may have made room where it lacked some)."""
    pending = sorted(planner.movable)
    while pending and not planner.full():
        made = len(planner.moves)
        pending = [pg for pg in pending if not spread_app(planner, pg)]
        if len(planner.moves) == made:
            return


def spread_app(planner: Planner, pg: str) -> bool:
    """Move the app's instances until its zones are within one; False when an emptier zone lacked room."""
    item = planner.requests[pg]
    zones = planner.eligible_zones(item)
    counts = planner.zone_counts[pg]
    blocked: set[str] = set()  # emptier zones found without room for it
    ranked: dict[str, list] = {}  # zone -> its cells scored for this app (zone_target)
    while not planner.full():
        skew = zone_skew(counts, zones)
        if skew <= 1:
            return True
        most = max(counts.get(z, 0) for z in zones)
        open_zones = [z for z in zones if z not in blocked and counts.get(z, 0) <= most - 2]
        if not open_zones:
            return False
        low = min(open_zones, key=lambda z: (counts.get(z, 0), z))
        source = planner.source_in(pg, [z for z in zones if counts.get(z, 0) == most])
        if source is None:
            return True  # what is left there is pinned: no move can help
        target = zone_target(planner, item, low, ranked)
        if target is None:
            blocked.add(low)
            continue
        ranked.pop(source[0].zone, None)  # its cells change: scored again if it is a target later
        after = {**counts, source[0].zone: most - 1, low: counts.get(low, 0) + 1}
        planner.move(
            item,
            source[1],
            source[0],
            target,
            ZONE_SPREAD,
            f"{source[0].zone}->{low} instances {most}/{counts.get(low, 0)}",
            skew - zone_skew(after, zones),
        )
    return True


def zone_target(planner: Planner, item: LRPStart, zone: str, ranked: dict[str, list]) -> CellSlot | None:
    """`Planner.best_target` over a zone for one app's run of moves into it: the zone's feasible cells
    ordered once (`Planner.target_order`) and kept in a heap; a popped cell is checked again (the app's
    own moves change it) and pushed back with its new place once chosen."""
    order = planner.target_order(item)
    picker = planner.picker(item)
    heap = ranked.get(zone)
    if heap is None:
        heap = ranked[zone] = [
            (order(s), s.pos, s) for s in picker.feasible_slots(item, planner.state.zone_slots[zone])
        ]
        heapq.heapify(heap)
    while heap:
        key, pos, slot = heap[0]
        now = order(slot)
        if not picker.feasible_slots(item, [slot]):
            heapq.heappop(heap)
        elif now != key:
            heapq.heapreplace(heap, (now, pos, slot))
        else:
            return slot
    return None
