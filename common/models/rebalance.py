"""Rebalancing: POST /v1/rebalance's request, plan and status."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .fields import Guid, Open, Strict


class RebalanceRequest(Strict):
    """`POST /v1/rebalance` (`vendue rebalance`): plan the moves that restore balance; unless `dry_run`,
    carry them out make-before-break within the BBS's budget. `app`: only its instances; `max_moves`: at
    most this many (0: all found)."""

    dry_run: bool = False
    app: Guid | None = None
    max_moves: Annotated[int, Field(ge=0, le=100_000)] = 0


class RebalanceMove(Open):
    process_guid: str
    index: int
    from_cell: str
    to_cell: str
    from_zone: str
    to_zone: str
    reason: Literal["zone_spread", "cell_load", "load_mark", "strategy_margin"]
    detail: str
    gain: float
    outcome: Literal["completed", "abandoned", "skipped"] | None = None  # finished moves only
    why: str | None = None
    landed_on: str | None = None  # a completed move's: the cell its replacement runs on (the auction's pick)


class RebalancePlan(Open):
    dry_run: bool
    moves: list[RebalanceMove]


class RebalanceStatus(Open):
    queued: list[RebalanceMove]
    in_flight: list[RebalanceMove]
    finished: list[RebalanceMove]  # the latest, oldest first
