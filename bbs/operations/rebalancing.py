"""Rebalancing (`vendue rebalance`): plan moves of running instances toward a better spread, and carry
them out one by one (make-before-break) or only show them (dry run). The planner and the moves are
bbs/rebalancer.py's; this is the operation the API offers."""

from __future__ import annotations

from typing import Any

from common.models import RebalanceRequest

from ..errors import NotFound
from ..rebalancer import Rebalancer
from ..unit_of_work import UnitOfWork


class Rebalancing:
    def __init__(self, uow: UnitOfWork, rebalancer: Rebalancer) -> None:
        self.uow = uow
        self.rebalancer = rebalancer

    async def request(self, body: RebalanceRequest) -> dict[str, Any]:
        """Plan (one app's moves, or every app's), and queue the moves unless a dry run; the plan."""
        if body.app is not None:
            async with self.uow.read() as tx:
                if await tx.get_desired(body.app) is None:
                    raise NotFound(f"no app {body.app!r}")
        planned = await self.rebalancer.plan(body.app, body.max_moves)
        if not body.dry_run:
            self.rebalancer.enqueue(planned)
        return {"dry_run": body.dry_run, "moves": [p.move.to_wire() for p in planned]}

    def status(self) -> dict[str, Any]:
        return self.rebalancer.status()
