"""The in-memory copy of actual LRPs: it answers exactly what the database would, it is used only while
no other replica wrote, and a transaction that fails leaves it to be reloaded."""

from __future__ import annotations

import dataclasses
import random

import pytest

from bbs.actual_set import ActualChanges
from bbs.records import CLAIMED, RUNNING, SUSPECT, ActualRecord, changed, unclaimed
from bbs.store import Store
from bbs.store.actual_cache import ActualCache


def test_counts_follow_puts_and_removes() -> None:
    cache = ActualCache()
    rows = [unclaimed("web", i, "d", 1.0) for i in range(3)]
    cache.load(5, rows)
    cache.put([changed(rows[0], state=RUNNING)])
    cache.remove([rows[1].key])
    assert sorted(cache.counts()) == [("RUNNING", "ORDINARY", 1), ("UNCLAIMED", "ORDINARY", 1)]
    assert sorted(cache.counts("web")) == sorted(cache.counts()) and cache.counts("other") == []
    assert [r.index for r in cache.for_keys([("web", 0), ("web", 1), ("nope", 0)])] == [0]
    cache.remove_guid("web")
    assert len(cache) == 0 and cache.counts() == []


def test_keys_find_every_presence_once_an_instance_has_two() -> None:
    cache = ActualCache()
    rows = [unclaimed("web", i, "d", 1.0) for i in range(2)]
    cache.load(1, rows)
    assert cache.for_keys([("web", 1), ("web", 0), ("web", 9)]) == [rows[1], rows[0]]
    suspect = dataclasses.replace(rows[0], presence=SUSPECT)
    cache.put([suspect])
    assert cache.for_keys([("web", 0), ("web", 1)]) == [rows[0], suspect, rows[1]]
    cache.remove([suspect.key])
    assert cache.for_keys([("web", 0)]) == [rows[0]]


def test_a_read_older_than_the_copy_does_not_replace_it() -> None:
    cache = ActualCache()
    cache.load(7, [unclaimed("web", 0, "d", 1.0)])
    cache.load(6, [])
    assert cache.generation == 7 and len(cache) == 1
    cache.load(8, [])
    assert cache.generation == 8 and len(cache) == 0


@pytest.fixture
async def stores(database_url: str):
    """Two BBS replicas' stores on one database."""
    first = await Store.open(database_url)
    second = await Store.open(database_url)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


def _sorted(rows: list[ActualRecord]) -> list[ActualRecord]:
    return sorted(rows, key=lambda r: r.key)


async def _stored(store: Store) -> list[ActualRecord]:
    async with store.read() as tx:
        return _sorted(await tx.list_actuals())  # SQL: list_actuals with no filter never uses the copy


async def _random_round(store: Store, rng: random.Random, round_no: int) -> None:
    """Claim, run, crash-like resets, deletes, inserts and suspect copies on random keys, in one write."""
    async with store.write() as tx:
        keys = [(f"app-{rng.randrange(5)}", rng.randrange(8)) for _ in range(6)]
        rows = {r.key: r for r in await tx.actuals_for_keys(keys)}
        changes = ActualChanges()
        for key in {(pg, i) for pg, i in keys}:
            ordinary = rows.get((*key, "ORDINARY"))
            roll = rng.random()
            if ordinary is None:
                changes.inserts.append(unclaimed(*key, "d", float(round_no)))
            elif roll < 0.4:
                new = changed(ordinary, state=rng.choice([CLAIMED, RUNNING]), cell_id=f"cell-{round_no % 3}")
                changes.updates.append(new)
                changes.previous[new.key] = ordinary
            elif roll < 0.6:
                changes.deletes.append(ordinary)
            elif roll < 0.8 and (*key, SUSPECT) not in rows:
                changes.inserts.append(dataclasses.replace(ordinary, presence=SUSPECT))
        await tx.apply_actual_changes(changes)


async def test_the_copy_answers_what_the_database_holds_while_two_replicas_write(
    stores: tuple[Store, Store],
) -> None:
    first, second = stores
    rng = random.Random(7)
    async with first.write() as tx:
        await tx.apply_actual_changes(
            ActualChanges(inserts=[unclaimed("app-0", i, "d", 0.0) for i in range(4)])
        )
    async with first.read() as tx:
        assert len(await tx.all_actuals()) == 4  # loads the copy
    assert first.actual_cache.generation == 1

    for round_no in range(40):
        writer = first if rng.random() < 0.7 else second
        await _random_round(writer, rng, round_no)
        stored = await _stored(first)
        async with first.read() as tx:
            seen = _sorted(await tx.all_actuals())
            counted = sorted(await tx.count_actuals())
            of_app = await tx.list_actuals(process_guid="app-1")
        assert seen == stored, f"round {round_no}: the copy differs from the database"
        expected_counts: dict[tuple[str, str], int] = {}
        for r in stored:
            expected_counts[(r.state, r.presence)] = expected_counts.get((r.state, r.presence), 0) + 1
        assert counted == sorted((s, p, n) for (s, p), n in expected_counts.items())
        assert of_app == [r for r in stored if r.process_guid == "app-1"]
    assert first.actual_cache.generation is not None


