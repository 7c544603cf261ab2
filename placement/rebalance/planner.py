"""The planner's working copy: the auction's cell slots, changed as moves are made, and what every rule
asks of them (the app's picker, its feasible cells and eligible zones, its movable instances).

A rule (one module of this package each) reads the copy and calls `Planner.move`, which keeps the slots,
the fast pickers' columns, the zone counts and the movable instances current for the rules after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from ..ask import Ask
from ..cell_offer import CellOffer
from ..filters.volumes import instance_key
from ..scoring import lrp_score
from ..slot import CellSlot
from ..state import AuctionState
from ..strategies import pickers
from ..strategies.base import Picker
from ..types import SchedulerConfig
from ..work import LRPStart
from .moves import Move, Placed, RebalanceConfig
from .strategy_scores import strategy_score


def memory_fraction(slot: CellSlot) -> float:
    return 1.0 - slot.avail_m / (slot.total_m or 1)


def zone_skew(counts: dict[str, int], zones: Iterable[str]) -> int:
    values = [counts.get(z, 0) for z in zones]
    return max(values) - min(values) if values else 0


def _shift(slot: CellSlot, item: LRPStart, sign: int) -> None:
    """Take one instance of the item off the cell (sign 1) or put one on it (sign -1)."""
    slot.avail_m += sign * item.ask.memory_mb
    slot.avail_d += sign * item.ask.disk_mb
    slot.avail_c += sign
    slot.proc_counts[item.process_guid] = slot.proc_counts.get(item.process_guid, 0) - sign


class Planner:
    """The working copy the moves are planned on: the auction's cell slots, changed as moves are made."""

    def __init__(
        self,
        cells: Sequence[CellOffer],
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
        self._fits: dict[Ask, Ask] = {}
        self._eligible: dict[Ask, list[str]] = {}
        self._compatible: dict[Ask, list[CellSlot]] = {}
        self._memory_mean: tuple[int, float] | None = None  # (moves when computed, the mean)
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

    def fit_of(self, item: LRPStart) -> Ask:
        """What every filter but the resource ones reads of the app (`Ask.fit`): apps with equal fits are
        admitted by the same cells but for room."""
        ask = item.ask
        found = self._fits.get(ask)
        if found is None:
            found = self._fits[ask] = ask.fit()
        return found

    def strategy_of(self, item: LRPStart) -> str:
        return item.ask.strategy or self.config.strategy

    def picker(self, item: LRPStart) -> Picker:
        name = self.strategy_of(item)
        found = self._pickers.get(name)
        if found is None:
            found = self._pickers[name] = pickers(self.config.engine)[name](self.state)
        return found

    def full(self) -> bool:
        return 0 < self.rebalance.max_moves <= len(self.moves)

    def best_target(self, item: LRPStart, slots: Sequence[CellSlot]) -> CellSlot | None:
        """The cell the auction would pick among these: feasible under the whole chain, first in the app's
        strategy's order (`target_order`)."""
        feasible = self.picker(item).feasible_slots(item, slots)
        return min(feasible, key=self.target_order(item)) if feasible else None

    def target_order(self, item: LRPStart) -> Callable[[CellSlot], tuple[bool, float]]:
        """How the app's strategy orders cells for one more of its instances: cells holding none of the app
        first (the load-mark picker's preference; Diego's score says as much with its 1000 per instance),
        then by the strategy's own score where its instances share one (diego, loadmark:
        strategy_scores.py), else by Diego's."""
        scoring = strategy_score(self.strategy_of(item))
        picker = self.picker(item)
        score = None if scoring is None or scoring.per_instance else scoring.bind(picker, item)
        if score is None:
            weight, pack = self.config.starting_container_weight, self.config.bin_pack_first_fit_weight
            memory, disk, pg = item.ask.memory_mb, item.ask.disk_mb, item.process_guid
            return lambda s: (s.proc_counts.get(pg, 0) > 0, lrp_score(s, memory, disk, pg, weight, pack))
        pg, own = item.process_guid, score
        return lambda s: (s.proc_counts.get(pg, 0) > 0, own(s))

    def eligible_zones(self, item: LRPStart) -> list[str]:
        """The zones the app's spread is judged over: those with a cell it can run on (`compatible_slots`).
        A zone whose cells are all loaded beyond a strategy's filter (the load mark's critical marks) is
        still one of its zones: load passes, the app's fit does not."""
        ask = self.fit_of(item)
        found = self._eligible.get(ask)
        if found is None:
            zones = {s.zone for s in self.compatible_slots(item)}
            found = self._eligible[ask] = [z for z in self.state.zone_names if z in zones]
        return found

    def compatible_slots(self, item: LRPStart) -> list[CellSlot]:
        """The cells the app can run on whatever their load: every filter but the resource ones and the
        strategy's own (which judge a cell's load or advertisement, not the app's fit). Apps asking the
        same of a cell share the answer (at 1,000 apps and 1,000 cells, a second per plan)."""
        ask = self.fit_of(item)
        found = self._compatible.get(ask)
        if found is None:
            picker = self.picker(item)
            chain = [f for f in picker.chain(item) if not f.resource and f not in picker.filters]
            found = self._compatible[ask] = [
                s for s in self.state.slots if not any(f.rejects(s, item) for f in chain)
            ]
        return found

    def mean_memory_fraction(self) -> float:
        """The mean memory fraction of the cells with memory, as the moves so far left them."""
        if self._memory_mean is None or self._memory_mean[0] != len(self.moves):
            sized = [memory_fraction(s) for s in self.state.slots if s.total_m > 0]
            self._memory_mean = (len(self.moves), sum(sized) / len(sized) if sized else 0.0)
        return self._memory_mean[1]

    def overloads(self, slot: CellSlot, item: LRPStart) -> bool:
        """Would the instance take the cell more than `load_tolerance` above the mean memory fraction (the
        cell-load rule would then move something off it again)?"""
        after = 1.0 - (slot.avail_m - item.ask.memory_mb) / (slot.total_m or 1)
        return after > self.mean_memory_fraction() + self.rebalance.load_tolerance

    @contextmanager
    def lifted(self, slot: CellSlot, item: LRPStart) -> Iterator[CellSlot]:
        """The cell as the auction would see it were one instance of the item not there, for scoring
        (the columns are not told: nothing reads them meanwhile)."""
        _shift(slot, item, 1)
        try:
            yield slot
        finally:
            _shift(slot, item, -1)

    @contextmanager
    def added(self, slot: CellSlot, item: LRPStart) -> Iterator[CellSlot]:
        """The cell as it would be with one more instance of the item, for scoring (as `lifted`)."""
        _shift(slot, item, -1)
        try:
            yield slot
        finally:
            _shift(slot, item, 1)

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
            _shift(slot, item, sign)
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

    def apps_on(self, source: CellSlot, admits: Callable[[LRPStart], bool]) -> list[str]:
        """The apps with a movable instance on the cell that `admits` takes (by their request), the one it
        holds most of first (then by guid): what a cell that must shed load offers first."""
        apps = [pg for pg, cells in self.movable.items()
                if source.cell_id in cells and admits(self.requests[pg])]
        return sorted(apps, key=lambda pg: (-source.proc_counts.get(pg, 0), pg))

    def zones_keeping_spread(self, item: LRPStart, from_zone: str) -> list[str]:
        """Where an instance leaving `from_zone` may go without undoing the zone-spread rule: its own zone
        first, then the app's other eligible zones where its skew stays within one (or no worse than it
        is, where the spread rule found no room)."""
        pg = item.process_guid
        counts = self.zone_counts[pg]
        zones = self.eligible_zones(item)
        skew = max(1, zone_skew(counts, zones))
        return [from_zone] + [
            z
            for z in zones
            if z != from_zone
            and zone_skew({**counts, from_zone: counts.get(from_zone, 0) - 1, z: counts.get(z, 0) + 1}, zones)
            <= skew
        ]
