"""Rebalancing: the moves that restore the balance the auction would have produced (issue #18).

Diego never moves a running instance, so after a zone returns it stays empty until apps restart. The
planner looks at where instances run now and proposes moves, each judged with the engine's own filter
chain (`Picker.feasible_slots`: stack, tags, label expressions, volumes, devices, the strategy's own
filters, resources) and scored with the auction's own cell score (`scoring.lrp_score`), never a copy.
The rules, one module each, in the order they run (a later rule never undoes an earlier one):

1. zone spread (zone_spread.py): an app whose instances per zone differ by more than one while a zone
   with fewer has a cell with room: an instance of its fullest zone goes to the best cell of its
   emptiest zone;
2. cell load (cell_load.py): a cell whose memory fraction is more than `load_tolerance` above the mean
   of the cells: an instance of the app it holds most of goes to the best cell that ends up less loaded
   than the source was, in the same zone when one fits, else in a zone where the app's spread holds.

Pinned instances never move: those of a `keep-replicas` LRP (the caller names them) and those holding
an ephemeral volume on their cell (volume stickiness: their data is there). Plain data and functions;
the BBS runs this on the state it holds and carries the moves out make-before-break.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..types import Cell, LRPStart, SchedulerConfig
from .cell_load import even_load
from .moves import CELL_LOAD, ZONE_SPREAD, Move, Placed, RebalanceConfig
from .planner import Planner
from .zone_spread import spread_zones

__all__ = ["CELL_LOAD", "ZONE_SPREAD", "Move", "Placed", "RebalanceConfig", "plan_moves"]


def plan_moves(
    cells: Sequence[Cell],
    placed: Sequence[Placed],
    requests: dict[str, LRPStart],
    pinned_apps: Iterable[str] = (),
    config: SchedulerConfig | None = None,
    rebalance: RebalanceConfig | None = None,
) -> list[Move]:
    """The ordered moves (zone spread first, then cell load), at most `rebalance.max_moves`.

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
    return planner.moves
