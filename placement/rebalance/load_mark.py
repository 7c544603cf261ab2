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

import heapq
from collections.abc import Callable

from ..slot import CellSlot
from ..strategies.loadmark import NAME as LOADMARK
from ..strategies.loadmark import above_critical, load_mark
from ..work import LRPStart
from .moves import LOAD_MARK
from .planner import Planner
from .ranking import Rankings
from .strategy_scores import SCORES

MARK_UNIT = SCORES[LOADMARK].unit


def is_loadmark(planner: Planner, item: LRPStart) -> bool:
    return planner.strategy_of(item) == LOADMARK


class CellMarks:
    """The load marks of the cells the loadmark apps can run on, kept current as moves are made, and the
    hottest first (a heap: a cell a move changed is pushed again, its old entry found stale)."""

    def __init__(self, planner: Planner) -> None:
        self.config = planner.config.loadmark
        self.tolerance = planner.rebalance.load_tolerance * MARK_UNIT
        seen: dict[int, CellSlot] = {}
        for pg in planner.movable:
            item = planner.requests[pg]
            if is_loadmark(planner, item):
                seen.update((s.pos, s) for s in planner.compatible_slots(item))
        self.slots = seen
        self.marks = {pos: load_mark(s, self.config) for pos, s in seen.items()}
        self.total = sum(self.marks.values())
        self.hot = [(-mark, pos) for pos, mark in self.marks.items()]
        heapq.heapify(self.hot)

    def mean(self) -> float:
        return self.total / len(self.marks) if self.marks else 0.0

    def limit(self) -> float:
        """The mark above which a cell is overloaded."""
        return self.mean() + self.tolerance

    def score(self, slot: CellSlot) -> float:
        return load_mark(slot, self.config)

    def refresh(self, *slots: CellSlot) -> None:
        """After a move: the marks of the cells it changed."""
        for slot in slots:
            if slot.pos in self.marks:
                mark = load_mark(slot, self.config)
                self.total += mark - self.marks[slot.pos]
                self.marks[slot.pos] = mark
                heapq.heappush(self.hot, (-mark, slot.pos))

    def hottest(self, passed: set[int]) -> CellSlot | None:
        """The cell with the highest mark above the limit, not passed over already; None if none."""
        limit = self.limit()
        while self.hot:
            mark, pos = -self.hot[0][0], self.hot[0][1]
            if mark != self.marks[pos] or pos in passed:
                heapq.heappop(self.hot)  # stale (the cell's current entry is elsewhere) or given up on
            elif mark <= limit:
                return None
            else:
                return self.slots[pos]
        return None

    def overloads(self, slot: CellSlot, item: LRPStart, planner: Planner) -> bool:
        """Would the instance take the cell's mark more than the tolerance above the mean, or the cell
        above a critical mark?"""
        with planner.added(slot, item):
            return load_mark(slot, self.config) > self.limit() or above_critical(slot, self.config)


def even_load_marks(planner: Planner) -> None:
    marks = CellMarks(planner)
    rankings = Rankings()
    passed: set[int] = set()  # cells that could shed nothing
    while not planner.full():
        source = marks.hottest(passed)
        if source is None:
            return
        if not shed(planner, marks, rankings, source):
            passed.add(source.pos)


def shed(planner: Planner, marks: CellMarks, rankings: Rankings, source: CellSlot) -> bool:
    """Move one loadmark instance off a cell far above the mean mark; False when none can go anywhere."""
    before = marks.marks[source.pos]
    nowhere: set[tuple] = set()  # (what the apps ask, their size, zone) that found no cell
    for pg in planner.apps_on(source, lambda item: is_loadmark(planner, item)):
        item = planner.requests[pg]
        for zone in planner.zones_keeping_spread(item, source.zone):
            alike = (planner.fit_of(item), item.ask.memory_mb, item.ask.disk_mb, zone)
            target = None if alike in nowhere else _target(planner, marks, rankings, item, source, zone)
            if target is None:
                nowhere.add(alike)
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
            rankings.changed(source, target)
            marks.refresh(source, target)
            return True
    return False


def _target(
    planner: Planner, marks: CellMarks, rankings: Rankings, item: LRPStart, source: CellSlot, zone: str
) -> CellSlot | None:
    """The zone's cell the strategy would pick for the instance among those that may take it (`_fits`),
    in its own order (`loadmark.preferred`): one without an instance of the app while one qualifies, then
    the least loaded; the zone's ranking gives the least loaded of either kind."""
    ranking = rankings.get(
        (planner.fit_of(item), item.ask.memory_mb, item.ask.disk_mb, zone),
        lambda: marks.score,
        lambda: [s for s in planner.compatible_slots(item) if s.zone == zone],
    )
    fits, pg = _fits(planner, marks, item), item.process_guid
    found = ranking.best(marks.limit(), fits, lambda s: s is not source and s.proc_counts.get(pg, 0) == 0)
    found = found or ranking.best(marks.limit(), fits, lambda s: s is not source)
    return None if found is None else found[1]


def _fits(planner: Planner, marks: CellMarks, item: LRPStart) -> Callable[[CellSlot], bool]:
    """Whether a cell can take an instance of the app: it passes the whole chain (the strategy's critical
    marks among it) and, with the instance, stays within the load-mark tolerance (so below the source),
    below every critical mark, and within the memory rule's tolerance."""
    picker = planner.picker(item)

    def fits(slot: CellSlot) -> bool:
        return (
            not planner.overloads(slot, item)
            and not marks.overloads(slot, item, planner)
            and bool(picker.feasible_slots(item, [slot]))
        )

    return fits
