"""What cells accepted, in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from bbs.store import Store


async def test_placement_reports_are_stored_as_they_came_and_deleted_by_id(store: Store) -> None:
    first = {"c1": {"lrps": "web:0 web:1", "tasks": ""}}
    second = {"c2": {"lrps": "", "tasks": "t1"}, "c3": {"lrps": "api:4", "tasks": ""}}
    async with store.write() as tx:
        await tx.insert_placement(10.5, first)
        await tx.insert_placement(11.0, second)
    async with store.read() as tx:
        times = await tx.placement_times()
        assert [t for _, t in times] == [10.5, 11.0]
        ids = [i for i, _ in times]
        assert await tx.placements_by_id(ids) == [(ids[0], 10.5, first), (ids[1], 11.0, second)]
    async with store.write() as tx:
        await tx.delete_placements([ids[0]])
    async with store.read() as tx:
        assert await tx.placement_times() == [(ids[1], 11.0)]
