"""What every entity's queries stand on: one transaction's connection, and the few ways rows are read and
written in bulk. Each entity module (desired.py, actuals.py, tasks.py, cells.py, leases.py, ...) adds its
queries to `Transaction` as a mixin; store.Tx is all of them on one connection, the way Diego's sqldb is
one SQLDB with a file per entity.

Every entity reads its records one way: its own select over its table through `Transaction._records`
(actual LRPs, the hot ones, through the driver; actuals.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..encryption import KeyRing

CHUNK = 400  # rows per IN (...) list: well under every database's bound-parameter limit
PARTITION = 1000  # rows converted between two yields to the event loop
T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def in_chunks(column: sa.ColumnElement[Any], values: Iterable[Any]) -> Iterator[sa.ColumnElement[bool]]:
    """`column IN (...)` over the distinct `values`, CHUNK of them per condition (one statement each)."""
    for chunk in chunks(sorted(set(values))):
        yield column.in_(list(chunk))


def keyed_update(table: sa.Table, key_columns: Sequence[str]) -> sa.Update:
    """UPDATE table SET ... WHERE <key> = :k_<key>, for executemany with one dict per row (the SET
    clause comes from the other keys of those dicts)."""
    return table.update().where(*[table.c[name] == sa.bindparam(f"k_{name}") for name in key_columns])


class Transaction:
    """One transaction's connection, and whether it may write. `keys`: the key ring sealing command and env
    (None: they are stored in the clear)."""

    def __init__(
        self, connection: AsyncConnection, *, keys: KeyRing | None = None, writing: bool = False
    ) -> None:
        self.connection = connection
        self._keys = keys
        self._writing = writing

    def _text_order(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """Strings sort by code point on both databases: SQLite compares bytes, while PostgreSQL
        would follow the database's locale (en_US puts "app-2" between "app1" and "app3")."""
        return sa.collate(column, "C") if self.connection.dialect.name == "postgresql" else column

    async def _rows(self, query: sa.Select[Any]) -> list[sa.Row]:
        """Rows of a projection or an aggregate (records are read with `_records`)."""
        return list((await self.connection.execute(query)).all())

    async def _records(self, query: sa.Select[Any], convert: Callable[[sa.Row], T]) -> list[T]:
        """The rows of `query` as records, converted partition by partition; other requests get the event
        loop between partitions (a 10,000-row read must not stall heartbeats)."""
        rows = (await self.connection.execute(query)).all()
        found: list[T] = []
        for start in range(0, len(rows), PARTITION):
            if start:
                await asyncio.sleep(0)
            found.extend(map(convert, rows[start : start + PARTITION]))
        return found

    async def _executemany(self, statement: sa.Executable, params: list[dict[str, Any]]) -> None:
        if params:
            await self.connection.execute(statement, params)
