"""Actual LRPs in the store, on SQLite and PostgreSQL: bulk writes and keyed reads."""

from __future__ import annotations

import dataclasses

from bbs.actual_set import ActualChanges
from bbs.records import RUNNING, SUSPECT, changed, unclaimed
from bbs.store import Store


async def test_updates_write_exactly_the_columns_each_row_changed(store: Store) -> None:
    rows = [unclaimed("web", i, "d", 10.0) for i in range(4)]
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(inserts=rows))
    ports = [{"container_port": 8080, "host_port": 61000}]
    updated = [
        changed(rows[0], state=RUNNING, cell_id="c1", ports=ports, address="h:61000"),
        changed(rows[1], placement_error="no room"),
        changed(rows[2], state=RUNNING, cell_id="c2", ports=[{**ports[0], "host_port": 61001}]),
        rows[3],  # unchanged: nothing to write
    ]
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(updates=updated, previous={r.key: r for r in rows}))
    async with store.read() as tx:
        assert await tx.list_actuals() == updated


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


async def test_reads_from_the_database_answer_as_the_in_memory_copy_does(store: Store) -> None:
    """More guids and keys than one statement takes (CHUNK), and a last chunk padded to its bucket: the
    database answers exactly what the copy would."""
    rows = [unclaimed(f"app-{i % 900}", i // 900, "d", 10.0) for i in range(2_700)]
    rows.append(dataclasses.replace(rows[2 * 900 + 6], presence=SUSPECT))  # app-6's index 2, read both ways
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(inserts=rows))
    guids = [f"app-{i}" for i in range(0, 905, 2)]  # 453 (3 unknown): a full chunk, then 53 padded to 64
    keys = [(f"app-{i}", i % 4) for i in range(0, 905, 3)]  # 302: padded to 400; a quarter have no index 3
    answers = {}
    for source in ("memory", "database"):
        if source == "database":
            store.actual_cache.invalidate()
        async with store.read() as tx:
            if source == "memory":
                await tx.all_actuals()  # loads the copy
            assert (await tx._cached() is not None) == (source == "memory")
            answers[source] = (
                sorted(r.key for r in await tx.actuals_of(guids)),
                sorted(r.key for r in await tx.actuals_for_keys(keys)),
            )
    of_guids, for_keys = answers["database"]
    assert (len(of_guids), len(for_keys)) == (450 * 3 + 1, 225 + 1)
    assert answers["database"] == answers["memory"]
