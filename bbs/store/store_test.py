"""The store on a real SQLite file and a real PostgreSQL database: migrations, refusing a schema newer than
this code, JSON columns, and how write transactions are serialised."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import sqlalchemy as sa

from bbs.actual_set import ActualChanges
from bbs.records import unclaimed
from bbs.store import Store, tables
from bbs.store.database import SchemaTooNew, create_engine, is_sqlite, json_dumps, migrate, schema_revision
from tests.support.priority_lock import queued


async def test_migrates_an_empty_database_to_head(store: Store, database_url: str) -> None:
    current, head = await schema_revision(store.engine)
    assert current == head == "0013"
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
        "database schema 9999_from_the_future is newer than this BBS (knows up to 0013): upgrade the BBS"
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
        assert {(await schema_revision(s.engine))[0] for s in opened} == {"0013"}
    finally:
        await asyncio.gather(*(s.close() for s in opened))


async def test_upgrade_from_the_first_schema_keeps_rows_and_lifts_string_limits(database_url: str) -> None:
    engine = create_engine(database_url)
    store = Store(engine)
    try:
        await migrate(engine, "0001")
        before = unclaimed("web", 0, "d", 1.0)
        row = {
            ("idx" if name == "index" else name): value for name, value in dataclasses.asdict(before).items()
            if name != "version"  # 0012's
        }
        async with engine.begin() as connection:  # the store of this code needs 0004's generations table
            await connection.execute(tables.actual_lrps.insert().values(row))
        desired = {"process_guid": "old", "domain": "d", "instances": 1, "definition": {"command": ["x"]},
                   "created_at": 1.0, "mod_epoch": "e", "mod_index": 0}
        async with engine.begin() as connection:
            await connection.execute(tables.desired_lrps.insert().values(desired))
        await migrate(engine)
        assert (await schema_revision(engine))[0] == "0013"
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
