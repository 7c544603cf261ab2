"""Cells: the presence each rep's heartbeat replaces, and the operator's flags (cordoned, draining) that no
heartbeat writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from ..records import CellRecord, StoredPresence
from . import tables as t
from .transaction import Transaction, in_chunks, keyed_update

_UPDATE_CELL = keyed_update(t.cells, ["cell_id"])


# The presence column as its stored JSON text: decoded through `_decoded`, not by the column type.
_CELL_COLUMNS = [
    sa.type_coerce(c, sa.Text).label(c.name) if c.name == "presence" else c for c in t.cells.columns
]
# Stored presence text -> its decoded JSON. The auctioneer lists every cell each auction (1,000 presences
# at Diego's scale), while a cell's presence changes only at its heartbeats: most texts were decoded
# before. The decoded values are shared between records, which never change them (CellRecord.to_wire
# copies). Cleared when it grows past DECODED_MAX (heartbeats carry new texts).
_decoded: dict[str, StoredPresence] = {}
DECODED_MAX = 20_000


def _presence(text: str | StoredPresence) -> StoredPresence:
    if isinstance(text, dict):  # a driver that decodes JSON itself
        return text
    found = _decoded.get(text)
    if found is None:
        if len(_decoded) >= DECODED_MAX:
            _decoded.clear()
        found = _decoded[text] = json.loads(text)
    return found


def _cell(row: sa.Row) -> CellRecord:
    return CellRecord(
        cell_id=row.cell_id, presence=_presence(row.presence), expires_at=row.expires_at,
        disappeared=row.disappeared, cordoned=row.cordoned, draining=row.draining,
    )


def _cell_params(record: CellRecord) -> dict[str, Any]:
    """What a heartbeat writes: never the operator's flags (cordoned, draining), which set_cell_flags does."""
    return {
        "cell_id": record.cell_id,
        "presence": record.presence,
        "expires_at": record.expires_at,
        "disappeared": record.disappeared,
    }


class CellQueries(Transaction):
    async def _read_cells(self, *where: sa.ColumnElement[bool], ordered: bool = False) -> list[CellRecord]:
        """The one way cell rows are read: those matching `where`, by cell id when `ordered`."""
        query = sa.select(*_CELL_COLUMNS).where(*where)
        if ordered:
            query = query.order_by(self._text_order(t.cells.c.cell_id))
        return await self._records(query, _cell)

    async def get_cell(self, cell_id: str) -> CellRecord | None:
        found = await self._read_cells(t.cells.c.cell_id == cell_id)
        return found[0] if found else None

    async def cells_by_id(self, cell_ids: Iterable[str]) -> dict[str, CellRecord]:
        found: dict[str, CellRecord] = {}
        for where in in_chunks(t.cells.c.cell_id, cell_ids):
            found.update((record.cell_id, record) for record in await self._read_cells(where))
        return found

    async def list_cells(self, present_at: float | None = None) -> list[CellRecord]:
        where = [] if present_at is None else [t.cells.c.expires_at >= present_at]
        return await self._read_cells(*where, ordered=True)

    async def put_cells(self, updates: Sequence[CellRecord], inserts: Sequence[CellRecord]) -> None:
        """Write cell presences: `updates` replace existing rows, `inserts` are new cells."""
        await self._executemany(_UPDATE_CELL, [{"k_cell_id": r.cell_id, **_cell_params(r)} for r in updates])
        await self._executemany(t.cells.insert(), [_cell_params(r) for r in inserts])

    async def set_cell_flags(self, cell_id: str, *, cordoned: bool, draining: bool) -> None:
        """The operator's flags of one cell (vendue cells cordon|uncordon|drain)."""
        await self.connection.execute(
            t.cells.update().where(t.cells.c.cell_id == cell_id).values(cordoned=cordoned, draining=draining)
        )

    async def mark_cells_disappeared(self, cell_ids: Iterable[str]) -> None:
        for where in in_chunks(t.cells.c.cell_id, cell_ids):
            await self.connection.execute(t.cells.update().where(where).values(disappeared=True))

    async def delete_cells(self, cell_ids: Iterable[str]) -> None:
        for where in in_chunks(t.cells.c.cell_id, cell_ids):
            await self.connection.execute(t.cells.delete().where(where))

    async def next_cell_expiry(self) -> float | None:
        """The earliest expiry among cells not yet announced as gone: when convergence should look."""
        query = sa.select(sa.func.min(t.cells.c.expires_at)).where(t.cells.c.disappeared.is_(False))
        return (await self.connection.execute(query)).scalar()
