"""Rebalancing: the moves that restore the balance the auction would have produced (issue #18).

Diego never moves a running instance, so after a zone returns it stays empty until apps restart. The
planner looks at where instances run now and proposes moves, each judged with the engine's own filter
chain (`Picker.feasible_slots`: stack, tags, label expressions, volumes, devices, the strategy's own
filters, resources) and scored with the auction's own cell score (`scoring.lrp_score`), never a copy:

1. zone spread: an app whose instances per zone differ by more than one while a zone with fewer has a
   cell with room: an instance of its fullest zone (from the cell holding most of it) goes to the best
   cell of its emptiest zone;
2. cell load: a cell whose memory fraction is more than `load_tolerance` above the mean of the cells:
   an instance of the app it holds most of goes to the best cell that ends up less loaded than the
   source was, in the same zone when one fits (so the spread of step 1 holds), else in a zone the app
   has fewer instances in.

Pinned instances never move: those of a `keep-replicas` LRP (the caller names them) and those holding
an ephemeral volume on their cell (volume stickiness: their data is there). Plain data and functions;
the BBS runs this on the state it holds and carries the moves out make-before-break.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .filters.volumes import instance_key
from .scoring import lrp_score
from .state import AuctionState, CellSlot
from .strategies import pickers
from .strategies.base import Picker
from .types import Cell, LRPStart, SchedulerConfig

ZONE_SPREAD = "zone_spread"
CELL_LOAD = "cell_load"


@dataclass(slots=True, frozen=True)
class Placed:
    """One running instance: its process, index and the cell it runs on."""

    process_guid: str
    index: int
    cell_id: str


@dataclass(slots=True, frozen=True)
class Move:
    """Move instance `index` of `process_guid` from `from_cell` to `to_cell`. `gain`: for a zone-spread
    move, how much the app's zone skew (most minus fewest instances per zone) drops; for a load move, how
    much the source cell's memory fraction drops."""

    process_guid: str
    index: int
    from_cell: str
    to_cell: str
    from_zone: str
    to_zone: str
    reason: str
    detail: str
    gain: float

    def to_wire(self) -> dict[str, object]:
        return {
            "process_guid": self.process_guid,
            "index": self.index,
            "from_cell": self.from_cell,
            "to_cell": self.to_cell,
            "from_zone": self.from_zone,
            "to_zone": self.to_zone,
            "reason": self.reason,
            "detail": self.detail,
            "gain": round(self.gain, 4),
        }


@dataclass(slots=True, frozen=True)
class RebalanceConfig:
    max_moves: int = 0  # 0: every move found
    load_tolerance: float = 0.10  # a cell more than this above the mean memory fraction is overloaded
    apps: frozenset[str] | None = None  # only these apps' instances move (None: every app)


def memory_fraction(slot: CellSlot) -> float:
    return 1.0 - slot.avail_m / (slot.total_m or 1)


def zone_skew(counts: dict[str, int], zones: Iterable[str]) -> int:
    values = [counts.get(z, 0) for z in zones]
    return max(values) - min(values) if values else 0


