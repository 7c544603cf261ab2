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
each such group keeps one ranking per zone (ranking.py: a heap re-validated lazily, a search giving up
after passing over PATIENCE cells). An app costs one lifted score per cell it runs on and, for its worst
cell per zone, the cells that beat it by the margin — none, in a balanced cluster. Objective scores read
the instance's index, so each instance scores every candidate cell: at most `instance_score_budget` such
scores per plan (the instances after it wait for the next plan).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..slot import CellSlot
from ..work import LRPStart
from .load_mark import CellMarks, is_loadmark
from .moves import STRATEGY_MARGIN
from .planner import Planner
from .ranking import Ranking, Rankings
from .strategy_scores import CellScore, StrategyScore, as_no_process, strategy_score


class MarginRule:
    """One run of the rule over the planner's copy: the rankings and the load marks it keeps."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.marks = CellMarks(planner)
        self.rankings = Rankings()
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

    def ranking(self, item: LRPStart, scoring: StrategyScore, zone: str) -> Ranking:
        """The zone's cells the app can run on, by the score they give an app holding none of them; one
        per size too, as a ranking drops the cells too full for its size (ranking.py)."""
        assert scoring.share_key is not None
        planner = self.planner
        size = (item.ask.memory_mb, item.ask.disk_mb)
        shared = scoring.share_key(item, planner.config)
        key = (planner.strategy_of(item), shared, size, planner.fit_of(item), zone)

        def neutral() -> CellScore:
            score = scoring.bind(planner.picker(item), as_no_process(item))
            assert score is not None  # only per-instance scores may fail to bind
            return score

        return self.rankings.get(
            key, neutral, lambda: [s for s in planner.compatible_slots(item) if s.zone == zone]
        )

    def by_cell(self, item: LRPStart, scoring: StrategyScore) -> None:
        """Move the app's instances off its worst cells while some cell beats them by the margin."""
        planner, pg = self.planner, item.process_guid
        own = scoring.bind(planner.picker(item), item)
        if own is None:
            return
        margin = planner.rebalance.strategy_margin * scoring.unit
        while not planner.full():
            for current, source in self.worst_cells(item, own):
                found = self.best_target(item, scoring, source, current - margin)
                if found is not None:
                    index = max(planner.movable[pg][source.cell_id])
                    self.move(item, index, source, found[1], scoring, current, found[0])
                    break
            else:
                return

    def worst_cells(self, item: LRPStart, own: CellScore) -> list[tuple[float, CellSlot]]:
        """The app's worst cell in each zone (scored without one of its instances), worst first: the other
        cells of a zone meet the same targets, and beat them by less."""
        planner = self.planner
        worst: dict[str, tuple[float, CellSlot]] = {}
        for cell_id in planner.movable.get(item.process_guid, {}):
            slot = planner.slot_of[cell_id]
            with planner.lifted(slot, item):
                current = own(slot)
            known = worst.get(slot.zone)
            if known is None or (current, slot.cell_id) > (known[0], known[1].cell_id):
                worst[slot.zone] = (current, slot)
        return sorted(worst.values(), key=lambda w: (-w[0], w[1].cell_id))

    def best_target(
        self, item: LRPStart, scoring: StrategyScore, source: CellSlot, below: float
    ) -> tuple[float, CellSlot] | None:
        """The best cell scoring below `below` an instance leaving `source` may go to: its zone's first,
        another zone's only when strictly better."""
        fits, suits = self.fits(item), self.suits(item, source)
        best: tuple[float, CellSlot] | None = None
        for zone in self.planner.zones_keeping_spread(item, source.zone):
            bar = below if best is None else min(below, best[0])
            found = self.ranking(item, scoring, zone).best(bar, fits, suits)
            if found is not None:
                best = found
        return best

    # --- scores read per instance ----------------------------------------------------------------------

    def by_instance(self, item: LRPStart, scoring: StrategyScore) -> None:
        """Each instance against every cell it could go to, while the budget lasts."""
        planner, pg = self.planner, item.process_guid
        picker = planner.picker(item)
        margin = planner.rebalance.strategy_margin * scoring.unit
        candidates = planner.compatible_slots(item)
        for cell_id, indices in sorted(planner.movable.get(pg, {}).items()):
            source = planner.slot_of[cell_id]
            zones = set(planner.zones_keeping_spread(item, source.zone))
            for index in sorted(indices):
                if planner.full() or self.budget < len(candidates):
                    return
                own = scoring.bind(picker, dataclasses.replace(item, index=index))
                if own is None:
                    return
                with planner.lifted(source, item):
                    current = own(source)
                self.budget -= len(candidates)
                fits, suits = self.fits(item), self.suits(item, source)
                best: tuple[float, CellSlot] | None = None
                for slot in candidates:
                    if slot.zone not in zones:
                        continue
                    score = own(slot)
                    if score < current - margin and (best is None or score < best[0]) and suits(slot):
                        if fits(slot):
                            best = (score, slot)
                if best is not None:
                    self.move(item, index, source, best[1], scoring, current, best[0])

    # --- both -------------------------------------------------------------------------------------------

    def fits(self, item: LRPStart) -> Callable[[CellSlot], bool]:
        """Whether a cell can take an instance of the app without undoing an earlier rule: it passes the
        whole chain and stays within the memory rule's tolerance (for a loadmark app, the load-mark rule's
        and below the critical marks too) once the instance runs there."""
        planner = self.planner
        picker = planner.picker(item)
        loadmark = is_loadmark(planner, item)

        def fits(slot: CellSlot) -> bool:
            return (
                not planner.overloads(slot, item)
                and not (loadmark and self.marks.overloads(slot, item, planner))
                and bool(picker.feasible_slots(item, [slot]))
            )

        return fits

    def suits(self, item: LRPStart, source: CellSlot) -> Callable[[CellSlot], bool]:
        """Whether the instance leaving `source` may go to a cell: another, holding none of the app."""
        pg = item.process_guid
        return lambda slot: slot is not source and slot.proc_counts.get(pg, 0) == 0

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
        self.rankings.changed(source, target)
        self.marks.refresh(source, target)


def move_by_margin(planner: Planner) -> None:
    MarginRule(planner).run()