async def _one_row_loaded(store: Store) -> ActualRecord:
    """Insert one UNCLAIMED instance and load the copy (as a convergence pass would)."""
    row = unclaimed("web", 0, "d", 0.0)
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(inserts=[row]))
    async with store.read() as tx:
        await tx.all_actuals()
    return row


async def test_a_write_by_another_replica_makes_reads_go_to_the_database(stores: tuple[Store, Store]) -> None:
    first, second = stores
    row = await _one_row_loaded(first)
    running = changed(row, state=RUNNING, cell_id="c1")
    async with second.write() as tx:
        await tx.apply_actual_changes(ActualChanges(updates=[running], previous={row.key: row}))
    # first's copy still says UNCLAIMED, but the stored generation moved on: it reads the database.
    assert first.actual_cache.for_keys([("web", 0)])[0].state == "UNCLAIMED"
    async with first.write() as tx:
        assert [r.state for r in await tx.actuals_for_keys([("web", 0)])] == [RUNNING]
    async with first.read() as tx:
        assert [r.state for r in await tx.all_actuals()] == [RUNNING]  # and reloads the copy
    assert first.actual_cache.for_keys([("web", 0)])[0].state == RUNNING


async def test_a_failed_write_leaves_the_copy_to_be_reloaded(stores: tuple[Store, Store]) -> None:
    first, _ = stores
    row = await _one_row_loaded(first)
    with pytest.raises(RuntimeError, match="boom"):
        async with first.write() as tx:
            await tx.apply_actual_changes(ActualChanges(deletes=[row]))
            raise RuntimeError("boom")
    assert first.actual_cache.generation is None
    async with first.read() as tx:
        assert await tx.all_actuals() == [row]  # rolled back, read again


async def test_a_transaction_reads_its_own_writes(stores: tuple[Store, Store]) -> None:
    store, _ = stores
    row = await _one_row_loaded(store)
    async with store.write() as tx:
        await tx.apply_actual_changes(ActualChanges(deletes=[row]))
        assert await tx.actuals_for_keys([("web", 0)]) == []
        assert await tx.actuals_of(["web"]) == []
    assert len(store.actual_cache) == 0 and store.actual_cache.generation == 2


async def test_writes_committed_while_a_full_read_runs_reach_the_copy(database_url: str) -> None:
    """A convergence pass's read is behind when it arrives if this process committed meanwhile: the
    journal brings the copy up to date, so the next transaction uses it."""
    store = await Store.open(database_url)
    try:
        first = unclaimed("web", 0, "d", 0.0)
        async with store.write() as tx:
            await tx.apply_actual_changes(ActualChanges(inserts=[first]))
        store.actual_cache.wanted = True  # as after an earlier pass
        async with store.read() as tx:
            generation = await tx._actual_generation()  # the snapshot is taken here
            async with store.write() as writer:  # commits while the read runs
                await writer.apply_actual_changes(ActualChanges(inserts=[unclaimed("web", 1, "d", 0.0)]))
            snapshot = await tx.all_actuals()
        assert generation == 1 and [r.index for r in snapshot] == [0]
        assert store.actual_cache.generation == 2
        assert sorted(r.index for r in store.actual_cache.all()) == [0, 1]
        async with store.write() as tx:
            assert tx._cache is store.actual_cache and await tx._cached() is store.actual_cache
    finally:
        await store.close()


def test_a_gap_in_the_journal_leaves_the_copy_at_the_last_generation_it_can_vouch_for() -> None:
    cache = ActualCache()
    cache.wanted = True
    a, b, c = (unclaimed("web", i, "d", 0.0) for i in range(3))
    cache.committed(3, [("put", [a])])  # 3 -> 4, before the snapshot: skipped at load
    cache.committed(4, [("put", [b])])  # 4 -> 5
    cache.committed(6, [("put", [c])])  # 5 -> 6 was another replica's: gap
    cache.load(4, [a])
    assert cache.generation == 5 and sorted(r.index for r in cache.all()) == [0, 1]
