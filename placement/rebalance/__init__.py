"""Rebalancing: the moves that restore the balance the auction would have produced.

Diego never moves a running instance, so after a zone returns it stays empty until apps restart. The
planner looks at where instances run now and proposes moves, each judged with the engine's own filter
chain (`Picker.feasible_slots`: stack, tags, label expressions, volumes, devices, the strategy's own
filters, resources) and scored with the strategies' own cell scores (`scoring.lrp_score`, the load mark,
the objective: strategy_scores.py), never a copy. The rules, one module each, in the order they run (a
later rule never undoes an earlier one):

1. zone spread (zone_spread.py): an app whose instances per zone differ by more than one while a zone
   with fewer has a cell with room: an instance of its fullest zone goes to the best cell of its
   emptiest zone;
2. cell load (cell_load.py): a cell whose memory fraction is more than `load_tolerance` above the mean
   of the cells: an instance of the app it holds most of goes to the best cell that ends up less loaded
   than the source was, in the same zone when one fits, else in a zone where the app's spread holds;
3. load mark (load_mark.py): the same for apps on the `loadmark` strategy, whose cells' load is their
   load mark (the strategy's own score: swap, memory, disk, load average), judged against the mean mark
   of the cells they can run on; targets stay below the critical marks;
4. strategy margin (strategy_margin.py): an instance whose own strategy (strategy_scores.py: diego,
   loadmark, objective) scores another cell better than its own by more than `strategy_margin` of the
   score's unit, its own cell scored as if the instance were not there;
5. zone spread again, for an app an emptier zone had no room for until the moves since made some.

The working copy is planner.py (the cells as moves leave them); the later rules find their targets in
rankings (ranking.py) so that a plan at 1,000 cells and 60,000 instances stays within seconds.

Pinned instances never move: those of a `keep-replicas` LRP (the caller names them) and those holding
an ephemeral volume on their cell (volume stickiness: their data is there). Plain data and functions;
the BBS runs this on the state it holds and carries the moves out make-before-break.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..cell_offer import CellOffer
from ..types import SchedulerConfig
from ..work import LRPStart
from .cell_load import even_load
from .load_mark import even_load_marks
from .moves import CELL_LOAD, LOAD_MARK, STRATEGY_MARGIN, ZONE_SPREAD, Move, Placed, RebalanceConfig
from .planner import Planner
from .strategy_margin import move_by_margin
from .zone_spread import spread_zones

__all__ = [
    "CELL_LOAD", "LOAD_MARK", "STRATEGY_MARGIN", "ZONE_SPREAD",
    "Move", "Placed", "RebalanceConfig", "plan_moves",
]


def plan_moves(
    cells: Sequence[CellOffer],
    placed: Sequence[Placed],
    requests: dict[str, LRPStart],
    pinned_apps: Iterable[str] = (),
    config: SchedulerConfig | None = None,
    rebalance: RebalanceConfig | None = None,
) -> list[Move]:
    """The ordered moves (zone spread, cell load, load mark, strategy margin), at most `rebalance.max_moves`.

    `cells`: the schedulable cells as the auction would see them (what each holds already subtracted from
    its `available`, counted in its `lrp_counts`); `placed`: the running instances to consider; `requests`:
    each app's placement request (any index); `pinned_apps`: apps whose instances never move (keep-replicas).
    """
    planner = Planner(
        cells,
        placed,
        requests,
        frozenset(pinned_apps),
        config or SchedulerConfig(),
        rebalance or RebalanceConfig(),
    )
    spread_zones(planner)
    even_load(planner)
    even_load_marks(planner)
    move_by_margin(planner)
    spread_zones(planner)  # for an app an emptier zone had no room for until the moves since made some
    return planner.moves
