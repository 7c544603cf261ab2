"""Domains (Diego's): a name and until when it is fresh."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from . import tables as t
from .transaction import Transaction


class DomainQueries(Transaction):
    async def upsert_domain(self, name: str, expires_at: float | None) -> None:
        """Insert or refresh the domain `name` (`expires_at` None: fresh for ever)."""
        updated = await self.connection.execute(
            t.domains.update().where(t.domains.c.name == name).values(expires_at=expires_at))
        if updated.rowcount:
            return
        try:
            async with self.connection.begin_nested():
                await self.connection.execute(t.domains.insert().values(name=name, expires_at=expires_at))
        except IntegrityError:  # another replica inserted it meanwhile: refresh that row
            await self.connection.execute(
                t.domains.update().where(t.domains.c.name == name).values(expires_at=expires_at))

    async def list_domains(self) -> dict[str, float | None]:
        """Every domain ever upserted, fresh or not, and until when it is fresh."""
        rows = await self.connection.execute(sa.select(t.domains.c.name, t.domains.c.expires_at))
        return {row.name: row.expires_at for row in rows}
