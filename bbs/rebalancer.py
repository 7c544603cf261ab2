"""Rebalancing: plan moves on the state the BBS holds, carry them out make-before-break.

Where it runs: in the BBS, which holds the actual LRPs, the desired definitions and the cell states; the
plan is placement/rebalance/ (the engine's pure package, imported without the auctioneer
service), the moves the drain's evacuation aimed at one instance (bbs/rebalance_moves.py): the replacement
is auctioned like any start, and the auction, seeing the old instance still counted where it runs, places
it where the plan expects. The replica that took `POST /v1/rebalance` carries out its moves; a replica
that stops forgets the moves not started, and a started one ends as any evacuation does.

Budget (bbs/rebalance_budget.py): at most `rebalance_in_flight` moves at once, one per app, and
`rebalance_moves_per_minute` started per minute (by default one per present cell, at least 60); a move is
skipped when its app's desired count changed since the plan, and abandoned (the old instance kept) when
it changes meanwhile, when the replacement crashes, or when it does not run within
`rebalance_move_timeout`. Each tick reads only the rows of the moves in flight.

Automatic mode (`rebalance_interval` > 0, on the replica holding the convergence lease): a cell that
appears or returns starts up to AUTOMATIC_ROUNDS plans, each made once the previous one's moves have all
ended, until a plan finds nothing to do. One plan is not enough: a move's replacement goes where the
auction puts it, which is not always the planned cell (a cell that has just joined may miss an auction's
state fetch: a rep heartbeats before it subscribes on NATS, which can leave a joining cell at 3/2/1),
and a move may be abandoned. The rounds are bounded so that a move that keeps failing
the same way does not churn the app for ever; the next cell that appears starts them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placement.rebalance import Move, RebalanceConfig, plan_moves
from placement.types import SchedulerConfig

from .actual_set import ActualSet
from .events import event
from .rebalance_budget import moves_per_minute
from .rebalance_moves import abandon_move, move_outcome, pinned, placement_request, planner_cells, start_move

if TYPE_CHECKING:
    from .unit_of_work import Effects
    from .unit_of_work import UnitOfWork as BBS

log = logging.getLogger("bbs.rebalance")
TICK_S = 0.2  # how often moves in flight are checked and queued ones started
RECENT = 200  # finished moves remembered for GET /v1/rebalance
AUTOMATIC_ROUNDS = 4  # plans after a cell appears: the first and up to three follow-ups (see above)


@dataclass(slots=True)
class Planned:
    move: Move
    desired_instances: int  # the app's desired count when planned: a move never runs once it changed


@dataclass(slots=True)
class InFlight:
    planned: Planned
    started_at: float
    crash_count: int


@dataclass(slots=True)
class Progress:
    queued: deque[Planned] = field(default_factory=deque)
    in_flight: dict[tuple[str, int], InFlight] = field(default_factory=dict)
    finished: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT))
    started_at: deque[float] = field(default_factory=deque)  # starts within the last minute
    starting: Planned | None = (
        None  # out of the queue, its start not yet written: still in flight to a reader
    )


class Rebalancer:
    def __init__(self, bbs: BBS) -> None:
        self.bbs = bbs
        self.settings = bbs.settings
        self.progress = Progress()
        self._task: asyncio.Task[None] | None = None
        self._known_cells: set[str] | None = None  # present cells at the last automatic look
        self._rounds_left = 0  # automatic plans still to make once the moves in hand have ended
        self._cells_planned = 0  # schedulable cells at the last plan: the per-minute budget scales with them
        self._next_auto = 0.0

    # --- planning -------------------------------------------------------------------------------

    async def plan(self, app: str | None = None, max_moves: int = 0) -> list[Planned]:
        async with self.bbs.store.read() as tx:
            desired = await tx.list_desired()
            cells = await tx.list_cells(present_at=time.time())
            actuals = await tx.list_actuals()
        requests = {d.process_guid: placement_request(d) for d in desired}
        sizes = {d.process_guid: d.instances for d in desired}
        busy = set(self.progress.in_flight) | {
            (p.move.process_guid, p.move.index) for p in self.progress.queued
        }
        engine_cells, placed = planner_cells(cells, actuals, requests)
        self._cells_planned = len(engine_cells)
        placed = [p for p in placed if (p.process_guid, p.index) not in busy]
        config = RebalanceConfig(
            max_moves=max_moves,
            load_tolerance=self.settings.rebalance_load_tolerance,
            strategy_margin=self.settings.rebalance_strategy_margin,
            apps=None if app is None else frozenset({app}),
        )
        pinned_apps = {d.process_guid for d in desired if pinned(d, requests[d.process_guid])}
        moves = plan_moves(engine_cells, placed, requests, pinned_apps,
                           SchedulerConfig(cache_weight=self.settings.cache_weight), config)
        return [Planned(m, sizes[m.process_guid]) for m in moves]

    def enqueue(self, planned: list[Planned]) -> None:
        self.progress.queued.extend(planned)
        self.start()

    def status(self) -> dict[str, Any]:
        p = self.progress
        return {
            "queued": [q.move.to_wire() for q in p.queued],
            "in_flight": [f.planned.move.to_wire() for f in p.in_flight.values()]
            + ([p.starting.move.to_wire()] if p.starting is not None else []),
            "finished": list(p.finished),
        }

    # --- the loop -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rebalancer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.tick(time.time())
            except Exception:  # a failed tick (the database away) is tried again at the next
                log.exception("rebalancing tick failed")
            if not (self.progress.queued or self.progress.in_flight or self.settings.rebalance_interval):
                return
            await asyncio.sleep(TICK_S)

    async def tick(self, now: float) -> None:
        if self.settings.rebalance_interval and now >= self._next_auto:
            self._next_auto = now + self.settings.rebalance_interval
            await self._automatic(now)
        if self.progress.in_flight:
            await self._check(now)
        await self._start_due(now)

    async def _automatic(self, now: float) -> None:
        """Plan after a cell appeared or returned (not on the first look: the cluster found is the start),
        and again after each plan's moves ended, up to AUTOMATIC_ROUNDS plans or an empty one. Only the
        replica holding the convergence lease does: two would move the same apps at once."""
        converger = self.bbs.converger
        if converger is None or converger.token is None:
            self._known_cells, self._rounds_left = None, 0
            return
        async with self.bbs.store.read() as tx:
            present = {
                c.cell_id for c in await tx.list_cells(present_at=now) if not (c.cordoned or c.draining)
            }
        known, self._known_cells = self._known_cells, present
        if known is not None and present - known:
            self._rounds_left = AUTOMATIC_ROUNDS  # kept until the moves in hand end: a join is never missed
        if not self._rounds_left or self.progress.queued or self.progress.in_flight:
            return
        planned = await self.plan()
        round_ = AUTOMATIC_ROUNDS - self._rounds_left + 1
        self._rounds_left = self._rounds_left - 1 if planned else 0
        self.progress.queued.extend(planned)
        log.info("automatic rebalancing planned", extra={"data": {"moves": len(planned), "round": round_}})

    async def _start_due(self, now: float) -> None:
        p, s = self.progress, self.settings
        while p.started_at and p.started_at[0] <= now - 60.0:
            p.started_at.popleft()
        per_minute = moves_per_minute(s.rebalance_moves_per_minute, self._cells_planned)
        waiting: deque[Planned] = deque()
        while p.queued and len(p.in_flight) < s.rebalance_in_flight and len(p.started_at) < per_minute:
            planned = p.queued.popleft()
            if any(k[0] == planned.move.process_guid for k in p.in_flight):
                waiting.append(planned)  # one move per app at a time
                continue
            p.starting = planned
            try:
                await self._start(planned, now)
            finally:
                p.starting = None
        p.queued.extendleft(reversed(waiting))

    async def _start(self, planned: Planned, now: float) -> None:
        m, bbs = planned.move, self.bbs
        effects = _effects()
        async with bbs.store.write() as tx:
            desired = await tx.get_desired(m.process_guid)
            if desired is None or desired.instances != planned.desired_instances:
                self._finish(planned, "skipped", "the app's desired count changed", now)
                return
            actuals = ActualSet(await tx.actuals_for_keys([(m.process_guid, m.index)]))
            if not start_move(actuals, m.process_guid, m.index, m.from_cell, now):
                self._finish(planned, "skipped", "the instance no longer runs there alone", now)
                return
            crash_count = actuals.get(m.process_guid, m.index).crash_count  # type: ignore[union-attr]
            changes = actuals.diff()
            await tx.apply_actual_changes(changes)
            effects.actual_events(changes)
            await bbs.add_starts(tx, {m.process_guid: {m.index}}, effects, known=desired)
        self.progress.in_flight[(m.process_guid, m.index)] = InFlight(planned, now, crash_count)
        self.progress.started_at.append(now)
        bbs.metrics.rebalance_started.inc()
        effects.events.append(lambda: [event("rebalance_move_started", m.to_wire(), now)])
        bbs.run_effects(effects)

    async def _check(self, now: float) -> None:
        bbs = self.bbs
        flights = self.progress.in_flight
        async with bbs.store.read() as tx:
            actuals = ActualSet(await tx.actuals_for_keys(flights))
            sizes = {d.process_guid: d.instances for d in await tx.desired_sizes()} if flights else {}
        for key, flight in list(flights.items()):
            outcome = move_outcome(actuals, *key, flight.crash_count)
            if outcome == "completed":
                del flights[key]
                planned_cell, landed_on = flight.planned.move.to_cell, _cell_of(actuals, *key)
                why = "the new instance runs; the old one is stopped"
                if landed_on != planned_cell:
                    why = (f"the new instance runs on {landed_on}, not on {planned_cell} as planned (the "
                           "auction's choice); the old one is stopped")
                self._finish(flight.planned, "completed", why, now, landed_on=landed_on)
            elif outcome == "lost":
                del flights[key]
                self._finish(flight.planned, "abandoned", "the old instance is gone (its cell lost)", now)
            elif outcome == "failed":
                await self._abandon(key, flight, "the new instance crashed", now)
            elif sizes.get(key[0]) != flight.planned.desired_instances:
                await self._abandon(key, flight, "the app's desired count changed", now)
            elif now - flight.started_at > self.settings.rebalance_move_timeout:
                await self._abandon(key, flight, "the new instance did not run in time", now)

    async def _abandon(self, key: tuple[str, int], flight: InFlight, why: str, now: float) -> None:
        bbs = self.bbs
        effects = _effects()
        async with bbs.store.write() as tx:
            actuals = ActualSet(await tx.actuals_for_keys([key]))
            stops = abandon_move(actuals, *key)
            changes = actuals.diff()
            await tx.apply_actual_changes(changes)
            effects.actual_events(changes)
            await bbs.add_stops(tx, stops, effects)
        del self.progress.in_flight[key]
        self._finish(flight.planned, "abandoned", why, now)
        bbs.run_effects(effects)

    def _finish(self, planned: Planned, outcome: str, why: str, now: float, landed_on: str = "") -> None:
        wire = {**planned.move.to_wire(), "outcome": outcome, "why": why}
        if landed_on:
            wire["landed_on"] = landed_on  # where the replacement runs (the auction's pick)
        self.progress.finished.append(wire)
        log.info(f"rebalancing move {outcome}", extra={"data": wire})
        if outcome == "skipped":
            return
        metrics = self.bbs.metrics
        (metrics.rebalance_completed if outcome == "completed" else metrics.rebalance_abandoned).inc()
        kind = "rebalance_move_completed" if outcome == "completed" else "rebalance_move_abandoned"
        self.bbs.run_effects(_effects(events=[lambda: [event(kind, wire, now)]]))


def _cell_of(actuals: ActualSet, process_guid: str, index: int) -> str:
    row = actuals.get(process_guid, index)
    return row.cell_id if row is not None else ""


def _effects(**fields: Any) -> Effects:
    from .unit_of_work import Effects

    return Effects(**fields)
