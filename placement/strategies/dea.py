"""The `dea` strategy: how the Cloud Foundry DEA pool (cloud controller, before Diego) chose a DEA.

From the feasible cells — fresh advertisement, enough memory and disk, the right stack, plus the
common filters — narrow step by step:
1. to the zone whose candidate cells run the fewest instances in total (ties: zone name order);
2. to the cells of that zone running the fewest instances;
3. to the top half by free memory (ceil(n/2), most free first, ties by input order);
then draw one at random, reproducibly (`random_pick.item_rng`, candidates in input order).

"Running instances" counts everything the cell holds, of any app: LRP instances (including those in
delayed shutdown, which still occupy the cell) and tasks, with this batch's reservations. As in the
DEA pool, the zone totals are taken over the eligible cells only, and free memory is what is left
after this batch's reservations. Tasks go through the same steps (keyed by their task guid).

Staleness is a strategy filter: a cell is stale when `config.now` is set, its `expires_at` is set and
now is past it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from ..filters import Example, StaticFilter, Work
from ..slot import CellSlot
from ..state import AuctionState
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker
from .random_pick import item_rng

NAME = "dea"


class StaleAdvertisementFilter(StaticFilter):
    name = "stale_advertisement"
    example = Example(config={"now": 100.0}, admitted={"expires_at": 200.0}, rejected={"expires_at": 50.0})

    def __init__(self, now: float | None) -> None:
        self.now = now

    def cell_key(self, slot: CellSlot) -> Hashable:
        return slot.cell.expires_at

    def request_key(self, item: Work) -> Hashable:
        return None  # the same for every item: judged against the auction's time

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        expires_at = slot.cell.expires_at
        return self.now is not None and expires_at is not None and self.now > expires_at

    def error(self, item: Work) -> str:
        return "found no cell with a fresh advertisement"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} stale advertisement"


def running_instances(slot: CellSlot) -> int:
    """Everything the cell runs, of any app: LRP instances (delayed shutdown too) and tasks."""
    return sum(slot.proc_counts.values()) + sum(slot.delayed_counts.values()) + slot.task_count


def top_half_size(n: int) -> int:
    return math.ceil(n / 2)


class DeaReference(Picker):
    """Each narrowing step written out over lists of cells."""

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.filters = (StaleAdvertisementFilter(self.config.now),)

    def _pick(self, item: Work) -> CellSlot | None:
        candidates = self.feasible_slots(item)
        if not candidates:
            return None
        # 1. the zone with the fewest running instances among its eligible cells
        per_zone: dict[str, int] = {}
        for slot in candidates:
            per_zone[slot.zone] = per_zone.get(slot.zone, 0) + running_instances(slot)
        zone = min(per_zone, key=lambda z: (per_zone[z], z))
        candidates = [slot for slot in candidates if slot.zone == zone]
        # 2. the cells running the fewest instances
        fewest = min(running_instances(slot) for slot in candidates)
        candidates = [slot for slot in candidates if running_instances(slot) == fewest]
        # 3. the top half by free memory
        by_memory = sorted(candidates, key=lambda slot: (-slot.avail_m, slot.pos))
        candidates = sorted(by_memory[: top_half_size(len(by_memory))], key=lambda slot: slot.pos)
        return candidates[item_rng(self.config.seed, item).randrange(len(candidates))]

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        return self._pick(item)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return self._pick(item)


class DeaFast(FastPicker):
    """The same steps as array operations: a bincount per zone, masks, one lexsort for the top half.

    Running-instance counts are a derived column of the auction's columns, kept current on every
    reservation.
    """

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.filters = (StaleAdvertisementFilter(self.config.now),)

    def _pick(self, item: Work) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if not positions.size:
            return None
        running = self.cells.derived("running_instances", running_instances, np.int64)[positions]
        zones = self.cells.zone_of[positions]
        n_zones = len(self.state.zone_names)
        totals = np.bincount(zones, weights=running, minlength=n_zones)
        present = np.bincount(zones, minlength=n_zones) > 0
        zone = int(np.argmin(np.where(present, totals, np.inf)))  # first minimum: zone name order
        keep = zones == zone
        positions, running = positions[keep], running[keep]
        keep = running == running.min()
        positions = positions[keep]
        order = np.lexsort((positions, -self.cells.avail_m[positions]))
        top = np.sort(positions[order[: top_half_size(positions.size)]])
        chosen = top[item_rng(self.config.seed, item).randrange(top.size)]
        return self.state.slots[int(chosen)]

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        return self._pick(item)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return self._pick(item)


FAST = DeaFast
REFERENCE = DeaReference
