"""The store on a real SQLite file and a real PostgreSQL database: migrations, bulk writes, keyed
reads, leases, and refusing a schema newer than this code."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import sqlalchemy as sa

from bbs.actual_set import ActualChanges
from bbs.records import (
    RUNNING,
    SUSPECT,
    CellRecord,
    DesiredRecord,
    DesiredSize,
    TaskRecord,
    TokenRecord,
    changed,
    unclaimed,
)
from bbs.store import Store, tables
from bbs.store.database import SchemaTooNew, create_engine, is_sqlite, json_dumps, migrate, schema_revision
from common.priority_lock_test import queued  # until n writes wait for the lock (a deadline, not a sleep)


@pytest.fixture
async def store(database_url: str):
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


async def test_migrates_an_empty_database_to_head(store: Store, database_url: str) -> None:
    current, head = await schema_revision(store.engine)
    assert current == head == "0009"
    if is_sqlite(database_url):
        async with store.read() as tx:
            assert (await tx.connection.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
    # A second migration run on the same database is a no-op.
    again = await Store.open(database_url)
    await again.close()


async def test_refuses_a_schema_newer_than_this_code(store: Store, database_url: str) -> None:
    async with store.engine.begin() as connection:
        await connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    expected = (
        "database schema 9999_from_the_future is newer than this BBS (knows up to 0009): upgrade the BBS"
    )
    for run_migrations in (True, False):
        with pytest.raises(SchemaTooNew) as refused:
            await Store.open(database_url, run_migrations=run_migrations)
        assert str(refused.value) == expected


async def test_replicas_opening_an_empty_postgres_database_together_migrate_it_once(
    fresh_postgres_database: str,
) -> None:
    opened = await asyncio.gather(*(Store.open(fresh_postgres_database) for _ in range(4)))
    try:
        assert {(await schema_revision(s.engine))[0] for s in opened} == {"0009"}
    finally:
        await asyncio.gather(*(s.close() for s in opened))


async def test_desired_round_trip_and_conflict(store: Store) -> None:
    record = DesiredRecord("web", "d", 3, {"memory_mb": 128, "command": ["x"]}, 1.5, "epoch")
    async with store.write() as tx:
        assert await tx.insert_desireds([record])
        assert not await tx.insert_desireds([dataclasses.replace(record, process_guid="other"), record])
        assert await tx.list_desired() == [record]  # the failed batch wrote nothing
    async with store.read() as tx:
        assert await tx.get_desired("web") == record
        assert await tx.list_desired(domain="other") == []


def test_json_columns_are_encoded_as_json_dumps_would() -> None:
    import json

    for value in (
        [],
        [{"container_port": 8080, "host_port": 61000}],
        {"a": [1, 2.5, None, True, 'é"x']},
        "s",
        5,
    ):
        assert json_dumps(value) == json.dumps(value)
    with pytest.raises(TypeError):
        json_dumps({"a": object()})


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


async def test_lease_expiry_is_decided_by_the_database_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica whose own clock runs an hour ahead (or behind) neither takes an unexpired lease nor
    sees it as expired: without `now`, the store asks the database for the time."""
    import time

    async with store.write() as tx:
        database_now = await tx.database_time()
        assert await tx.acquire_lease("convergence", "a", ttl=30) == 1
    assert abs(database_now - time.time()) < 5, "this test's database runs on this machine's clock"
    real_time = time.time
    for skew in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda skew=skew: real_time() + skew)
        async with store.write() as tx:
            assert await tx.acquire_lease("convergence", "b", ttl=30) is None
            assert (await tx.held_lease("convergence")).owner == "a"
            lease = await tx.lease("convergence")
    assert database_now + 29 < lease.expires_at < database_now + 35, lease
    async with store.write() as tx:  # the lease runs out by the database's clock: another owner takes it
        assert await tx.acquire_lease("convergence", "a", ttl=0.05) == 1
    deadline = real_time() + 5
    while True:
        async with store.write() as tx:
            if (taken := await tx.acquire_lease("convergence", "b", ttl=30)) is not None:
                break
        assert real_time() < deadline, "expected the 0.05 s lease to expire by the database clock within 5 s"
        await asyncio.sleep(0.02)
    assert taken == 2


async def test_tokens_are_kept_by_hash_listed_and_revoked(store: Store) -> None:
    first = TokenRecord("t1", "ops", "admin", "a" * 64, created_at=100.0)
    second = TokenRecord("t2", "", "reader", "b" * 64, created_at=200.0, expires_at=300.0)
    async with store.write() as tx:
        await tx.insert_token(first)
        await tx.insert_token(second)
    async with store.read() as tx:
        assert await tx.list_tokens() == [first, second]
        assert await tx.token_by_hash("b" * 64) == second
        assert await tx.token_by_hash("c" * 64) is None
    async with store.write() as tx:
        assert await tx.revoke_token("t1", now=150.0)
        assert await tx.revoke_token("t1", now=160.0)  # revoked twice: still revoked, from the first time
        assert not await tx.revoke_token("nope", now=150.0)
    async with store.read() as tx:
        revoked = await tx.token_by_hash("a" * 64)
    assert revoked == dataclasses.replace(first, revoked_at=150.0) and not revoked.valid(now=151.0)
    assert second.valid(now=299.0) and not second.valid(now=300.0)


