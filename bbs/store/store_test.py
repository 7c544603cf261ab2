"""The store on a real SQLite file: migrations, bulk writes, keyed reads, leases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bbs.actual_set import ActualChanges
from bbs.records import RUNNING, SUSPECT, CellRecord, DesiredRecord, TaskRecord, unclaimed
from bbs.store import Store
from bbs.store.database import schema_revision


@pytest.fixture
async def store(tmp_path: Path):
    opened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'bbs.db'}")
    try:
        yield opened
    finally:
        await opened.close()


async def test_migrates_an_empty_database_to_head_in_wal_mode(store: Store) -> None:
    current, head = await schema_revision(store.engine)
    assert current == head == "0001"
    async with store.read() as tx:
        mode = (await tx.connection.exec_driver_sql("PRAGMA journal_mode")).scalar()
    assert mode == "wal"
    # A second migration run on the same file is a no-op.
    again = await Store.open(str(store.engine.url))
    await again.close()


async def test_desired_round_trip_and_conflict(store: Store) -> None:
    record = DesiredRecord("web", "d", 3, {"memory_mb": 128, "command": ["x"]}, 1.5, "epoch")
    async with store.write() as tx:
        assert await tx.insert_desireds([record])
        assert not await tx.insert_desireds([dataclasses.replace(record, process_guid="other"), record])
        assert await tx.list_desired() == [record]  # the failed batch wrote nothing
    async with store.read() as tx:
        assert await tx.get_desired("web") == record
        assert await tx.list_desired(domain="other") == []


async def test_ten_thousand_actuals_bulk_insert_update_delete(store: Store) -> None:
    rows = [unclaimed(f"app-{i % 100}", i // 100, "d", 10.0) for i in range(10_000)]
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(inserts=rows))
    async with store.read() as tx:
        assert len(await tx.list_actuals()) == 10_000
        picked = await tx.actuals_for_keys([("app-3", 7), ("app-99", 99), ("nope", 0)])
    assert sorted((r.process_guid, r.index) for r in picked) == [("app-3", 7), ("app-99", 99)]

    running = [dataclasses.replace(r, state=RUNNING, cell_id="c1", mod_index=1) for r in picked]
    async with store.write() as tx:
        await tx.apply_actual_changes(
            ActualChanges(
                deletes=[rows[0]],
                updates=running,
                inserts=[dataclasses.replace(picked[0], presence=SUSPECT)],
                previous={r.key: r for r in picked},
            )
        )
    async with store.read() as tx:
        assert len(await tx.list_actuals()) == 10_000
        assert {r.key for r in await tx.list_actuals(cell_id="c1")} == {
            ("app-3", 7, "ORDINARY"),
            ("app-99", 99, "ORDINARY"),
        }
        assert [r.key for r in await tx.list_actuals(presence=SUSPECT)] == [("app-3", 7, "SUSPECT")]
        assert ("UNCLAIMED", "ORDINARY", 9_997) in await tx.count_actuals()


async def test_tasks_and_cells(store: Store) -> None:
    task = TaskRecord("t1", "d", {"command": ["true"]}, created_at=1.0, updated_at=1.0)
    async with store.write() as tx:
        assert await tx.insert_task(task)
        assert not await tx.insert_task(task)
        await tx.update_tasks([dataclasses.replace(task, state="RUNNING", cell_id="c1")])
        c1 = CellRecord("c1", {"zone": "z1", "rep_url": "http://x"}, expires_at=40.0)
        await tx.put_cells([], [c1, CellRecord("c2", {"zone": "z1", "rep_url": "http://y"}, expires_at=20.0)])
        await tx.put_cells([dataclasses.replace(c1, expires_at=50.0)], [])
    async with store.read() as tx:
        assert (await tx.get_task("t1")).cell_id == "c1"
        assert [c.cell_id for c in await tx.list_cells(present_at=30.0)] == ["c1"]
        assert await tx.next_cell_expiry() == 20.0
    async with store.write() as tx:
        await tx.mark_cells_disappeared(["c2"])
        await tx.delete_tasks(["t1"])
    async with store.read() as tx:
        assert await tx.next_cell_expiry() == 50.0
        assert await tx.list_tasks() == []


async def test_lease_is_held_by_one_owner_until_it_expires(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.acquire_lease("convergence", "a", ttl=10, now=100) == 1
        assert await tx.acquire_lease("convergence", "b", ttl=10, now=105) is None
        assert await tx.acquire_lease("convergence", "a", ttl=10, now=105) == 1
        assert await tx.acquire_lease("convergence", "b", ttl=10, now=116) == 2
