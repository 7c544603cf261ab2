"""The rollout driver: carries out the rollouts in the `rollouts` table (decisions: bbs/rollout.py).

Where it runs: on the replica holding the convergence lease, alone (two drivers would start the same
moves). Its state is the table, read again at every tick, so a rollout goes on after a BBS restart or a
change of leader where it stood: the moves in flight are rows of the actual LRPs (EVACUATING old
instances, their replacements) and the rollout's record names their indices and start times.

Each tick looks at every active rollout in its own write transaction: read the app's desired LRP and
actual instances, decide (`step`), write the moves started or abandoned, the rollout, and send the
auctions, stops and `rollout_changed` events after commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from .actual_set import ActualSet
from .events import event
from .records import DesiredRecord
from .rollout import ACTIVE, FAILED, PAUSED, RolloutRecord, step

if TYPE_CHECKING:
    from .operations.rollouts import Rollouts
    from .unit_of_work import UnitOfWork

log = logging.getLogger("bbs.rollouts")
TICK_S = 0.25  # how often active rollouts are looked at
IDLE_TICK_S = 1.0  # how often the table is looked at when no rollout is active (a new leader's first look)
# A replacement's start timeout: its health check's (the time the rep gives it to pass) plus the time to be
# placed and fetch its artifacts.
START_GRACE_S = 30.0


def start_timeout(desired: DesiredRecord) -> float:
    check = desired.definition["health_check"] if "health_check" in desired.definition else {}
    return float(check.get("timeout_s", 60.0)) + START_GRACE_S


class RolloutDriver:
    def __init__(self, uow: UnitOfWork, ops: Rollouts) -> None:
        self.uow = uow
        self.ops = ops
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        ops.wake = self._wake.set

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rollouts")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def leads(self) -> bool:
        converger = self.uow.converger
        return converger is not None and converger.token is not None

    async def _run(self) -> None:
        while True:
            active = False
            if self.leads():
                try:
                    active = await self.tick(time.time())
                except Exception:  # a failed tick (the database away) is tried again at the next
                    log.exception("rollout tick failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S if active else IDLE_TICK_S)

    async def tick(self, now: float) -> bool:
        """Advance every active rollout once; whether any is still active."""
        async with self.uow.read() as tx:
            rows = await tx.active_rollouts(ACTIVE)
        still = False
        for seq, data in rows:
            if data["state"] == PAUSED and not data.get("in_flight"):
                continue  # nothing to look at until resumed (or superseded)
            still = await self._advance(data["process_guid"], seq, now) or still
        return still

    async def _advance(self, process_guid: str, seq: int, now: float) -> bool:
        uow = self.uow
        async with uow.write() as (tx, effects):
            history = await tx.list_rollouts(process_guid)
            if not history or history[0][0] != seq:
                return False  # superseded meanwhile
            rollout = RolloutRecord.from_data(history[0][1])
            if not rollout.active:
                return False
            before = rollout.summary()
            desired = await tx.get_desired(process_guid)
            if desired is None:
                rollout.state, rollout.finished_at = FAILED, now
                rollout.reason = "the desired LRP was removed"
                await tx.put_rollout(process_guid, seq, rollout.to_data())
                return False
            actuals = ActualSet(await tx.list_actuals(process_guid=process_guid))
            was = rollout.state
            decided = step(rollout, desired.instances, actuals, now, start_timeout(desired))
            if decided.reverted:
                back = await tx.get_version(process_guid, rollout.from_version)
                if back is None:  # forgotten (more than the versions kept): nothing to go back to
                    rollout.state, rollout.finished_at = FAILED, now
                else:
                    await self.ops.revert(tx, desired, back, effects, now)
                    log.info("rollout rolling back", extra={"data": rollout.to_wire()})
            changes = actuals.diff()
            await tx.apply_actual_changes(changes)
            effects.actual_events(changes)
            await uow.add_stops(tx, decided.stops, effects)
            if decided.starts:
                await uow.add_starts(tx, {process_guid: decided.starts}, effects, known=desired)
            if rollout.summary() != before or decided.starts or decided.stops or rollout.state != was:
                rollout.updated_at = now
                await tx.put_rollout(process_guid, seq, rollout.to_data())
                if rollout.summary() != before:
                    wire = rollout.to_wire()
                    effects.events.append(lambda: [event("rollout_changed", wire, now)])
                    log.info("rollout changed", extra={"data": wire})
        return rollout.active
