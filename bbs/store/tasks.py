"""Tasks: a definition sealed on the way in and opened on the way out (sealing.py), and never written again:
every state change updates the other columns only."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ..records import TaskRecord
from . import tables as t
from .sealing import open_definition, seal_definition
from .transaction import Transaction, in_chunks, keyed_update

_TASK_FIELDS = [f.name for f in dataclasses.fields(TaskRecord)]
# Records are built from the first columns of a row, positionally; the sealed part follows them.
assert [c.name for c in t.tasks.columns] == [*_TASK_FIELDS, "key_label", "sealed"]
_TASK_WIDTH = len(_TASK_FIELDS)
# A task's definition never changes after it is created: updates (every state change) leave it, and its
# sealed part, alone.
_TASK_UPDATED_FIELDS = [name for name in _TASK_FIELDS if name not in ("task_guid", "definition")]
_UPDATE_TASK = keyed_update(t.tasks, ["task_guid"])


class TaskQueries(Transaction):
    def _task(self, row: sa.Row) -> TaskRecord:
        record = TaskRecord(*row[:_TASK_WIDTH])
        record.definition = open_definition(
            self._keys, t.tasks.name, record.task_guid, record.definition, row.key_label, row.sealed
        )
        return record

    def _task_params(self, record: TaskRecord) -> dict[str, Any]:
        clear, label, sealed = seal_definition(self._keys, t.tasks.name, record.task_guid, record.definition)
        params = {name: getattr(record, name) for name in _TASK_FIELDS}
        return {**params, "definition": clear, "key_label": label, "sealed": sealed}

    async def _read_tasks(self, *where: sa.ColumnElement[bool], ordered: bool = False) -> list[TaskRecord]:
        """The one way task rows are read: those matching `where`, by creation time then guid when
        `ordered`."""
        query = sa.select(t.tasks).where(*where)
        if ordered:
            query = query.order_by(t.tasks.c.created_at, self._text_order(t.tasks.c.task_guid))
        return await self._records(query, self._task)

    async def get_task(self, task_guid: str) -> TaskRecord | None:
        found = await self._read_tasks(t.tasks.c.task_guid == task_guid)
        return found[0] if found else None

    async def tasks_by_guid(self, task_guids: Iterable[str]) -> dict[str, TaskRecord]:
        found: dict[str, TaskRecord] = {}
        for where in in_chunks(t.tasks.c.task_guid, task_guids):
            found.update((record.task_guid, record) for record in await self._read_tasks(where))
        return found

    async def list_tasks(
        self, state: str | None = None, domain: str | None = None, cell_ids: Collection[str] | None = None
    ) -> list[TaskRecord]:
        """By creation time; `cell_ids` narrows to the tasks those cells hold (every definition read is
        opened, so a caller after a few cells' tasks asks for just those)."""
        where = []
        if state is not None:
            where.append(t.tasks.c.state == state)
        if domain is not None:
            where.append(t.tasks.c.domain == domain)
        if cell_ids is not None:
            where.append(t.tasks.c.cell_id.in_(list(cell_ids)))
        return await self._read_tasks(*where, ordered=True)

    async def insert_task(self, record: TaskRecord) -> bool:
        """False when a task with this guid exists already."""
        try:
            # In a savepoint: on PostgreSQL a failed statement would void the whole transaction.
            async with self.connection.begin_nested():
                await self.connection.execute(t.tasks.insert().values(self._task_params(record)))
        except IntegrityError:
            return False
        return True

    async def update_tasks(self, records: Iterable[TaskRecord]) -> None:
        """Write the state of these tasks (their definitions never change, and are left as stored)."""
        params = [{"k_task_guid": r.task_guid, **{name: getattr(r, name) for name in _TASK_UPDATED_FIELDS}}
                  for r in records]
        await self._executemany(_UPDATE_TASK, params)

    async def delete_tasks(self, task_guids: Iterable[str]) -> None:
        for where in in_chunks(t.tasks.c.task_guid, task_guids):
            await self.connection.execute(t.tasks.delete().where(where))
