"""Tasks: desire (auctioned after commit), read, cancel (the rep told after commit), delete once
completed; and failing the tasks of cells whose rep restarted (a heartbeat's)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, cast

from common.models import TaskCreate

from ..convergence import fail_tasks_of_rebooted_cells
from ..errors import Conflict, NotFound
from ..events import event
from ..records import COMPLETED, RESOLVING, TASK_RUNNING, TaskDefinition, TaskRecord, completed
from ..store import Tx
from ..unit_of_work import Effects, UnitOfWork

log = logging.getLogger("bbs.tasks")

CANCELLED = "cancelled"


class Tasks:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def desire(self, body: TaskCreate) -> dict[str, Any]:
        now = time.time()
        record = TaskRecord(
            task_guid=body.task_guid,
            domain=body.domain,
            definition=cast(TaskDefinition, body.model_dump(mode="json")),
            created_at=now,
            updated_at=now,
            auctioned_at=now,
        )
        wire = record.to_wire()
        async with self.uow.write() as (tx, effects):
            if not await tx.insert_task(record):
                raise Conflict(f"task {body.task_guid!r} exists")
            effects.events.append(lambda: [event("task_created", wire, now)])
            effects.task_starts.append({"task": wire})
        return wire

    async def get(self, task_guid: str) -> dict[str, Any]:
        async with self.uow.read() as tx:
            record = await tx.get_task(task_guid)
        if record is None:
            raise NotFound(f"task {task_guid!r} not found")
        return record.to_wire()

    async def list_all(self, state: str | None = None, domain: str | None = None) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            return [r.to_wire() for r in await tx.list_tasks(state, domain)]

    async def cancel(self, task_guid: str) -> dict[str, Any]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            task = await tx.get_task(task_guid)
            if task is None:
                raise NotFound(f"task {task_guid!r} not found")
            if task.state in (COMPLETED, RESOLVING):
                raise Conflict(f"task {task_guid!r} is {task.state} already")
            if task.state == TASK_RUNNING:
                cell = await tx.get_cell(task.cell_id)
                if cell is not None and cell.rep_url:
                    effects.cancels.append((cell, task_guid))
            task = completed(task, now, failed=True, failure_reason=CANCELLED)
            await tx.update_tasks([task])
            wire = task.to_wire()
            effects.events.append(lambda: [event("task_changed", wire, now)])
            effects.callbacks.append(task)
            effects.tasks_completed.append(task)
        return wire

    async def resolving(self, task_guid: str) -> dict[str, Any]:
        """Diego's ResolvingTask: a COMPLETED task's result is being handled (its client then deletes it);
        only a COMPLETED task can be (409 otherwise)."""
        now = time.time()
        async with self.uow.write() as (tx, effects):
            task = await tx.get_task(task_guid)
            if task is None:
                raise NotFound(f"task {task_guid!r} not found")
            if task.state != COMPLETED:
                raise Conflict(f"task {task_guid!r} is {task.state}; only a completed task can be resolving")
            task = dataclasses.replace(task, state=RESOLVING, updated_at=now)
            await tx.update_tasks([task])
            wire = task.to_wire()
            effects.events.append(lambda: [event("task_changed", wire, now)])
        return wire

    async def delete(self, task_guid: str) -> None:
        async with self.uow.write() as (tx, effects):
            task = await tx.get_task(task_guid)
            if task is None:
                raise NotFound(f"task {task_guid!r} not found")
            if task.state not in (COMPLETED, RESOLVING):
                raise Conflict(f"task {task_guid!r} is {task.state}; only a completed task can be deleted")
            await tx.delete_tasks([task_guid])
            wire = task.to_wire()
            effects.events.append(lambda: [event("task_removed", wire)])


async def fail_tasks_of(tx: Tx, rebooted: list[str], now: float, effects: Effects) -> None:
    """Fail the tasks RUNNING on cells whose reps restarted (convergence.fail_tasks_of_rebooted_cells),
    in this transaction, their callbacks and events with it."""
    running_there = await tx.list_tasks(state=TASK_RUNNING, cell_ids=rebooted)
    failed = fail_tasks_of_rebooted_cells(running_there, rebooted, now)
    if not failed:
        return
    await tx.update_tasks(failed)
    log.info("tasks failed: their cell restarted",
             extra={"data": {"cells": rebooted, "tasks": [t.task_guid for t in failed]}})
    effects.events.append(lambda: [event("task_changed", t.to_wire(), now)
                                   for t in failed])
    effects.callbacks.extend(t for t in failed if t.callback_url)
    effects.tasks_completed.extend(failed)