class _Planner:
    """The working copy the moves are planned on: the auction's cell slots, changed as moves are made."""

    def __init__(
        self,
        cells: Sequence[Cell],
        placed: Sequence[Placed],
        requests: dict[str, LRPStart],
        pinned_apps: frozenset[str],
        config: SchedulerConfig,
        rebalance: RebalanceConfig,
    ) -> None:
        self.state = AuctionState(cells, config, set(requests))
        self.slot_of = {s.cell_id: s for s in self.state.slots}
        self.requests = requests
        self.config = config
        self.rebalance = rebalance
        self._pickers: dict[str, Picker] = {}
        self._eligible: dict[tuple, list[str]] = {}
        held_volumes = {v.holder for s in self.state.slots for v in s.volumes if v.holder and v.ephemeral}
        # process guid -> cell id -> indices running there (movable ones only)
        self.movable: dict[str, dict[str, list[int]]] = {}
        self.zone_counts: dict[str, dict[str, int]] = {}
        for p in placed:
            slot = self.slot_of.get(p.cell_id)
            if slot is None or p.process_guid not in requests:
                continue
            counts = self.zone_counts.setdefault(p.process_guid, {})
            counts[slot.zone] = counts.get(slot.zone, 0) + 1
            if p.process_guid in pinned_apps or instance_key(p.process_guid, p.index) in held_volumes:
                continue
            if rebalance.apps is not None and p.process_guid not in rebalance.apps:
                continue
            self.movable.setdefault(p.process_guid, {}).setdefault(p.cell_id, []).append(p.index)
        self.moves: list[Move] = []

    def picker(self, item: LRPStart) -> Picker:
        name = item.strategy or self.config.strategy
        found = self._pickers.get(name)
        if found is None:
            found = self._pickers[name] = pickers(self.config.engine)[name](self.state)
        return found

    def full(self) -> bool:
        return 0 < self.rebalance.max_moves <= len(self.moves)

    def best_target(self, item: LRPStart, slots: Sequence[CellSlot]) -> CellSlot | None:
        """The cell the auction would pick among these: feasible under the whole chain, lowest score."""
        feasible = self.picker(item).feasible_slots(item, slots)
        if not feasible:
            return None
        weight, pack = self.config.starting_container_weight, self.config.bin_pack_first_fit_weight
        return min(
            feasible,
            key=lambda s: lrp_score(s, item.memory_mb, item.disk_mb, item.process_guid, weight, pack),
        )

    def eligible_zones(self, item: LRPStart) -> list[str]:
        """Zones with a cell the app could run on were it empty: every filter but the resource ones. Apps
        asking the same of a cell share the answer (at 1,000 apps and 1,000 cells, a second per plan)."""
        ask = (
            item.strategy,
            item.stack,
            item.placement_tags,
            item.volume_drivers,
            item.labels_match,
            item.volumes,
            item.ingress_ip,
            item.devices,
        )
        found = self._eligible.get(ask)
        if found is None:
            chain = [f for f in self.picker(item).chain(item) if not f.resource]
            found = self._eligible[ask] = [
                z
                for z in self.state.zone_names
                if any(not any(f.rejects(s, item) for f in chain) for s in self.state.zone_slots[z])
            ]
        return found

    def _zone_target(self, item: LRPStart, zone: str, ranked: dict[str, list]) -> CellSlot | None:
        """`best_target` over a zone for one app's run of moves into it: the zone's feasible cells scored
        once and kept in a heap; a popped cell is checked again (the app's own moves change it) and pushed
        back with its new score once chosen."""
        weight, pack = self.config.starting_container_weight, self.config.bin_pack_first_fit_weight
        heap = ranked.get(zone)
        if heap is None:
            heap = ranked[zone] = [
                (lrp_score(s, item.memory_mb, item.disk_mb, item.process_guid, weight, pack), s.pos, s)
                for s in self.picker(item).feasible_slots(item, self.state.zone_slots[zone])
            ]
            heapq.heapify(heap)
        picker = self.picker(item)
        while heap:
            score, pos, slot = heap[0]
            now = lrp_score(slot, item.memory_mb, item.disk_mb, item.process_guid, weight, pack)
            if not picker.feasible_slots(item, [slot]):
                heapq.heappop(heap)
            elif now != score:
                heapq.heapreplace(heap, (now, pos, slot))
            else:
                return slot
        return None

    def move(
        self,
        item: LRPStart,
        index: int,
        source: CellSlot,
        target: CellSlot,
        reason: str,
        detail: str,
        gain: float,
    ) -> None:
        pg = item.process_guid
        for slot, sign in ((source, 1), (target, -1)):
            slot.avail_m += sign * item.memory_mb
            slot.avail_d += sign * item.disk_mb
            slot.avail_c += sign
            slot.proc_counts[pg] = slot.proc_counts.get(pg, 0) - sign
            self.state.columns.reserved(slot)  # the fast pickers' columns follow the slot
        counts = self.zone_counts[pg]
        counts[source.zone] -= 1
        counts[target.zone] = counts.get(target.zone, 0) + 1
        cells = self.movable[pg]
        cells[source.cell_id].remove(index)
        if not cells[source.cell_id]:
            del cells[source.cell_id]
        self.moves.append(
            Move(pg, index, source.cell_id, target.cell_id, source.zone, target.zone, reason, detail, gain)
        )

    def source_in(self, pg: str, zones: Iterable[str]) -> tuple[CellSlot, int] | None:
        """A movable instance in these zones, from the cell holding most of the app (then the fullest)."""
        wanted = set(zones)
        cells = [self.slot_of[c] for c in self.movable.get(pg, {}) if self.slot_of[c].zone in wanted]
        if not cells:
            return None
        slot = max(cells, key=lambda s: (s.proc_counts.get(pg, 0), memory_fraction(s), s.cell_id))
        return slot, max(self.movable[pg][slot.cell_id])

    def spread_zones(self) -> None:
        for pg in sorted(self.movable):
            item = self.requests[pg]
            zones = self.eligible_zones(item)
            counts = self.zone_counts[pg]
            blocked: set[str] = set()  # emptier zones found without room for it
            ranked: dict[str, list] = {}  # zone -> its cells scored for this app (_zone_target)
            while not self.full():
                skew = zone_skew(counts, zones)
                if skew <= 1:
                    break
                most = max(counts.get(z, 0) for z in zones)
                open_zones = [z for z in zones if z not in blocked and counts.get(z, 0) <= most - 2]
                if not open_zones:
                    break
                low = min(open_zones, key=lambda z: (counts.get(z, 0), z))
                source = self.source_in(pg, [z for z in zones if counts.get(z, 0) == most])
                if source is None:
                    break
                target = self._zone_target(item, low, ranked)
                if target is None:
                    blocked.add(low)
                    continue
                ranked.pop(source[0].zone, None)  # its cells change: scored again if it is a target later
                after = {**counts, source[0].zone: most - 1, low: counts.get(low, 0) + 1}
                self.move(
                    item,
                    source[1],
                    source[0],
                    target,
                    ZONE_SPREAD,
                    f"{source[0].zone}->{low} instances {most}/{counts.get(low, 0)}",
                    skew - zone_skew(after, zones),
                )

    def even_load(self) -> None:
        slots = [s for s in self.state.slots if s.total_m > 0]
        if not slots:
            return
        tried: set[str] = set()
        while not self.full():
            mean = sum(memory_fraction(s) for s in slots) / len(slots)
            hot = [
                s
                for s in slots
                if s.cell_id not in tried and memory_fraction(s) > mean + self.rebalance.load_tolerance
            ]
            if not hot:
                return
            source = max(hot, key=lambda s: (memory_fraction(s), s.cell_id))
            if not self._relieve(source):
                tried.add(source.cell_id)

    def _relieve(self, source: CellSlot) -> bool:
        """Move one instance off an overloaded cell to a cell that ends up less loaded than it was."""
        before = memory_fraction(source)
        apps = [pg for pg, cells in self.movable.items() if source.cell_id in cells]
        for pg in sorted(apps, key=lambda pg: (-source.proc_counts.get(pg, 0), pg)):
            item = self.requests[pg]
            counts = self.zone_counts[pg]
            zones = self.eligible_zones(item)
            # the same zone first; another only where the app's zone spread stays as good
            skew = max(1, zone_skew(counts, zones))
            allowed = [source.zone] + [
                z
                for z in zones
                if z != source.zone
                and zone_skew(
                    {**counts, source.zone: counts.get(source.zone, 0) - 1, z: counts.get(z, 0) + 1}, zones
                )
                <= skew
            ]
            for zone in allowed:
                candidates = [
                    s
                    for s in self.state.zone_slots[zone]
                    if s is not source and 1.0 - (s.avail_m - item.memory_mb) / (s.total_m or 1) < before
                ]
                target = self.best_target(item, candidates)
                if target is None:
                    continue
                index = max(self.movable[pg][source.cell_id])
                gain = item.memory_mb / (source.total_m or 1)
                self.move(
                    item,
                    index,
                    source,
                    target,
                    CELL_LOAD,
                    f"{source.cell_id} memory {before:.2f} above the mean",
                    gain,
                )
                return True
        return False


def plan_moves(
    cells: Sequence[Cell],
    placed: Sequence[Placed],
    requests: dict[str, LRPStart],
    pinned_apps: Iterable[str] = (),
    config: SchedulerConfig | None = None,
    rebalance: RebalanceConfig | None = None,
) -> list[Move]:
    """The ordered moves (zone spread first, then cell load), at most `rebalance.max_moves`.

    `cells`: the schedulable cells as the auction would see them (what each holds already subtracted from
    its `available`, counted in its `lrp_counts`); `placed`: the running instances to consider; `requests`:
    each app's placement request (any index); `pinned_apps`: apps whose instances never move (keep-replicas).
    """
    planner = _Planner(
        cells,
        placed,
        requests,
        frozenset(pinned_apps),
        config or SchedulerConfig(),
        rebalance or RebalanceConfig(),
    )
    planner.spread_zones()
    planner.even_load()
    return planner.moves
