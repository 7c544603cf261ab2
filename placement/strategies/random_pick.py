"""The `random` strategy: any cell that can take the work, chosen at random.

Reproducible: each item draws from its own generator seeded with the auction's seed and the item's
identity, exactly once, over the feasible cells in input order — so a run can be repeated, and the two
engines (which find the same feasible cells by different means) land on the same cell. Tasks are placed
the same way as LRP instances.
"""

from __future__ import annotations

import random

from ..filters import Work
from ..slot import CellSlot
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker

NAME = "random"


def item_rng(seed: int, item: Work) -> random.Random:
    """The generator for one item: `seed:process_guid:index` for an instance, `seed:task_guid` for a task."""
    if isinstance(item, LRPStart):
        return random.Random(f"{seed}:{item.process_guid}:{item.index}")
    return random.Random(f"{seed}:{item.task_guid}")


class RandomReference(Picker):
    """Scan every cell through the filter chain, then draw."""

    name = NAME

    def _pick(self, item: Work) -> CellSlot | None:
        candidates = self.feasible_slots(item)
        if not candidates:
            return None
        return candidates[item_rng(self.config.seed, item).randrange(len(candidates))]

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        return self._pick(item)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return self._pick(item)


class RandomFast(FastPicker):
    """Feasible positions from the filters' vectorised forms, then the same single draw."""

    name = NAME

    def _pick(self, item: Work) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if not positions.size:
            return None
        chosen = positions[item_rng(self.config.seed, item).randrange(positions.size)]
        return self.state.slots[int(chosen)]

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        return self._pick(item)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        return self._pick(item)


FAST = RandomFast
REFERENCE = RandomReference
