"""Bearer tokens in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

from bbs.records import TokenRecord
from bbs.store import Store


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
