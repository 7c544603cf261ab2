"""The sealed tables as a whole (desired LRPs and tasks, whose command and env sealing.py seals): which keys
sealed their rows, refusing to serve rows no key of the ring opens, and sealing rows again with the active
key (`vendue bbs rotate-keys`, rotation.py)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..encryption import KeyRing, KeyRingError, no_key_ring
from . import tables as t
from .sealing import open_definition, seal_definition
from .transaction import Transaction, keyed_update

SEALED_TABLES = (t.desired_lrps, t.tasks, t.lrp_versions)  # lrp_versions: store/versions.py reseals it
_GUID_COLUMN = {t.desired_lrps.name: "process_guid", t.tasks.name: "task_guid"}
_UPDATE_DEFINITION = {
    table.name: keyed_update(table, [_GUID_COLUMN[table.name]]) for table in (t.desired_lrps, t.tasks)
}


async def refuse_unknown_keys(engine: AsyncEngine, keys: KeyRing | None) -> None:
    """KeyRingError, before anything is served, when a sealed record could not be opened: the database
    holds records sealed with a key and there is no ring, or the ring lacks that key."""
    async with engine.connect() as connection:
        for table in SEALED_TABLES:
            for label in sorted(label for label in await _key_labels(connection, table) if label is not None):
                if keys is None:
                    raise KeyRingError(no_key_ring(label))
                if label not in keys.labels:
                    raise KeyRingError(keys.lacks(label))


async def _key_labels(connection: AsyncConnection, table: sa.Table) -> dict[str | None, int]:
    """How many rows of `table` are sealed under each key label (None: stored in the clear)."""
    query = sa.select(table.c.key_label, sa.func.count()).group_by(table.c.key_label)
    return {label: int(count) for label, count in (await connection.execute(query)).all()}


class Resealing(Transaction):
    async def key_labels(self) -> dict[str, dict[str | None, int]]:
        """Per table (desired_lrps, tasks, lrp_versions): how many rows are sealed under each key label
        (None: clear)."""
        return {table.name: await _key_labels(self.connection, table) for table in SEALED_TABLES}

    async def reseal(self, table_name: str, after: str, limit: int) -> list[str]:
        """Seal with the active key up to `limit` rows of `table_name` (desired_lrps or tasks) whose guid
        sorts after `after` and whose key is another (rows in the clear too); their guids, in order.
        Walking the guids (not "the first rows not yet done") makes a whole pass one read of the table, and a
        pass stopped half-way resumes by starting again: rows already done are passed over."""
        if self._keys is None:
            raise RuntimeError("resealing needs the key ring")
        table = t.desired_lrps if table_name == t.desired_lrps.name else t.tasks
        guid = table.c[_GUID_COLUMN[table.name]]
        c = table.c
        query = (
            sa.select(guid, c.definition, c.key_label, c.sealed)
            .where(guid > after, sa.or_(c.key_label.is_(None), c.key_label != self._keys.active))
            .order_by(guid)
            .limit(limit)
        )
        rows = await self._rows(query)
        params = []
        for row_guid, clear, label, sealed in rows:
            definition = open_definition(self._keys, table.name, row_guid, clear, label, sealed)
            clear, label, sealed = seal_definition(self._keys, table.name, row_guid, definition)
            params.append(
                {f"k_{guid.name}": row_guid, "definition": clear, "key_label": label, "sealed": sealed}
            )
        await self._executemany(_UPDATE_DEFINITION[table.name], params)
        return [row[0] for row in rows]
