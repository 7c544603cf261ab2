"""The `service` strategy: constraint-aware placement for stateful services.

Hard constraints are the engine's request filters (filters/: host labels, volumes, a free ingress
IP, devices), which hold under every strategy. Among the cells that pass, in this order:
1. a restarting instance stays on its previous cell (`LRPStart.previous_cell`) while that cell passes;
2. an instance with volume requests prefers a cell that already holds one of its volumes (its
   ephemeral data lives there: the volume "sticks"; a decision of ours, the issue only says so);
3. the highest affinity: the sum of the weights of the `affinity` rules whose expression matches the
   cell's labels (soft: a negative weight repels, it never filters);
4. the fewest instances of the same service not in delayed shutdown, then of the same service in
   delayed shutdown, then of other services not in delayed shutdown, then of other services in
   delayed shutdown;
5. input order.
Tasks belong to no service: the fewest tasks, then the fewest LRP instances not in delayed shutdown,
then in delayed shutdown, then input order.

Label expressions are validated at the boundary (`validate_label_expression`); one that does not
parse raises ValueError here.
"""

from __future__ import annotations

import numpy as np

from common.labels import parse_label_expression

from ..filters import LABELS
from ..filters.volumes import holds_own_volume
from ..slot import CellSlot
from ..state import AuctionState
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker

NAME = "service"


def affinity_score(slot: CellSlot, item: LRPStart) -> float:
    total = 0.0
    for rule in item.ask.affinity:
        if parse_label_expression(rule.expression).matches(slot.cell.labels):
            total += rule.weight
    return total


def service_key(slot: CellSlot, item: LRPStart) -> tuple:
    """Lower wins: the order of preference above, as one tuple."""
    pg = item.process_guid
    same = slot.proc_counts.get(pg, 0)
    same_delayed = slot.delayed_counts.get(pg, 0)
    sticky = bool(item.ask.volumes) and holds_own_volume(slot, item)
    return (
        not sticky,
        -affinity_score(slot, item),
        same,
        same_delayed,
        sum(slot.proc_counts.values()) - same,
        sum(slot.delayed_counts.values()) - same_delayed,
        slot.pos,
    )


def task_key(slot: CellSlot) -> tuple:
    return (slot.task_count, sum(slot.proc_counts.values()), sum(slot.delayed_counts.values()), slot.pos)


class ServiceReference(Picker):
    name = NAME

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        candidates = self.feasible_slots(item)
        if not candidates:
            return None
        if item.previous_cell is not None:
            for slot in candidates:
                if slot.cell_id == item.previous_cell:
                    return slot
        return min(candidates, key=lambda slot: service_key(slot, item))

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        candidates = self.feasible_slots(item)
        return min(candidates, key=task_key) if candidates else None


def ordinary_instances(slot: CellSlot) -> int:
    return sum(slot.proc_counts.values())


def task_count(slot: CellSlot) -> int:
    return slot.task_count


class ServiceFast(FastPicker):
    """Per-cell totals as derived columns, label matches cached per expression, one lexsort over the
    candidates."""

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        slots = state.slots
        # Delayed shutdown comes only from what cells report: a batch never adds to it.
        self.delayed = np.array([sum(s.delayed_counts.values()) for s in slots], dtype=np.int64)
        self.delayed_by_process: dict[str, dict[int, int]] = {}
        for s in slots:
            for pg, n in s.delayed_counts.items():
                self.delayed_by_process.setdefault(pg, {})[s.pos] = n

    def ordinary(self) -> np.ndarray:
        return self.cells.derived("ordinary_instances", ordinary_instances, np.int64)

    def _counts(self, by_pos: dict[int, int] | None, positions: np.ndarray) -> np.ndarray:
        counts = np.zeros(self.cells.size, dtype=np.int64)
        if by_pos:
            counts[np.fromiter(by_pos.keys(), dtype=np.int64)] = np.fromiter(by_pos.values(), dtype=np.int64)
        return counts[positions]

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if not positions.size:
            return None
        if item.previous_cell is not None:
            previous = self.cells.cell_pos.get(item.previous_cell)
            if previous is not None:
                at = int(np.searchsorted(positions, previous))
                if at < positions.size and positions[at] == previous:
                    return self.state.slots[previous]
        affinity = np.zeros(positions.size, dtype=np.float64)
        for rule in item.ask.affinity:  # rule order, as the scalar sum adds them
            affinity = affinity + np.where(
                LABELS.matching(self.cells, rule.expression)[positions], rule.weight, 0.0
            )
        slots = self.state.slots
        if item.ask.volumes:
            not_sticky = np.array([not holds_own_volume(slots[p], item) for p in positions], dtype=bool)
        else:
            not_sticky = np.ones(positions.size, dtype=bool)
        same = self._counts(self.state.holding(item.process_guid), positions)
        same_delayed = self._counts(self.delayed_by_process.get(item.process_guid), positions)
        other = self.ordinary()[positions] - same
        other_delayed = self.delayed[positions] - same_delayed
        # lexsort: the last key is the primary one
        order = np.lexsort((positions, other_delayed, other, same_delayed, same, -affinity, not_sticky))
        return slots[int(positions[order[0]])]

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if not positions.size:
            return None
        tasks = self.cells.derived("task_count", task_count, np.int64)
        order = np.lexsort((positions, self.delayed[positions], self.ordinary()[positions], tasks[positions]))
        return self.state.slots[int(positions[order[0]])]


FAST = ServiceFast
REFERENCE = ServiceReference
