"""Actual LRPs: the hot table (250,000 rows at Diego's scale, 10,000 written per lifecycle round).

Every read of their rows is a driver statement (driver.py) whose raw rows `_actual_reader` turns into
records, or the in-memory copy (actual_cache.py) while the stored generation number says no other replica
wrote since; every write is a bulk driver statement, and its changes reach the copy after the commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..actual_set import ActualChanges
from ..encryption import KeyRing
from ..records import ActualRecord, actual_key, changed
from . import tables as t
from .actual_cache import ActualCache, CacheOp
from .driver import DriverStatement, StatementCache, result_processors
from .priority_lock import PriorityLock
from .transaction import CHUNK, PARTITION, Transaction, chunks

_ACTUAL_FIELDS = [c.name for c in t.actual_lrps.columns if c.name != "idx"]
# Records are built positionally (this runs for every row of a 10,000-instance read): the table's
# columns are in the record's field order, `idx` standing for `index`.
assert [f.name for f in dataclasses.fields(ActualRecord)] == [
    "index" if c.name == "idx" else c.name for c in t.actual_lrps.columns
]


def _index_then_presence(record: ActualRecord) -> tuple[int, str]:
    return record.index, record.presence


def _actual_reader(
    dialect: sa.engine.Dialect, result: sa.CursorResult[Any]
) -> Callable[[Sequence[Any]], ActualRecord]:
    """Raw driver row of `SELECT actual_lrps.*` -> ActualRecord (JSON columns decoded per dialect)."""
    processors = result_processors(t.actual_lrps, dialect, result.cursor.description)

    def convert(row: Sequence[Any]) -> ActualRecord:
        if not processors:
            return ActualRecord(*row)
        values = list(row)
        for position, process in processors:
            values[position] = process(values[position])
        return ActualRecord(*values)

    return convert


_ACTUAL_KEY = ("process_guid", "idx", "presence")
_ACTUAL_VALUES = [name for name in _ACTUAL_FIELDS if name not in _ACTUAL_KEY]
_KEY_BUCKETS = (1, 4, 16, 64, 128, 256, CHUNK)


def _keys_query(size: int) -> sa.Select[Any]:
    """SELECT the actual LRPs of `size` (process_guid, index) keys: OR-ed `process_guid = :p AND
    idx = :i` terms, which every database answers with primary-key lookups (SQLite would scan the
    table for a row-value IN list). Compiled once per bucket size and dialect (STATEMENTS)."""
    c = t.actual_lrps.c
    terms = [
        sa.and_(c.process_guid == sa.bindparam(f"process_guid__{i}"), c.idx == sa.bindparam(f"idx__{i}"))
        for i in range(size)
    ]
    return sa.select(t.actual_lrps).where(sa.or_(*terms))


def _guids_query(size: int) -> sa.Select[Any]:
    """SELECT the actual LRPs of `size` process guids (an IN list of that many parameters)."""
    guids: list[sa.BindParameter[str]] = [sa.bindparam(f"process_guid__{i}") for i in range(size)]
    return sa.select(t.actual_lrps).where(t.actual_lrps.c.process_guid.in_(guids))


def _list_actuals_query(filters: tuple[str, ...], code_point_order: bool) -> sa.Select[Any]:
    """Every actual LRP matching `filters` (column = :column each), ordered by key; strings by code
    point on every database (PostgreSQL would otherwise follow its locale)."""
    c = t.actual_lrps.c

    def text(column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        return sa.collate(column, "C") if code_point_order else column

    query = sa.select(t.actual_lrps).order_by(text(c.process_guid), c.idx, text(c.presence))
    for name in filters:
        query = query.where(c[name] == sa.bindparam(name))
    return query


def _actual_update(columns: tuple[str, ...]) -> sa.Update:
    c = t.actual_lrps.c
    return (
        t.actual_lrps.update()
        .where(*[c[name] == sa.bindparam(f"k_{name}") for name in _ACTUAL_KEY])
        .values({name: sa.bindparam(name) for name in columns})
    )


# The hot bulk statements on actual LRPs (10,000 rows per lifecycle round) run through the driver.
STATEMENTS = StatementCache()
_ACTUAL_INSERT = t.actual_lrps.insert().values({c.name: sa.bindparam(c.name) for c in t.actual_lrps.columns})
_ACTUAL_DELETE = t.actual_lrps.delete().where(
    *[t.actual_lrps.c[name] == sa.bindparam(f"k_{name}") for name in _ACTUAL_KEY]
)
_actual_values = operator.attrgetter(*_ACTUAL_VALUES)  # the key columns are not among them
_actual_row = operator.attrgetter(*["index" if c.name == "idx" else c.name for c in t.actual_lrps.columns])


@functools.cache
def _declared_columns(
    fields: frozenset[str],
) -> tuple[tuple[bool, ...], Callable[[ActualRecord], tuple[Any, ...]]]:
    """For an update of these fields: its flags (one per value column) and what makes a record's row of
    (those columns' values..., key...)."""
    if unknown := fields - set(_ACTUAL_VALUES):
        raise ValueError(f"not value columns of actual_lrps: {sorted(unknown)}")
    flags = tuple(name in fields for name in _ACTUAL_VALUES)
    names = [*itertools.compress(_ACTUAL_VALUES, flags), "process_guid", "index", "presence"]
    return flags, operator.attrgetter(*names)


def _bucket(items: Sequence[Any]) -> tuple[int, list[Any]]:
    """The smallest bucket size that holds `items` (at most CHUNK), and `items` padded to it by repeating
    the last one: a repeated key or guid matches the same rows again."""
    size = next(b for b in _KEY_BUCKETS if b >= len(items))
    return size, [*items, *[items[-1]] * (size - len(items))]


def _keys_statement(dialect: sa.engine.Dialect, size: int) -> DriverStatement:
    order = [name for i in range(size) for name in (f"process_guid__{i}", f"idx__{i}")]
    return STATEMENTS.get(dialect, ("keys", size), functools.partial(_keys_query, size), t.actual_lrps, order)


def _guids_statement(dialect: sa.engine.Dialect, size: int) -> DriverStatement:
    order = [f"process_guid__{i}" for i in range(size)]
    return STATEMENTS.get(
        dialect, ("guids", size), functools.partial(_guids_query, size), t.actual_lrps, order
    )


def compile_hot_statements(dialect: sa.engine.Dialect) -> None:
    """Compile the key and guid lookups of every bucket size now (the 400-key one takes a while), so the
    first big lifecycle round after a start does not pay for it."""
    for size in _KEY_BUCKETS:
        _keys_statement(dialect, size)
        _guids_statement(dialect, size)


_GENERATION = "actual_lrps"
_READ_GENERATION = sa.select(t.generations.c.value).where(t.generations.c.name == _GENERATION)


class ActualQueries(Transaction):
    """Actual LRPs in one transaction, through the in-memory copy `cache` when it is current."""

    def __init__(
        self,
        connection: AsyncConnection,
        cache: ActualCache,
        write_lock: PriorityLock,
        *,
        keys: KeyRing | None = None,
        writing: bool = False,
    ) -> None:
        super().__init__(connection, keys=keys, writing=writing)
        self._cache = cache
        self._write_lock = write_lock  # the store's: a read takes it briefly (all_actuals)
        self._generation: int | None = None  # of actual_lrps, as this transaction sees it; read once
        self._cache_ops: list[CacheOp] = []
        self.wrote_actuals = False

    # --- the in-memory copy of actual LRPs ----------------------------------------------------------

    async def _actual_generation(self) -> int:
        if self._generation is None:
            self._generation = int((await self.connection.execute(_READ_GENERATION)).scalar_one())
        return self._generation

    async def _cached(self) -> ActualCache | None:
        """The in-memory copy when it shows exactly what this transaction would read: it reflects the
        stored generation, and this transaction has not written actual LRPs yet (its own writes
        reach the copy only after the commit)."""
        if self.wrote_actuals:
            return None
        generation = await self._actual_generation()
        return self._cache if self._cache.valid_at(generation) else None

    async def _wrote(self, op: CacheOp) -> None:
        if not self._writing:
            raise RuntimeError("actual LRPs are written in a write transaction")
        await self._actual_generation()
        self.wrote_actuals = True
        self._cache_ops.append(op)

    async def raise_generation(self) -> None:
        """Before commit: a transaction that changed actual LRPs raises their generation by one."""
        if self.wrote_actuals:
            await self.connection.execute(
                t.generations.update()
                .where(t.generations.c.name == _GENERATION)
                .values(value=await self._actual_generation() + 1)
            )

    def commit_to_cache(self) -> None:
        """After commit: the copy takes this transaction's changes (or journals them, when it is out of
        date; see actual_cache)."""
        if self.wrote_actuals and self._generation is not None:
            self._cache.committed(self._generation, self._cache_ops)

    # --- reads ------------------------------------------------------------------------------------

    async def _read_actuals(self, statement: DriverStatement, params: Sequence[Any]) -> list[ActualRecord]:
        """The one way actual LRP rows are read: `statement` (a SELECT actual_lrps.*) run through the driver,
        its rows converted in partitions, so other requests get the event loop in between."""
        result = await statement.execute(self.connection, params)
        convert = _actual_reader(self.connection.dialect, result)
        rows = result.all()
        found: list[ActualRecord] = []
        for start in range(0, len(rows), PARTITION):
            if start:
                await asyncio.sleep(0)
            found.extend(map(convert, rows[start : start + PARTITION]))
        return found

    async def list_actuals(
        self,
        process_guid: str | None = None,
        cell_id: str | None = None,
        state: str | None = None,
        presence: str | None = None,
    ) -> list[ActualRecord]:
        """Actual LRPs matching every given filter, by (process_guid, index, presence) (a convergence pass
        reads all 250,000 at Diego's scale)."""
        given = {"process_guid": process_guid, "cell_id": cell_id, "state": state, "presence": presence}
        filters = tuple(name for name, value in given.items() if value is not None)
        if filters == ("process_guid",) and (cache := await self._cached()) is not None:
            return sorted(cache.of_guids([process_guid]), key=_index_then_presence)  # type: ignore[list-item]
        dialect = self.connection.dialect
        query = STATEMENTS.get(
            dialect,
            ("list-actuals", filters),
            functools.partial(_list_actuals_query, filters, dialect.name == "postgresql"),
            t.actual_lrps,
            filters,
        )
        return await self._read_actuals(query, [given[name] for name in filters])

    async def all_actuals(self) -> list[ActualRecord]:
        """Every actual LRP, in no particular order (a convergence pass): the in-memory copy when it is
        valid; otherwise read, and in a read transaction the copy is loaded with what was read.

        Call it first in a read transaction: its snapshot is then taken while no writer of this process
        is between its commit and the copy taking its changes, so the copy matches the snapshot
        unless another replica wrote."""
        if self._writing:
            raise RuntimeError("all_actuals is for read transactions (it takes the write lock)")
        async with self._write_lock.hold(urgent=True):  # held for one small query
            self._cache.wanted = True
            if (cache := await self._cached()) is not None:
                return cache.all()
            generation = await self._actual_generation()
        rows = await self.list_actuals()
        self._cache.load(generation, rows)
        return rows

    async def actuals_of(self, process_guids: Sequence[str]) -> list[ActualRecord]:
        """Every actual LRP of these processes."""
        if (cache := await self._cached()) is not None:
            return cache.of_guids(set(process_guids))
        found: list[ActualRecord] = []
        for chunk in chunks(sorted(set(process_guids))):
            size, padded = _bucket(chunk)
            found.extend(await self._read_actuals(_guids_statement(self.connection.dialect, size), padded))
        return found

    async def actuals_for_keys(self, keys: Iterable[tuple[str, int]]) -> list[ActualRecord]:
        """Every presence of each (process_guid, index), a few hundred keys per statement."""
        if (cache := await self._cached()) is not None:
            return cache.for_keys(set(keys))
        found: list[ActualRecord] = []
        for chunk in chunks(sorted(set(keys))):
            size, padded = _bucket(chunk)
            params = [value for key in padded for value in key]
            found.extend(await self._read_actuals(_keys_statement(self.connection.dialect, size), params))
        return found

    async def count_actuals(self, process_guid: str | None = None) -> list[tuple[str, str, int]]:
        """(state, presence, count) for every combination present."""
        if (cache := await self._cached()) is not None:
            return cache.counts(process_guid)
        c = t.actual_lrps.c
        query = sa.select(c.state, c.presence, sa.func.count()).group_by(c.state, c.presence)
        if process_guid is not None:
            query = query.where(c.process_guid == process_guid)
        return [(row[0], row[1], int(row[2])) for row in await self._rows(query)]

    # --- writes -----------------------------------------------------------------------------------

    async def apply_actual_changes(self, changes: ActualChanges) -> None:
        """Deletes, then updates, then inserts, each an executemany; the keys end up distinct.

        An update writes only the columns that changed (known from `changes.previous`): rows with
        the same changed columns share one statement (a claim, a start, a crash each touch a few)."""

        if not changes:
            return
        await self._wrote(("delete", [r.key for r in changes.deletes]))
        self._cache_ops.append(("put", [*changes.updates, *changes.inserts]))
        dialect, connection = self.connection.dialect, self.connection
        key_binds = [f"k_{name}" for name in _ACTUAL_KEY]
        delete = STATEMENTS.get(dialect, "actual-delete", lambda: _ACTUAL_DELETE, t.actual_lrps, key_binds)
        # _ACTUAL_KEY order: process_guid, idx, presence = the record's key.
        await delete.executemany(connection, [r.key for r in changes.deletes])
        # Rows are grouped by which value columns changed (a tuple of flags, one per column), compared
        # and picked in C (map, compress): a lifecycle round updates 10,000 rows.
        groups: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
        every_column = (True,) * len(_ACTUAL_VALUES)
        previous, declared = changes.previous, changes.declared
        for record in changes.updates:
            key = actual_key(record)
            fields = declared.get(key)
            if fields is not None:
                # The decision said which fields it set: those are written, without comparing every
                # column with the row as it was (which, read from the in-memory copy, is cold in cache).
                flags, row_of = _declared_columns(fields)
                groups.setdefault(flags, []).append(row_of(record))
                continue
            values = _actual_values(record)
            before = previous.get(key)
            changed = (
                every_column if before is None else tuple(map(operator.ne, values, _actual_values(before)))
            )
            if True in changed:
                groups.setdefault(changed, []).append((*itertools.compress(values, changed), *key))
        for changed, rows in groups.items():
            columns = tuple(itertools.compress(_ACTUAL_VALUES, changed))
            update = STATEMENTS.get(
                dialect,
                ("actual-update", columns),
                functools.partial(_actual_update, columns),
                t.actual_lrps,
                [*columns, *key_binds],  # SET <columns in order> WHERE <key columns in order>: the tuples'
            )
            await update.executemany(connection, rows)
        insert = STATEMENTS.get(
            dialect,
            "actual-insert",
            lambda: _ACTUAL_INSERT,
            t.actual_lrps,
            [c.name for c in t.actual_lrps.columns],
        )
        await insert.executemany(connection, [_actual_row(r) for r in changes.inserts])

    async def delete_actuals_of(self, process_guid: str) -> None:
        await self._wrote(("delete-guid", process_guid))
        await self.connection.execute(
            t.actual_lrps.delete().where(t.actual_lrps.c.process_guid == process_guid)
        )

    async def set_placement_errors(self, errors: Sequence[tuple[str, int, str]]) -> list[ActualRecord]:
        """Set placement_error on these UNCLAIMED ORDINARY instances; returns the changed records."""
        rows = {
            (r.process_guid, r.index): r
            for r in await self.actuals_for_keys((pg, index) for pg, index, _ in errors)
            if r.presence == "ORDINARY" and r.state == "UNCLAIMED"
        }
        updated: list[ActualRecord] = []
        for process_guid, index, message in errors:
            row = rows.get((process_guid, index))
            if row is not None and row.placement_error != message:
                updated.append(changed(row, placement_error=message))
        await self.apply_actual_changes(
            ActualChanges(updates=updated, previous={r.key: rows[r.process_guid, r.index] for r in updated})
        )
        return updated
