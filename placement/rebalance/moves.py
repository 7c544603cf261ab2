"""What the planner reads and answers: running instances in, moves out, and the knobs it plans with."""

from __future__ import annotations

from dataclasses import dataclass

# A move's reason: the rule that proposed it (one module of this package each).
ZONE_SPREAD = "zone_spread"
CELL_LOAD = "cell_load"
LOAD_MARK = "load_mark"
STRATEGY_MARGIN = "strategy_margin"


@dataclass(slots=True, frozen=True)
class Placed:
    """One running instance: its process, index and the cell it runs on."""

    process_guid: str
    index: int
    cell_id: str


@dataclass(slots=True, frozen=True)
class Move:
    """Move instance `index` of `process_guid` from `from_cell` to `to_cell`. `gain`: for a zone-spread
    move, how much the app's zone skew (most minus fewest instances per zone) drops; for a cell-load move,
    how much the source cell's memory fraction drops; for a load-mark move, how many points the source
    cell's load mark drops; for a strategy-margin move, how much the instance's score improves (in the
    strategy's own score)."""

    process_guid: str
    index: int
    from_cell: str
    to_cell: str
    from_zone: str
    to_zone: str
    reason: str
    detail: str
    gain: float

    def to_wire(self) -> dict[str, object]:
        return {
            "process_guid": self.process_guid,
            "index": self.index,
            "from_cell": self.from_cell,
            "to_cell": self.to_cell,
            "from_zone": self.from_zone,
            "to_zone": self.to_zone,
            "reason": self.reason,
            "detail": self.detail,
            "gain": round(self.gain, 4),
        }


@dataclass(slots=True, frozen=True)
class RebalanceConfig:
    max_moves: int = 0  # 0: every move found
    # a cell more than this above the mean memory fraction is overloaded; for the loadmark strategy's apps,
    # this many units (100 points) of load mark above the mean mark (strategy_scores.py)
    load_tolerance: float = 0.10
    apps: frozenset[str] | None = None  # only these apps' instances move (None: every app)
    # an instance moves when the best other cell beats its own by more than this many units of its
    # strategy's score (strategy_margin.py says why 0.2)
    strategy_margin: float = 0.2
    # cells the strategy-margin rule may score one by one per plan for strategies whose score reads the
    # instance (objective: one score per instance and candidate cell); the others share their scores
    instance_score_budget: int = 50_000
