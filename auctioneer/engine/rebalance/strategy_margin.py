"""The strategy-margin rule: an instance its app's strategy would now place elsewhere by a clear margin.

For every movable instance of an app whose strategy has a comparable score (strategy_scores.py: diego,
loadmark, objective; never dea, service, binpack or random), its own cell is scored as the auction would
score it were the instance not there (lifted off it: like with like, both cells scored for placing the
same instance), and so is every other cell it could go to. When the best of those beats its own cell by
more than `strategy_margin` units of the strategy's score, the instance moves there. Gain: the score
improvement, in the strategy's own score.

Why 0.2 of a unit by default: under diego the unit is the resource score's whole range (the mean used
fraction of memory, disk and containers: 0 empty, 1 full), so 0.2 asks for a cell a fifth emptier on
average. That is twice the cell-load rule's tolerance, and far above what one instance changes (256 MB of
a 32 GB cell: under 0.01), so noise and one-instance differences never move anything: a move costs a
container start and must buy something clear. An instance sharing its cell with another of its app gains
1000 (the score's same-process term) by a cell holding none, as the auction would. Under loadmark 0.2 is
20 points of load mark; under the objective's `diego-blog` preset, a fifth of one zone step. Judging like
with like makes a move stable: once moved, the old cell scores for the instance what the new one did
before, so the next plan does not move it back.

Never undoing the rules before it: a target lies in the instance's zone or one where the app's spread
holds (`Planner.zones_keeping_spread`); it does not take a cell above the memory rule's tolerance, nor,
for a loadmark app, above the load-mark tolerance; it passes the whole filter chain (`feasible_slots`:
tags, labels, the strategy's own filters such as the critical load marks, room); it holds no instance of
the app (the loadmark picker's preference, and under diego such a cell scores 1000 worse anyway).

Bounded work. Scores that read nothing of the instance but its size (diego, loadmark) are shared: apps
asking alike (the same size, the same non-resource asks) rank the cells holding none of them alike, so
each such group keeps one heap of cells by score (`SharedRanking`), re-validated lazily (a popped cell is
scored again; a cell a move changed is pushed again with its new score). An app costs one lifted score
per cell it runs on and, for its worst cell per zone, the heap's cells that beat it by the margin — none,
in a balanced cluster. Objective scores read the instance's index, so each instance scores every
candidate cell: at most `instance_score_budget` such scores per plan (the instances after it wait for
the next plan).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Hashable

from ..state import CellSlot
from ..types import LRPStart
from .load_mark import CellMarks, is_loadmark
from .moves import STRATEGY_MARGIN
from .planner import Planner, ask_of
from .strategy_scores import CellScore, StrategyScore, as_no_process, strategy_score


class SharedRanking:
    """The cells apps asking alike could move to, in a heap by the score they give a cell holding none of
    them. Entries may be stale: `best` scores a popped cell again, and `changed` pushes a cell a move
    changed with its new score (its old entry is found stale when popped)."""

    def __init__(self, score: CellScore, slots: list[CellSlot]) -> None:
        self.score = score
        self.members = {s.pos for s in slots}
        self.heap = [(score(s), s.pos, s) for s in slots]
        heapq.heapify(self.heap)

    def changed(self, slot: CellSlot) -> None:
        if slot.pos in self.members:
            heapq.heappush(self.heap, (self.score(slot), slot.pos, slot))

    def best(self, below: float, accept: Callable[[CellSlot], bool]) -> tuple[float, CellSlot] | None:
        """The lowest-scoring cell `accept`ed whose score is below `below`, with its score; None if none.
        Cells passed over stay in the heap."""
        heap, aside, seen = self.heap, [], set()
        try:
            while heap:
                score, pos, slot = heap[0]
                now = self.score(slot)
                if now != score:
                    heapq.heapreplace(heap, (now, pos, slot))
                elif score >= below:
                    return None
                elif pos in seen:
                    heapq.heappop(heap)  # a duplicate entry, current too: one is enough
                elif accept(slot):
                    return score, slot
                else:
                    seen.add(pos)
                    aside.append(heapq.heappop(heap))
            return None
        finally:
            for entry in aside:
                heapq.heappush(heap, entry)


class MarginRule:
    """One run of the rule over the planner's copy: the shared rankings and the load marks it keeps."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.marks = CellMarks(planner)
        self.rankings: dict[Hashable, SharedRanking] = {}
        self.budget = planner.rebalance.instance_score_budget

    def run(self) -> None:
        for pg in sorted(self.planner.movable):
            if self.planner.full():
                return
            item = self.planner.requests[pg]
            scoring = strategy_score(self.planner.strategy_of(item))
            if scoring is None:
                continue
            if scoring.per_instance:
                self.by_instance(item, scoring)
            else:
                self.by_cell(item, scoring)

    # --- scores shared by apps asking alike ------------------------------------------------------------

    def ranking(self, item: LRPStart, scoring: StrategyScore) -> SharedRanking:
        assert scoring.share_key is not None
        key = (self.planner.strategy_of(item), scoring.share_key(item), ask_of(item))
        found = self.rankings.get(key)
        if found is None:
            neutral = scoring.bind(self.planner.picker(item), as_no_process(item))
            assert neutral is not None  # only per-instance scores may fail to bind
            found = self.rankings[key] = SharedRanking(neutral, self.planner.compatible_slots(item))
        return found

    def by_cell(self, item: LRPStart, scoring: StrategyScore) -> None:
        """Move the app's instances off its worst cells while some cell beats them by the margin."""
        planner, pg = self.planner, item.process_guid
        own = scoring.bind(planner.picker(item), item)
        if own is None:
            return
        ranking = self.ranking(item, scoring)
        margin = planner.rebalance.strategy_margin * scoring.unit
        while not planner.full():
            worst_per_zone: dict[str, tuple[float, CellSlot]] = {}
            for cell_id in planner.movable.get(pg, {}):
                slot = planner.slot_of[cell_id]
                with planner.lifted(slot, item):
                    current = own(slot)
                known = worst_per_zone.get(slot.zone)
                if known is None or (current, slot.cell_id) > (known[0], known[1].cell_id):
                    worst_per_zone[slot.zone] = (current, slot)
            for current, source in sorted(worst_per_zone.values(), key=lambda w: (-w[0], w[1].cell_id)):
                found = ranking.best(current - margin, self.acceptor(item, source))
                if found is not None:
                    self.move(item, max(planner.movable[pg][source.cell_id]), source, found[1], scoring,
                              current, found[0])
                    break
            else:
                return

    # --- scores read per instance ----------------------------------------------------------------------

    def by_instance(self, item: LRPStart, scoring: StrategyScore) -> None:
        """Each instance against every cell it could go to, while the budget lasts."""
        planner, pg = self.planner, item.process_guid
        picker = planner.picker(item)
        margin = planner.rebalance.strategy_margin * scoring.unit
        candidates = planner.compatible_slots(item)
        for cell_id, indices in sorted(planner.movable.get(pg, {}).items()):
            source = planner.slot_of[cell_id]
            for index in sorted(indices):
                if planner.full() or self.budget < len(candidates):
                    return
                own = scoring.bind(picker, dataclasses.replace(item, index=index))
                if own is None:
                    return
                with planner.lifted(source, item):
                    current = own(source)
                self.budget -= len(candidates)
                accept = self.acceptor(item, source)
                best: tuple[float, CellSlot] | None = None
                for slot in candidates:
                    score = own(slot)
                    if score < current - margin and (best is None or score < best[0]) and accept(slot):
                        best = (score, slot)
                if best is not None:
                    self.move(item, index, source, best[1], scoring, current, best[0])

    # --- both -------------------------------------------------------------------------------------------

    def acceptor(self, item: LRPStart, source: CellSlot) -> Callable[[CellSlot], bool]:
        """Whether a cell may take an instance leaving `source` without undoing an earlier rule."""
        planner, pg = self.planner, item.process_guid
        zones = set(planner.zones_keeping_spread(item, source.zone))
        picker = planner.picker(item)
        loadmark = is_loadmark(planner, item)

        def accept(slot: CellSlot) -> bool:
            return (
                slot is not source
                and slot.zone in zones
                and slot.proc_counts.get(pg, 0) == 0
                and not planner.overloads(slot, item)
                and not (loadmark and self.marks.overloads(slot, item, planner))
                and bool(picker.feasible_slots(item, [slot]))
            )

        return accept

    def move(
        self,
        item: LRPStart,
        index: int,
        source: CellSlot,
        target: CellSlot,
        scoring: StrategyScore,
        current: float,
        score: float,
    ) -> None:
        name = self.planner.strategy_of(item)
        detail = (
            f"{name} score {scoring.shown(current):.3f} on {source.cell_id}, "
            f"{scoring.shown(score):.3f} on {target.cell_id}"
        )
        self.planner.move(item, index, source, target, STRATEGY_MARGIN, detail, current - score)
        for ranking in self.rankings.values():
            ranking.changed(source)
            ranking.changed(target)
        self.marks.refresh(source, target)


def move_by_margin(planner: Planner) -> None:
    MarginRule(planner).run()