async def test_upgrade_from_the_first_schema_keeps_rows_and_lifts_string_limits(database_url: str) -> None:
    engine = create_engine(database_url)
    store = Store(engine)
    try:
        await migrate(engine, "0001")
        before = unclaimed("web", 0, "d", 1.0)
        row = {
            ("idx" if name == "index" else name): value for name, value in dataclasses.asdict(before).items()
        }
        async with engine.begin() as connection:  # the store of this code needs 0004's generations table
            await connection.execute(tables.actual_lrps.insert().values(row))
        desired = {"process_guid": "old", "domain": "d", "instances": 1, "definition": {"command": ["x"]},
                   "created_at": 1.0, "mod_epoch": "e", "mod_index": 0}
        async with engine.begin() as connection:
            await connection.execute(tables.desired_lrps.insert().values(desired))
        await migrate(engine)
        assert (await schema_revision(engine))[0] == "0009"
        async with store.read() as tx:  # 0008: a desired LRP from before keeps Diego's cell-loss policy
            assert (await tx.get_desired("old")).on_cell_loss == "reschedule"
        # What reps report is stored whole on both databases (PostgreSQL enforced VARCHAR(n) before).
        long = dataclasses.replace(
            unclaimed("web", 1, "d", 1.0),
            instance_guid="i" * 200,
            zone="z" * 300,
            host="h" * 300,
            address="a" * 400,
        )
        async with store.write() as tx:
            await tx.apply_actual_changes(ActualChanges(inserts=[long]))
        async with store.read() as tx:
            assert await tx.list_actuals() == [before, long]
    finally:
        await store.close()


async def test_the_migrations_create_exactly_the_tables_the_store_uses(
    store: Store, database_url: str
) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from bbs.store.tables import metadata

    def differences(connection: sa.Connection) -> list[object]:
        return list(compare_metadata(MigrationContext.configure(connection), metadata))

    async with store.engine.connect() as connection:
        found = await connection.run_sync(differences)
    if is_sqlite(database_url):  # SQLite ignores VARCHAR lengths: 0002 leaves those columns be there
        found = [d for d in found if not (isinstance(d, list) and d[0][0] == "modify_type")]
    assert found == []


async def test_lists_sort_strings_by_code_point(store: Store) -> None:
    guids = ["app1", "app-2", "App3", "app_4", "app10"]  # a locale collation would interleave these
    async with store.write() as tx:
        assert await tx.insert_desireds([DesiredRecord(g, "d", 1, {}, 1.0, "e") for g in guids])
    async with store.read() as tx:
        assert [d.process_guid for d in await tx.list_desired()] == sorted(guids)


async def test_lease_records_where_its_holder_answers(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.lease("auctioneer") is None
        assert await tx.acquire_lease("auctioneer", "a", ttl=10, now=100, url="http://a:1") == 1
        assert await tx.acquire_lease("auctioneer", "b", ttl=10, now=111, url="http://b:2") == 2
        lease = await tx.lease("auctioneer")
    assert lease is not None
    assert (lease.owner, lease.token, lease.expires_at, lease.url) == ("b", 2, 121, "http://b:2")


async def test_urgent_writes_go_before_queued_bulk_writes(store: Store) -> None:
    order: list[str] = []
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with store.write():
            holding.set()
            await release.wait()

    async def write(name: str, urgent: bool) -> None:
        async with store.write(urgent=urgent) as tx:
            await tx.acquire_lease(name, "owner", ttl=10, now=100)
            order.append(name)

    holder = asyncio.create_task(hold())
    await asyncio.wait_for(holding.wait(), 5)
    lock = store._write_lock  # (private: the only way to see who waits for it)
    bulk = asyncio.create_task(write("bulk", urgent=False))
    await queued(lock, 1)  # the bulk write queues first
    lease = asyncio.create_task(write("lease", urgent=True))
    await queued(lock, 2)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, bulk, lease), 10)
    assert order == ["lease", "bulk"], f"expected the urgent write first, saw {order}"


async def test_sqlite_write_transactions_take_the_write_lock_at_begin(tmp_path) -> None:
    """Another process writing the file (`vendue bbs rotate-keys` beside a serving BBS) waits for a write
    transaction from its start, so the transaction's reads stay current and its first write cannot fail with
    "database is locked"; read transactions hold no write lock."""
    import sqlite3

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'bbs.db'}")
    other = sqlite3.connect(tmp_path / "bbs.db", timeout=0, isolation_level=None)
    try:
        async with store.write() as tx:
            await tx.list_tasks()  # reads only, so far
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                other.execute("BEGIN IMMEDIATE")
        async with store.read() as tx:
            await tx.list_tasks()
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
    finally:
        other.close()
        await store.close()


async def test_postgres_gives_up_a_vanished_replicas_session_within_seconds(database_url: str) -> None:
    """A replica cut off mid-transaction holds the write lock until the server ends its session: the
    server's keepalives and its bound on unacknowledged data end it within seconds (database.py)."""
    if is_sqlite(database_url):
        pytest.skip("SQLite has one writer process and no network")
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            shown = {name: (await connection.exec_driver_sql(f"SHOW {name}")).scalar_one()
                     for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                                  "tcp_user_timeout")}
    finally:
        await engine.dispose()
    assert shown == {"tcp_keepalives_idle": "2", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "3",
                     "tcp_user_timeout": "5000"}, shown
