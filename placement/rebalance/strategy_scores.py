"""How each strategy ranks cells for one instance, as one number the rebalance planner can compare: the
strategy's own score function, called as its picker calls it, never a copy.

Lower is preferred (a strategy where higher wins is negated). `unit` is the size of one step of the
score's scale: the strategy-margin rule asks for a gain of `strategy_margin` units and the load-mark rule
for a tolerance of `load_tolerance` units, so one setting means as much under every strategy.

- diego: `scoring.lrp_score`. Its resource part is the mean used fraction of memory, disk and containers
  (0: empty, 1: full), so the unit is 1; each instance of the same process on the cell adds 1000. With a
  cache weight, `scoring.cached_lrp_score`, as the auction scores (apps share scores by source blob too).
- loadmark: `strategies.loadmark.load_mark`, judged on the cell before the instance (as its picker
  judges it). The mark is a weighted sum of fractions ×100, so the unit is 100 (a mark of 100: one fully
  used resource of weight 1). Its picker also prefers a cell without an instance of the process, and so
  do the rules (`Planner.target_order`; the margin rule never proposes a cell holding one).
- objective: the LRP's objective, evaluated by `objective.evaluate.score` on the picker's view of the
  cell (`SlotBid`), negated (higher wins there). Unit 1: in the `diego-blog` preset one zone step, the
  four preferences together weighing at most 1. It reads the instance's index (`ai.InstanceNumber`), so
  it is bound per instance (`per_instance`), and an objective that does not parse scores nothing.

Not comparable, so never moved by a margin: `dea` (narrowing steps, then a random draw among the top
half), `service` (an order of preferences — volume stickiness, affinity, instance counts, position — not
a scale), `binpack` (first fit by cell position: an order, and moving towards it is consolidation, not
what the auction would do again) and `random` (a draw).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from common.objective import ObjectiveError

from ..objective.evaluate import score
from ..scoring import cached_lrp_score, lrp_score, uses_cache
from ..slot import CellSlot
from ..strategies.base import Picker
from ..strategies.loadmark import load_mark
from ..strategies.objective import ObjectivePicker, SlotBid
from ..types import SchedulerConfig
from ..work import LRPStart

CellScore = Callable[[CellSlot], float]  # one item's score of each cell: lower is preferred

# A process guid no cell holds (a real one is never empty): an item scored as this app scores every cell
# as the app itself scores the cells holding none of it, so those scores can be shared by every app
# asking as much (`StrategyScore.share_key`).
NO_PROCESS = ""


@dataclass(slots=True, frozen=True)
class StrategyScore:
    unit: float
    # what the score reads of the item on a cell holding none of its process, under the cluster's
    # configuration: apps with equal keys score such cells alike; None when it reads the instance itself
    # (scored per instance)
    share_key: Callable[[LRPStart, SchedulerConfig], Hashable] | None
    # the score of each cell for this item, as the strategy's picker computes it; None: no score (an
    # objective that does not parse)
    bind: Callable[[Picker, LRPStart], CellScore | None]
    negated: bool = False  # the strategy's own value is higher-wins: shown as it (`shown`)

    @property
    def per_instance(self) -> bool:
        return self.share_key is None

    def shown(self, score: float) -> float:
        """The score as the strategy states it (a move's detail)."""
        return -score if self.negated else score


def as_no_process(item: LRPStart) -> LRPStart:
    """The item as an app no cell holds instances of (see NO_PROCESS)."""
    return dataclasses.replace(item, process_guid=NO_PROCESS)


def _diego(picker: Picker, item: LRPStart) -> CellScore:
    weight, pack = picker.config.starting_container_weight, picker.config.bin_pack_first_fit_weight
    memory, disk, pg = item.ask.memory_mb, item.ask.disk_mb, item.process_guid
    blob, cache = item.ask.source_blob, picker.config.cache_weight
    if uses_cache(blob, cache):
        return lambda slot: cached_lrp_score(slot, memory, disk, pg, weight, pack, blob, cache)
    return lambda slot: lrp_score(slot, memory, disk, pg, weight, pack)


def _diego_key(item: LRPStart, config: SchedulerConfig) -> Hashable:
    blob = item.ask.source_blob if uses_cache(item.ask.source_blob, config.cache_weight) else None
    return item.ask.memory_mb, item.ask.disk_mb, blob


def _loadmark(picker: Picker, item: LRPStart) -> CellScore:
    config = picker.config.loadmark
    return lambda slot: load_mark(slot, config)


def _objective(picker: Picker, item: LRPStart) -> CellScore | None:
    assert isinstance(picker, ObjectivePicker)  # both engines' objective pickers are
    objective = picker.objective_for(item.ask.objective)
    if isinstance(objective, ObjectiveError):
        return None
    facts, azs, zones, app_id = picker.lrp_facts(item), picker.azs, picker.zone_numbers, picker.app_id
    return lambda slot: -score(objective, facts, SlotBid(slot, zones[slot.zone], app_id), azs)


SCORES: dict[str, StrategyScore] = {
    "diego": StrategyScore(1.0, _diego_key, _diego),
    "loadmark": StrategyScore(100.0, lambda item, config: (), _loadmark),
    "objective": StrategyScore(1.0, None, _objective, negated=True),
}


def strategy_score(strategy: str) -> StrategyScore | None:
    """The strategy's comparable score; None for a strategy without one (dea, service, binpack, random)."""
    return SCORES.get(strategy)
