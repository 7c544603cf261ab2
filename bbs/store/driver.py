"""Core statements run straight through the database driver, for the hot bulk paths.

SQLAlchemy's executemany processes every parameter set in Python (`construct_params`, bind
processors, result processors): at 10,000 rows that costs seconds, where the database itself needs
about a tenth of a second. A `DriverStatement` is a Core statement compiled once for the connection's
dialect, then run with plain positional tuples through `exec_driver_sql`; the few columns whose type
needs converting (JSON) are converted by their own type's bind/result processor. The SQL text still
comes from SQLAlchemy's compiler, so no dialect leaks out of the store: the same code runs on SQLite
(qmark) and on PostgreSQL via asyncpg (numeric_dollar).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any]


class DriverStatement:
    """`statement` compiled for `dialect`. Each bind parameter is named after the column of `table`
    whose type it carries: `<col>`, `k_<col>` (a key in a WHERE clause) or `<col>__<n>` (the n-th of
    several)."""

    def __init__(
        self,
        statement: sa.ClauseElement,
        table: sa.Table,
        dialect: Dialect,
        order: Sequence[str] | None = None,
    ) -> None:
        """`order`: the bind names in the order the caller's tuples hold them; checked against the
        compiled statement once, so a compiler that ordered them otherwise fails loudly here instead of
        writing values into the wrong columns."""
        compiled = statement.compile(dialect=dialect)
        # Every supported dialect binds positionally (a DML statement compiles to an SQLCompiler).
        if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
            raise ValueError(f"{dialect.name}: a positional paramstyle is needed, not {dialect.paramstyle}")
        self.sql = str(compiled)
        self.names: list[str] = list(compiled.positiontup)
        if order is not None and list(order) != self.names:
            raise ValueError(f"{dialect.name} binds {self.names}, the caller's rows hold {list(order)}")
        self.processors: list[tuple[int, Processor]] = []
        for position, name in enumerate(self.names):
            column = table.c[_column_name(name)]
            process = column.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                self.processors.append((position, _encode_empty_list_fast(column, process)))

    def rows(self, params: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """Positional tuples (values in `self.names` order) with the column types' conversions applied."""
        if not self.processors:
            return [tuple(p) for p in params]
        out = []
        for values in params:
            row = list(values)
            for position, process in self.processors:
                row[position] = process(row[position])
            out.append(tuple(row))
        return out

    async def execute(self, connection: AsyncConnection, params: Sequence[Any]) -> sa.CursorResult[Any]:
        """One execution with one tuple of values (in `self.names` order)."""
        return await connection.exec_driver_sql(self.sql, self.rows([params])[0])

    async def executemany(self, connection: AsyncConnection, params: Sequence[Sequence[Any]]) -> None:
        if params:
            await connection.exec_driver_sql(self.sql, self.rows(params))


def _column_name(bind_name: str) -> str:
    name = bind_name[2:] if bind_name.startswith("k_") else bind_name
    return name.split("__", 1)[0]


def result_processors(
    table: sa.Table, dialect: Dialect, description: Sequence[Sequence[Any]]
) -> list[tuple[int, Processor]]:
    """(position, processor) for the columns of `SELECT table.*` whose raw driver value needs
    converting (SQLite hands JSON over as text; asyncpg decodes it itself). `description` is the
    cursor's: its type codes tell the dialect what the driver returned."""
    out = []
    for position, (column, described) in enumerate(zip(table.columns, description, strict=True)):
        process = column.type.dialect_impl(dialect).result_processor(dialect, described[1])
        if process is not None:
            out.append((position, _decode_empty_list_fast(column, process)))
    return out


# JSON columns hold an empty list far more often than anything else (an unclaimed instance has no
# ports): skip the JSON codec for it. Decoding makes a fresh [] per row, never shared between records.


def _encode_empty_list_fast(column: sa.Column[Any], process: Processor) -> Processor:
    if not isinstance(column.type, sa.JSON):
        return process
    return lambda value: "[]" if value == [] else process(value)


def _decode_empty_list_fast(column: sa.Column[Any], process: Processor) -> Processor:
    if not isinstance(column.type, sa.JSON):
        return process
    return lambda value: [] if value == "[]" else process(value)


class StatementCache:
    """DriverStatements built once per (dialect, key)."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, Any], DriverStatement] = {}

    def get(
        self,
        dialect: Dialect,
        key: Any,
        build: Callable[[], sa.ClauseElement],
        table: sa.Table,
        order: Sequence[str] | None = None,
    ) -> DriverStatement:
        cache_key = (dialect.name, key)
        statement = self._built.get(cache_key)
        if statement is None:
            statement = self._built[cache_key] = DriverStatement(build(), table, dialect, order)
        return statement
