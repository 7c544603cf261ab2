"""Desired LRPs in the store, on SQLite and PostgreSQL: round trip, conflicts, sizes, order."""

from __future__ import annotations

import dataclasses

from bbs.records import DesiredRecord, DesiredSize
from bbs.store import Store


async def test_desired_round_trip_and_conflict(store: Store) -> None:
    record = DesiredRecord("web", "d", 3, {"memory_mb": 128, "command": ["x"]}, 1.5, "epoch")
    async with store.write() as tx:
        assert await tx.insert_desireds([record])
        assert not await tx.insert_desireds([dataclasses.replace(record, process_guid="other"), record])
        assert await tx.list_desired() == [record]  # the failed batch wrote nothing
    async with store.read() as tx:
        assert await tx.get_desired("web") == record
        assert await tx.list_desired(domain="other") == []


async def test_desired_sizes_are_the_counts_without_definitions(store: Store) -> None:
    records = [
        DesiredRecord(g, "d", n, {"command": ["x"]}, 1.5, "epoch") for g, n in [("web", 3), ("api", 1)]
    ]
    records[1].on_cell_loss = "keep-replicas"
    async with store.write() as tx:
        assert await tx.insert_desireds(records)
    async with store.read() as tx:
        assert await tx.desired_sizes() == [DesiredSize("api", "d", 1, "keep-replicas"),
                                            DesiredSize("web", "d", 3, "reschedule")]
        assert (await tx.get_desired("api")).on_cell_loss == "keep-replicas"
    records[0].on_cell_loss = "keep-replicas"
    async with store.write() as tx:
        await tx.update_desired(records[0])
    async with store.read() as tx:
        assert [d.on_cell_loss for d in await tx.desired_sizes()] == ["keep-replicas", "keep-replicas"]


async def test_lists_sort_strings_by_code_point(store: Store) -> None:
    guids = ["app1", "app-2", "App3", "app_4", "app10"]  # a locale collation would interleave these
    async with store.write() as tx:
        assert await tx.insert_desireds([DesiredRecord(g, "d", 1, {}, 1.0, "e") for g in guids])
    async with store.read() as tx:
        assert [d.process_guid for d in await tx.list_desired()] == sorted(guids)
