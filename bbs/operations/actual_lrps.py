"""Actual LRPs: their listings, and the reps' lifecycle reports (claimed, running, crashed, removed;
task starts and completions), group-committed: 100 cells reporting at once cost a few transactions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from common.group_commit import GroupCommit
from common.logging import instance_log

from ..actual_set import ActualChanges, ActualSet
from ..events import event
from ..lifecycle import LrpOutcome, apply_lrp_reports, apply_task_reports, lifecycle_keys
from ..lifecycle_wire import CellReport
from ..records import ORDINARY, ActualRecord, TaskRecord
from ..restart_policy import RestartPolicy
from ..store import Tx
from ..unit_of_work import Effects, UnitOfWork

LIFECYCLE_LOG = "bbs.lifecycle"
THREAD_ABOVE = 500  # instances in one lifecycle round above which its decisions run in a thread

# What a cell-wide rework decides (convergence.evacuate, forget_rebooted_cell, undrain): the starts.
Rework = Callable[[ActualSet, str, float], dict[str, set[int]]]


class ActualLRPs:
    def __init__(self, uow: UnitOfWork, policy: RestartPolicy) -> None:
        self.uow = uow
        self.policy = policy
        self._batcher: GroupCommit[tuple[str, CellReport], dict[str, Any]] = GroupCommit(
            self._lifecycle_batch
        )

    async def summarize(self, process_guid: str | None = None) -> dict[str, Any]:
        async with self.uow.read() as tx:
            counts = await tx.count_actuals(process_guid)
        by_state: dict[str, int] = {}
        by_presence: dict[str, int] = {}
        for state, presence, n in counts:
            by_presence[presence] = by_presence.get(presence, 0) + n
            if presence == ORDINARY:
                by_state[state] = by_state.get(state, 0) + n
        return {"total": sum(n for _, _, n in counts), "by_state": by_state, "by_presence": by_presence}

    async def list_all(self, **filters: str | None) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            return [r.to_wire() for r in await tx.list_actuals(**filters)]

    async def lifecycle(self, cell_id: str, report: CellReport) -> dict[str, Any]:
        """One cell's report. Reports that arrive while another transaction runs are applied
        together in the next one (group commit)."""
        return await self._batcher.submit((cell_id, report))

    async def _lifecycle_batch(self, batch: list[tuple[str, CellReport]]) -> list[dict[str, Any]]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            outcomes = await self._apply_lrp_reports(tx, batch, now, effects)
            refused_tasks = await self._apply_task_reports(tx, batch, now, effects)
        return [
            {"refused": outcome.refused, "refused_tasks": refused}
            for outcome, refused in zip(outcomes, refused_tasks, strict=True)
        ]

    async def _apply_lrp_reports(
        self, tx: Tx, batch: list[tuple[str, CellReport]], now: float, effects: Effects
    ) -> list[LrpOutcome]:
        claiming = {cell_id for cell_id, report in batch if report["claimed"]}
        cells = await tx.cells_by_id(claiming) if claiming else {}
        keys: set[tuple[str, int]] = set()
        for _, report in batch:
            keys |= lifecycle_keys(report)
        actuals = ActualSet(await tx.actuals_for_keys(keys) if keys else ())

        def decide() -> list[LrpOutcome]:
            return [
                apply_lrp_reports(actuals, report, cell_id, cells[cell_id].zone if cell_id in cells else "",
                                  now, self.policy)
                for cell_id, report in batch
            ]

        # A big round (thousands of instances) is decided in a worker thread, so heartbeats and
        # reads keep being served meanwhile; the working set is this transaction's own data.
        outcomes = await asyncio.to_thread(decide) if len(keys) > THREAD_ABOVE else decide()
        changes = actuals.diff()
        _log_lifecycle(batch, changes)
        await tx.apply_actual_changes(changes)
        effects.actual_events(changes)
        starts: dict[str, set[int]] = {}
        for outcome in outcomes:
            for process_guid, indices in outcome.starts.items():
                starts.setdefault(process_guid, set()).update(indices)
            if outcome.restart_due is not None:  # a delayed restart needs a pass when its backoff ends
                effects.pass_due = min(effects.pass_due or outcome.restart_due, outcome.restart_due)
        await self.uow.add_starts(tx, starts, effects)
        await self.uow.add_stops(tx, [stop for outcome in outcomes for stop in outcome.stops], effects)
        return outcomes

    async def _apply_task_reports(
        self, tx: Tx, batch: list[tuple[str, CellReport]], now: float, effects: Effects
    ) -> list[list[str]]:
        """The task starts and completions of each report; per report, the task guids refused."""
        refused_tasks: list[list[str]] = [[] for _ in batch]
        guids = {
            g for _, r in batch for g in (*r["tasks_started"], *(c.task_guid for c in r["tasks_completed"]))
        }
        if not guids:
            return refused_tasks
        tasks = await tx.tasks_by_guid(guids)
        touched: dict[str, TaskRecord] = {}
        for position, (cell_id, report) in enumerate(batch):
            if not report["tasks_started"] and not report["tasks_completed"]:
                continue
            task_outcome = apply_task_reports(
                tasks, report["tasks_started"], report["tasks_completed"], cell_id, now
            )
            refused_tasks[position] = task_outcome.refused
            for task in task_outcome.updated:
                tasks[task.task_guid] = touched[task.task_guid] = task
            effects.callbacks.extend(task_outcome.completed)
            effects.tasks_completed.extend(task_outcome.completed)
        await tx.update_tasks(touched.values())
        updated = list(touched.values())
        effects.events.append(lambda: [event("task_changed", t.to_wire(), now) for t in updated])
        return refused_tasks


async def rework_cell(
    uow: UnitOfWork, tx: Tx, held: list[ActualRecord], rework: Rework, cell_id: str, now: float,
    effects: Effects,
) -> None:
    """Apply `rework` (evacuate, forget_rebooted_cell, undrain) to every index a cell holds, in this
    transaction."""
    if not held:
        return
    actuals = ActualSet(await tx.actuals_for_keys((r.process_guid, r.index) for r in held))
    starts = rework(actuals, cell_id, now)
    changes = actuals.diff()
    await tx.apply_actual_changes(changes)
    effects.actual_events(changes)
    await uow.add_starts(tx, starts, effects)


def _log_lifecycle(batch: list[tuple[str, CellReport]], changes: ActualChanges) -> None:
    """A line per crash a cell reported, with the instance bound (crashes are few); a line per changed
    actual LRP only at debug (thousands a second start: at info they cost one level check per round)."""
    for cell_id, report in batch:
        for crash in report["crashed"]:
            instance_log(LIFECYCLE_LOG, crash["process_guid"], crash["index"], cell_id).info(
                "instance crashed", reason=crash["reason"])
    if logging.getLogger(LIFECYCLE_LOG).isEnabledFor(logging.DEBUG):
        for row in (*changes.inserts, *changes.updates):
            instance_log(LIFECYCLE_LOG, row.process_guid, row.index, row.cell_id or None).debug(
                "actual LRP", state=row.state, presence=row.presence)
