"""The load-mark rule: the paper's CPU-usage rebalancing, for apps on the `loadmark` strategy.

For those apps a cell's load is its load mark (strategies/loadmark.py: the host's swap, memory and disk
fractions and its load average beyond 2 per core, weighted, ×100; the cell's own allocations where the
host reports nothing), not its memory fraction: the cell-load rule leaves them alone and this one moves
them. A cell whose mark is more than `load_tolerance` × 100 points (the same tolerance as the memory
rule's, in the mark's unit: strategy_scores.py) above the mean mark of the cells those apps can run on
sheds an instance of the loadmark app it holds most of, to the cell the strategy itself would pick
(`loadmark.preferred`: feasible under the whole chain, so below every critical mark; one without an
instance of the app while there is one; the least loaded) among those that, with the instance,

- stay within the load-mark tolerance of the mean (so below the source: the move buys something, is
  never undone, and the target does not become the next hot cell) and below every critical mark
  (`loadmark.above_critical`, judged once the instance runs there),
- stay within the memory rule's tolerance (`Planner.overloads`),
- lie in the source's zone, or in a zone where the app's spread holds (`Planner.zones_keeping_spread`).

A cell that cannot shed (its instances pinned, or nowhere better) is left and the next hottest tried.
Gain: how many points the source's mark drops. What the host measured (swap, the load average) is taken
as the cell reported it, as the strategy's score takes it: the plan does not guess how much a move
relieves them, and the next plan sees the hosts' new reports.
"""

from __future__ import annotations

from ..state import CellSlot
from ..strategies.loadmark import NAME as LOADMARK
from ..strategies.loadmark import above_critical, load_mark, preferred
from ..types import LRPStart
from .moves import LOAD_MARK
from .planner import Planner
from .strategy_scores import SCORES

MARK_UNIT = SCORES[LOADMARK].unit


def is_loadmark(planner: Planner, item: LRPStart) -> bool:
    return planner.strategy_of(item) == LOADMARK


class CellMarks:
    """The load marks of the cells the loadmark apps can run on, kept current as moves are made."""

    def __init__(self, planner: Planner) -> None:
        self.config = planner.config.loadmark
        self.tolerance = planner.rebalance.load_tolerance * MARK_UNIT
        seen: dict[int, CellSlot] = {}
        for pg in planner.movable:
            item = planner.requests[pg]
            if is_loadmark(planner, item):
                seen.update((s.pos, s) for s in planner.compatible_slots(item))
        self.slots = sorted(seen.values(), key=lambda s: s.pos)
        self.marks = {s.pos: load_mark(s, self.config) for s in self.slots}
        self.total = sum(self.marks.values())

    def mean(self) -> float:
        return self.total / len(self.marks) if self.marks else 0.0

    def refresh(self, *slots: CellSlot) -> None:
        """After a move: the marks of the cells it changed."""
        for slot in slots:
            if slot.pos in self.marks:
                mark = load_mark(slot, self.config)
                self.total += mark - self.marks[slot.pos]
                self.marks[slot.pos] = mark

    def overloads(self, slot: CellSlot, item: LRPStart, planner: Planner) -> bool:
        """Would the instance take the cell's mark more than the tolerance above the mean, or the cell
        above a critical mark?"""
        with planner.added(slot, item):
            return load_mark(slot, self.config) > self.mean() + self.tolerance or above_critical(
                slot, self.config
            )


def even_load_marks(planner: Planner) -> None:
    marks = CellMarks(planner)
    tried: set[int] = set()
    while not planner.full():
        limit = marks.mean() + marks.tolerance
        hot = [s for s in marks.slots if s.pos not in tried and marks.marks[s.pos] > limit]
        if not hot:
            return
        source = max(hot, key=lambda s: (marks.marks[s.pos], s.cell_id))
        if not shed(planner, marks, source):
            tried.add(source.pos)


def shed(planner: Planner, marks: CellMarks, source: CellSlot) -> bool:
    """Move one loadmark instance off a cell far above the mean mark; False when none can go anywhere."""
    before = marks.marks[source.pos]
    apps = [
        pg
        for pg, cells in planner.movable.items()
        if source.cell_id in cells and is_loadmark(planner, planner.requests[pg])
    ]
    for pg in sorted(apps, key=lambda pg: (-source.proc_counts.get(pg, 0), pg)):
        item = planner.requests[pg]
        picker = planner.picker(item)
        for zone in planner.zones_keeping_spread(item, source.zone):
            candidates = [
                s
                for s in picker.feasible_slots(item, planner.state.zone_slots[zone])
                if s is not source and _relieves(planner, marks, s, item)
            ]
            target = preferred(candidates, item, marks.config)
            if target is None:
                continue
            with planner.lifted(source, item):
                after = load_mark(source, marks.config)
            planner.move(
                item,
                max(planner.movable[pg][source.cell_id]),
                source,
                target,
                LOAD_MARK,
                f"{source.cell_id} load mark {before:.1f} above the mean {marks.mean():.1f}",
                before - after,
            )
            marks.refresh(source, target)
            return True
    return False


def _relieves(planner: Planner, marks: CellMarks, target: CellSlot, item: LRPStart) -> bool:
    """Would the target, with the instance, stay within the load-mark tolerance (so below the source),
    below every critical mark, and within the memory rule's tolerance?"""
    return not planner.overloads(target, item) and not marks.overloads(target, item, planner)
