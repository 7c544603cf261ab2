"""Encryption at rest on a real SQLite file and a real PostgreSQL database: command and env never stored in
the clear, records sealed with an older key still readable, a sealed value moved to another row refused,
resealing (rotate-keys) resumable and idempotent, and a store opened without the key refused."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bbs.encryption import KeyRing, KeyRingError, UndecryptableValue, parse_key_ring
from bbs.records import DesiredRecord, TaskRecord
from bbs.store import Store, tables
from bbs.store.database import is_sqlite
from bbs.store.rotation import rotate_keys
from bbs.store.versions import VersionRecord

SECRET = "hunter2-db-password"
COMMAND = ["./server", "--admin-password=s3cr3t-flag"]
KEYS = {label: base64.b64encode(label.encode() * 16).decode() for label in ("k1", "k2")}


def ring(active: str, *labels: str) -> KeyRing:
    keys = {label: KEYS[label] for label in labels or (active,)}
    return parse_key_ring(json.dumps({"active": active, "keys": keys}), "encryption_keys")


def desired(guid: str, secret: str = SECRET) -> DesiredRecord:
    definition = {"process_guid": guid, "instances": 2, "memory_mb": 128, "command": COMMAND,
                  "env": {"DATABASE_PASSWORD": secret}, "ports": [8080]}
    return DesiredRecord(guid, "d", 2, definition, 1.0, "epoch")


def task(guid: str, secret: str = SECRET) -> TaskRecord:
    definition = {"task_guid": guid, "command": COMMAND, "env": {"DATABASE_PASSWORD": secret},
                  "completion_callback_url": "http://127.0.0.1:9/done"}
    return TaskRecord(guid, "d", definition, created_at=1.0, updated_at=1.0)


async def write(store: Store, lrps: list[DesiredRecord], tasks: list[TaskRecord]) -> None:
    async with store.write() as tx:
        assert await tx.insert_desireds(lrps)
        for record in tasks:
            assert await tx.insert_task(record)


async def raw_rows(store: Store, table: sa.Table) -> list[dict[str, object]]:
    """The rows as the database holds them (no opening), every value as text."""
    async with store.engine.connect() as connection:
        rows = (await connection.execute(sa.select(*(sa.cast(c, sa.Text) for c in table.columns)))).all()
    return [dict(zip(table.columns.keys(), row, strict=True)) for row in rows]


async def read_all(store: Store) -> tuple[list[DesiredRecord], list[TaskRecord]]:
    async with store.read() as tx:
        return await tx.list_desired(), await tx.list_tasks()


@pytest.fixture
async def opened(database_url: str):
    stores: list[Store] = []

    async def open_store(keys: KeyRing | None) -> Store:
        store = await Store.open(database_url, keys=keys)
        stores.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in stores:
            await store.close()


async def test_rows_hold_no_command_or_env_value_in_the_clear(opened, database_url: str) -> None:
    store = await opened(ring("k1"))
    lrps, tasks = [desired("web"), desired("api")], [task("t1")]
    await write(store, lrps, tasks)
    for table in (tables.desired_lrps, tables.tasks):
        for row in await raw_rows(store, table):
            text = json.dumps(row)
            assert SECRET not in text and "s3cr3t-flag" not in text and "./server" not in text, row
            assert row["key_label"] == "k1" and row["sealed"]
    assert await read_all(store) == (sorted(lrps, key=lambda r: r.process_guid), tasks)
    if is_sqlite(database_url):  # the file itself, write-ahead log included
        await store.close()
        path = Path(make_url(database_url).database or "")
        for file in path.parent.glob(f"{path.name}*"):
            assert SECRET.encode() not in file.read_bytes(), file


async def test_records_sealed_with_an_older_key_stay_readable_after_a_new_one_becomes_active(opened) -> None:
    first = await opened(ring("k1"))
    await write(first, [desired("old")], [task("t-old")])
    await first.close()
    second = await opened(ring("k2", "k1", "k2"))
    await write(second, [desired("new")], [task("t-new")])
    lrps, tasks = await read_all(second)
    assert lrps == [desired("new"), desired("old")] and tasks == [task("t-new"), task("t-old")]
    labels = {row["process_guid"]: row["key_label"] for row in await raw_rows(second, tables.desired_lrps)}
    assert labels == {"old": "k1", "new": "k2"}


async def test_a_sealed_value_moved_to_another_row_does_not_open(opened) -> None:
    store = await opened(ring("k1"))
    await write(store, [desired("web"), desired("api", secret="other")], [task("t1")])
    c = tables.desired_lrps.c
    async with store.engine.begin() as connection:
        web = (await connection.execute(sa.select(c.sealed).where(c.process_guid == "web"))).scalar_one()
        await connection.execute(
            tables.desired_lrps.update().where(c.process_guid == "api").values(sealed=web)
        )
        # A task of the same guid as a desired LRP does not take its sealed part either.
        await connection.execute(tables.tasks.update().values(sealed=web))
    async with store.read() as tx:
        assert (await tx.get_desired("web")).definition["env"] == {"DATABASE_PASSWORD": SECRET}
        with pytest.raises(UndecryptableValue, match="desired_lrps/api/sealed"):
            await tx.get_desired("api")
        with pytest.raises(UndecryptableValue, match="tasks/t1/sealed"):
            await tx.get_task("t1")


async def test_updates_never_seal_an_unchanged_command_and_env_again(opened) -> None:
    store = await opened(ring("k1"))
    await write(store, [desired("web")], [task("t1")])
    before = {row["process_guid"]: row for row in await raw_rows(store, tables.desired_lrps)}
    tasks_before = await raw_rows(store, tables.tasks)
    async with store.write() as tx:
        record = await tx.get_desired("web")
        record.instances, record.mod_index = 5, 1
        record.definition = {**record.definition, "instances": 5}
        await tx.update_desired(record)
        await tx.update_tasks([dataclasses.replace(await tx.get_task("t1"), state="RUNNING", cell_id="c1")])
    after = {row["process_guid"]: row for row in await raw_rows(store, tables.desired_lrps)}
    assert after["web"]["sealed"] == before["web"]["sealed"] and after["web"]["instances"] == "5"
    [task_after] = await raw_rows(store, tables.tasks)
    assert task_after["sealed"] == tasks_before[0]["sealed"] and task_after["state"] == "RUNNING"
    async with store.read() as tx:
        assert (await tx.get_desired("web")).definition == {**desired("web").definition, "instances": 5}
        assert (await tx.get_task("t1")).definition == task("t1").definition


async def test_rows_in_the_clear_stay_readable_and_rotation_seals_them_in_batches(opened) -> None:
    plain = await opened(None)
    lrps = [desired(f"app-{n:02}", secret=f"pw-{n}") for n in range(23)]
    tasks = [task(f"t-{n:02}", secret=f"tpw-{n}") for n in range(9)]
    await write(plain, lrps[:15], tasks[:5])
    await plain.close()
    first = await opened(ring("k1"))
    await write(first, lrps[15:], tasks[5:])
    await first.close()
    store = await opened(ring("k2", "k1", "k2"))
    async with store.write() as tx:  # a plain row updated by a BBS with a ring gets sealed whole
        record = await tx.get_desired("app-00")
        record.mod_index = 1
        await tx.update_desired(record)
    lrps[0].mod_index = 1

    batches: list[tuple[str, int]] = []
    done = await rotate_keys(store, batch=4, on_batch=lambda table, rows: batches.append((table, rows)))
    assert done.resealed == {"desired_lrps": 22, "tasks": 9, "lrp_versions": 0}  # app-00: by its update
    assert batches == [("desired_lrps", 4)] * 5 + [
        ("desired_lrps", 2),
        ("tasks", 4),
        ("tasks", 4),
        ("tasks", 1),
    ]
    assert done.labels == {"desired_lrps": {"k2": 23}, "tasks": {"k2": 9}, "lrp_versions": {}}
    assert await read_all(store) == (lrps, tasks)
    for table in (tables.desired_lrps, tables.tasks):
        for row in await raw_rows(store, table):
            assert row["key_label"] == "k2" and "pw-" not in json.dumps(row), row

    again = await rotate_keys(store, batch=4)
    assert again.resealed == {"desired_lrps": 0, "tasks": 0, "lrp_versions": 0}
    assert again.batches == 0
    # k1 is no longer needed: a ring without it opens the database.
    await store.close()
    assert await read_all(await opened(ring("k2"))) == (lrps, tasks)


async def test_a_store_without_the_key_of_a_sealed_record_is_refused(opened, database_url: str) -> None:
    store = await opened(ring("k1"))
    await write(store, [], [task("t1")])
    await store.close()
    with pytest.raises(KeyRingError) as no_ring:
        await Store.open(database_url)
    assert str(no_ring.value) == (
        'encryption_keys_file: the database holds records encrypted with key "k1"; give the key ring'
    )
    with pytest.raises(KeyRingError) as lacking:
        await Store.open(database_url, keys=ring("k2"))
    assert str(lacking.value) == (
        'encryption_keys: the database holds records encrypted with key "k1", which the key ring (keys k2) '
        'lacks'
    )


async def test_rotation_needs_a_ring(opened) -> None:
    with pytest.raises(KeyRingError, match="rotate-keys needs the key ring"):
        await rotate_keys(await opened(None))


async def test_versions_are_sealed_and_rotated_like_their_desired_lrp(opened) -> None:
    store = await opened(ring("k1"))
    async with store.write() as tx:
        for guid in ("a", "b"):
            for version in (1, 2, 3):
                definition = {"command": ["run", str(version)], "env": {"PW": f"pw-{guid}{version}"}}
                await tx.insert_version(VersionRecord(guid, version, 1.0, definition))  # type: ignore[arg-type]
    for row in await raw_rows(store, tables.lrp_versions):
        assert row["key_label"] == "k1" and "pw-" not in json.dumps(row), row
    await store.close()
    rotated = await opened(ring("k2", "k1", "k2"))
    done = await rotate_keys(rotated, batch=4)
    assert done.resealed["lrp_versions"] == 6 and done.labels["lrp_versions"] == {"k2": 6}
    await rotated.close()
    store = await opened(ring("k2"))  # k1 is no longer needed
    async with store.read() as tx:
        versions = await tx.list_versions("b")
    assert [(v.version, v.definition["env"]) for v in versions] == [
        (3, {"PW": "pw-b3"}), (2, {"PW": "pw-b2"}), (1, {"PW": "pw-b1"})]
