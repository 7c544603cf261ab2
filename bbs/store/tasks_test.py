"""Tasks in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

from bbs.records import TaskRecord
from bbs.store import Store


async def test_tasks_are_inserted_once_updated_read_and_deleted(store: Store) -> None:
    task = TaskRecord("t1", "d", {"command": ["true"]}, created_at=1.0, updated_at=1.0)
    other = TaskRecord("t0", "e", {"command": ["false"]}, created_at=2.0, updated_at=2.0)
    async with store.write() as tx:
        assert await tx.insert_task(task)
        assert not await tx.insert_task(task)
        assert await tx.insert_task(other)
        await tx.update_tasks([dataclasses.replace(task, state="RUNNING", cell_id="c1")])
    async with store.read() as tx:
        assert (await tx.get_task("t1")).cell_id == "c1"
        assert await tx.get_task("nope") is None
        assert [r.task_guid for r in await tx.list_tasks()] == ["t1", "t0"]  # by creation time
        assert [r.task_guid for r in await tx.list_tasks(state="RUNNING")] == ["t1"]
        assert [r.task_guid for r in await tx.list_tasks(domain="e")] == ["t0"]
        assert [r.task_guid for r in await tx.list_tasks(cell_ids=["c1", "c9"])] == ["t1"]
        assert await tx.list_tasks(state="RUNNING", cell_ids=["c9"]) == []
        assert await tx.tasks_by_guid(["t0", "nope"]) == {"t0": other}
    async with store.write() as tx:
        await tx.delete_tasks(["t1", "t0"])
    async with store.read() as tx:
        assert await tx.list_tasks() == []
