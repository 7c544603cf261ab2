"""Leases in the store, on SQLite and PostgreSQL: one owner at a time, expiry by the database's clock,
where the holder answers."""

from __future__ import annotations

import pytest

from bbs.store import Store
from tests.support.polling import eventually


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

    async def taken_by_b() -> int | None:
        async with store.write() as tx:
            return await tx.acquire_lease("convergence", "b", ttl=30)

    taken = await eventually(taken_by_b, 5.0, "the 0.05 s lease to expire by the database clock")
    assert taken == 2


async def test_lease_records_where_its_holder_answers(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.lease("auctioneer") is None
        assert await tx.acquire_lease("auctioneer", "a", ttl=10, now=100, url="http://a:1") == 1
        assert await tx.acquire_lease("auctioneer", "b", ttl=10, now=111, url="http://b:2") == 2
        lease = await tx.lease("auctioneer")
    assert lease is not None
    assert (lease.owner, lease.token, lease.expires_at, lease.url) == ("b", 2, 121, "http://b:2")


async def test_a_holder_restarted_at_the_same_url_takes_its_lease_at_once(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.acquire_lease("auctioneer", "h:1:x", ttl=10, now=100, url="https://h:9") == 1
        assert await tx.acquire_lease("auctioneer", "h:2:y", ttl=10, now=101, url="https://h:8") is None
        assert await tx.acquire_lease("auctioneer", "g:2:y", ttl=10, now=101, url="https://h:9") is None
        assert await tx.acquire_lease("auctioneer", "h:2:y", ttl=10, now=101, url="https://h:9") == 2
