"""What cells accepted, as the auctioneer reported it (bbs/placements.py keeps the reports until every
instance and task in them was claimed or placed again)."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from . import tables as t
from .transaction import Transaction, in_chunks

# A stored report of what cells accepted: (id, placed_at, {cell_id: {"lrps": ..., "tasks": ...}}).
StoredPlacement = tuple[int, float, dict[str, dict[str, str]]]


def _placement(row: sa.Row) -> StoredPlacement:
    return int(row.id), float(row.placed_at), row.accepted


class PlacementQueries(Transaction):
    async def insert_placement(self, placed_at: float, accepted: dict[str, dict[str, str]]) -> None:
        await self.connection.execute(t.placements.insert().values(placed_at=placed_at, accepted=accepted))

    async def placement_times(self) -> list[tuple[int, float]]:
        """(id, placed_at) of every stored report, without its contents: what a convergence pass reads
        each time."""
        query = sa.select(t.placements.c.id, t.placements.c.placed_at).order_by(t.placements.c.id)
        return [(int(row[0]), float(row[1])) for row in await self._rows(query)]

    async def placements_by_id(self, ids: Iterable[int]) -> list[StoredPlacement]:
        """(id, placed_at, accepted) of these reports."""
        found: list[StoredPlacement] = []
        for where in in_chunks(t.placements.c.id, ids):
            found.extend(await self._records(sa.select(t.placements).where(where), _placement))
        return found

    async def delete_placements(self, ids: Iterable[int]) -> None:
        for where in in_chunks(t.placements.c.id, ids):
            await self.connection.execute(t.placements.delete().where(where))
