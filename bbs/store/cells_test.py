"""Cells in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

from bbs.records import CellRecord
from bbs.store import Store


async def test_cell_presences_expire_and_disappear(store: Store) -> None:
    c1 = CellRecord("c1", {"zone": "z1", "rep_url": "http://x"}, expires_at=40.0)
    c2 = CellRecord("c2", {"zone": "z1", "rep_url": "http://y"}, expires_at=20.0)
    async with store.write() as tx:
        await tx.put_cells([], [c1, c2])
        await tx.put_cells([dataclasses.replace(c1, expires_at=50.0)], [])
    async with store.read() as tx:
        assert [c.cell_id for c in await tx.list_cells(present_at=30.0)] == ["c1"]
        assert [c.cell_id for c in await tx.list_cells()] == ["c1", "c2"]
        assert await tx.next_cell_expiry() == 20.0
    async with store.write() as tx:
        await tx.mark_cells_disappeared(["c2"])
    async with store.read() as tx:
        assert await tx.next_cell_expiry() == 50.0
        assert (await tx.get_cell("c2")).disappeared
    async with store.write() as tx:
        await tx.delete_cells(["c2"])
    async with store.read() as tx:
        assert await tx.get_cell("c2") is None
        assert list(await tx.cells_by_id(["c1", "c2"])) == ["c1"]


async def test_an_operators_flags_outlive_heartbeats(store: Store) -> None:
    cell = CellRecord("c1", {"zone": "z1", "rep_url": "http://x"}, expires_at=40.0)
    async with store.write() as tx:
        await tx.put_cells([], [cell])
        await tx.set_cell_flags("c1", cordoned=True, draining=True)
        await tx.put_cells([dataclasses.replace(cell, expires_at=50.0)], [])  # the next heartbeat
    async with store.read() as tx:
        stored = await tx.get_cell("c1")
    assert stored == dataclasses.replace(cell, expires_at=50.0, cordoned=True, draining=True), stored
