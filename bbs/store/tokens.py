"""Bearer tokens: kept by the SHA-256 of their secret, listed, revoked (bbs/operations/tokens.py decides what
they allow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import sqlalchemy as sa

from ..records import TokenRecord
from . import tables as t
from .transaction import Transaction


def _token(row: sa.Row) -> TokenRecord:
    return TokenRecord(
        row.id, row.name, row.role, row.secret_sha256, row.created_at, row.expires_at, row.revoked_at,
        row.purpose,
    )


class TokenQueries(Transaction):
    async def _read_tokens(self, *where: sa.ColumnElement[bool], ordered: bool = False) -> list[TokenRecord]:
        """The one way token rows are read: those matching `where`, by creation time then id when
        `ordered`."""
        query = sa.select(t.tokens).where(*where)
        if ordered:
            query = query.order_by(t.tokens.c.created_at, self._text_order(t.tokens.c.id))
        return await self._records(query, _token)

    async def insert_token(self, record: TokenRecord) -> None:
        await self.connection.execute(t.tokens.insert().values(dataclasses.asdict(record)))

    async def list_tokens(self) -> list[TokenRecord]:
        return await self._read_tokens(ordered=True)

    async def token_by_hash(self, secret_sha256: str) -> TokenRecord | None:
        """The token whose secret hashes to this (valid or not: the caller decides)."""
        found = await self._read_tokens(t.tokens.c.secret_sha256 == secret_sha256)
        return found[0] if found else None

    async def consume_token(self, token_id: str, now: float) -> bool:
        """Revoke it now if no one has yet: True for the one caller that did (a login token is good once,
        however many replicas are asked at the same moment)."""
        consumed = await self.connection.execute(
            t.tokens.update().where(t.tokens.c.id == token_id, t.tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        return consumed.rowcount == 1

    async def prune_tokens(self, purposes: Iterable[str], now: float) -> int:
        """Delete the tokens of these purposes that can never be used again (expired or revoked); how many."""
        pruned = await self.connection.execute(
            t.tokens.delete().where(
                t.tokens.c.purpose.in_(list(purposes)),
                sa.or_(t.tokens.c.revoked_at.is_not(None), t.tokens.c.expires_at <= now),
            )
        )
        return pruned.rowcount

    async def revoke_token(self, token_id: str, now: float) -> bool:
        """Revoke it from `now` on (a token revoked before keeps its first revocation time); False when
        there is no such token."""
        found = await self._read_tokens(t.tokens.c.id == token_id)
        if not found:
            return False
        if found[0].revoked_at is None:
            await self.connection.execute(
                t.tokens.update().where(t.tokens.c.id == token_id).values(revoked_at=now)
            )
        return True
