"""The BBS store: records in, records out, over SQLAlchemy Core; no SQL dialect leaks out of here.

    store = await Store.open(url)            # creates the engine and migrates an empty database
    async with store.write() as tx:          # one transaction, one writer at a time
        rows = await tx.actuals_for_keys(keys)
        ...decide...
        await tx.apply_actual_changes(changes)

Every write request of the BBS is one `write()` transaction: reads, pure decisions, then a handful of
bulk statements (executemany), never one round trip per instance.

Write transactions run one at a time across every BBS process on the database, so the logic's
read-decide-write is correct as written, on either database, with any number of replicas: SQLite has
a single writer, taken at BEGIN IMMEDIATE (so another process's writes, e.g. `vendue bbs rotate-keys`,
wait for the whole transaction, not only its writes); on PostgreSQL each write transaction first takes a
transaction-scoped
advisory lock (released at commit, rollback, or when the client dies) and then reads committed rows.
Within a process an asyncio lock queues writers first, so waiting ones hold no pool connection.
Reads see one snapshot (SQLite's WAL transaction; REPEATABLE READ on PostgreSQL).

Actual LRPs are also kept in memory (actual_cache.py): a transaction reads them from there while the
stored generation number says no other replica wrote since, and its committed changes go there too.

With a key ring (bbs/encryption.py), the `command` and `env` of desired LRPs and tasks are sealed on the way
in and opened on the way out (sealing.py): once per record read, never per instance, and never sealed again
while unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import operator
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from common.priority_lock import PriorityLock

from ..actual_set import ActualChanges
from ..encryption import KeyRing, KeyRingError, no_key_ring
from ..records import (
    ActualRecord,
    CellRecord,
    DesiredRecord,
    DesiredSize,
    LeaseRecord,
    TaskRecord,
    TokenRecord,
    actual_key,
    changed,
)
from . import tables as t
from .actual_cache import ActualCache, CacheOp
from .database import WRITE_LOCK_KEY, WRITER_OPTION, check_schema, create_engine, migrate, take_advisory_lock
from .driver import DriverStatement, StatementCache, result_processors
from .sealing import SECRET_FIELDS, open_definition, seal_definition

CHUNK = 400  # rows per IN (...) list: well under every database's bound-parameter limit
PARTITION = 1000  # rows converted between two yields to the event loop
T = TypeVar("T")
# A stored report of what cells accepted: (id, placed_at, {cell_id: {"lrps": ..., "tasks": ...}}).
StoredPlacement = tuple[int, float, dict[str, dict[str, str]]]


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Store:
    def __init__(self, engine: AsyncEngine, keys: KeyRing | None = None) -> None:
        """`keys`: the key ring sealing command and env (None: they are stored in the clear)."""
        self.engine = engine
        self._writer = engine.execution_options(
            **{WRITER_OPTION: True}
        )  # same pool, BEGIN IMMEDIATE on SQLite
        self.keys = keys
        self._write_lock = PriorityLock()
        self.actual_cache = ActualCache()

    @classmethod
    async def open(cls, url: str, *, run_migrations: bool = True, keys: KeyRing | None = None,
                   sqlite_synchronous: str = "full") -> Store:
        """Open the database at `url`, migrating it to this code's schema (an empty one gets all of
        it); raises database.SchemaTooNew for a database a newer BBS migrated, and
        encryption.KeyRingError when it holds records sealed with a key `keys` lacks (or there is no ring).
        `sqlite_synchronous`: see database.create_engine (PostgreSQL ignores it)."""
        engine = create_engine(url, sqlite_synchronous=sqlite_synchronous)
        try:
            await (migrate(engine) if run_migrations else check_schema(engine))
            await _refuse_unknown_keys(engine, keys)
        except BaseException:
            await engine.dispose()
            raise
        _compile_hot_statements(engine.dialect)
        return cls(engine, keys)

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A read-only transaction on one snapshot (a convergence pass reads several tables)."""
        async with self.engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                await connection.execution_options(isolation_level="REPEATABLE READ")
            async with connection.begin():
                yield Tx(connection, self.actual_cache, self._write_lock, keys=self.keys)

    @asynccontextmanager
    async def write(self, *, urgent: bool = False) -> AsyncIterator[Tx]:
        """A read-write transaction; one at a time across all BBS processes (see the module doc).
        READ COMMITTED on PostgreSQL: every read after the lock sees the previous writer's commit.
        `urgent`: small writes with a deadline (leases, heartbeats) go before queued bulk ones.
        A transaction that changed actual LRPs raises their generation before it commits, and its
        changes reach the in-memory copy after the commit, still under the lock."""
        async with self._write_lock.hold(urgent):
            tx: Tx | None = None
            try:
                async with self._writer.begin() as connection:
                    await take_advisory_lock(connection, WRITE_LOCK_KEY)
                    tx = Tx(connection, self.actual_cache, self._write_lock, keys=self.keys, writing=True)
                    yield tx
                    await tx.raise_generation()
            except BaseException:
                # Whether a failed commit committed is unknown: let the next full read reload the copy.
                if tx is not None and tx.wrote_actuals:
                    self.actual_cache.invalidate()
                raise
            tx.commit_to_cache()

    async def ping(self, timeout_s: float = 2.0) -> bool:
        """True when a connection can be had and answers: readiness of this BBS."""

        async def probe() -> None:
            async with self.engine.connect() as connection:
                await connection.execute(sa.text("SELECT 1"))

        try:
            await asyncio.wait_for(probe(), timeout=timeout_s)
            return True
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False


async def _refuse_unknown_keys(engine: AsyncEngine, keys: KeyRing | None) -> None:
    """KeyRingError, before anything is served, when a sealed record could not be opened: the database
    holds records sealed with a key and there is no ring, or the ring lacks that key."""
    async with engine.connect() as connection:
        for table in _SEALED_TABLES:
            for label in sorted(label for label in await _key_labels(connection, table) if label is not None):
                if keys is None:
                    raise KeyRingError(no_key_ring(label))
                if label not in keys.labels:
                    raise KeyRingError(keys.lacks(label))


async def _key_labels(connection: AsyncConnection, table: sa.Table) -> dict[str | None, int]:
    """How many rows of `table` are sealed under each key label (None: stored in the clear)."""
    query = sa.select(table.c.key_label, sa.func.count()).group_by(table.c.key_label)
    return {label: int(count) for label, count in (await connection.execute(query)).all()}


# --- row <-> record ---------------------------------------------------------------------------------


def _desired_columns(record: DesiredRecord) -> dict[str, Any]:
    """Every column but the definition and its sealed part."""
    return {
        "process_guid": record.process_guid,
        "domain": record.domain,
        "instances": record.instances,
        "created_at": record.created_at,
        "mod_epoch": record.mod_epoch,
        "mod_index": record.mod_index,
        "on_cell_loss": record.on_cell_loss,
    }


def _without_secrets(definition: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in definition.items() if name not in SECRET_FIELDS}


_ACTUAL_FIELDS = [c.name for c in t.actual_lrps.columns if c.name != "idx"]
# Records are built positionally (this runs for every row of a 10,000-instance read): the table's
# columns are in the record's field order, `idx` standing for `index`.
assert [f.name for f in dataclasses.fields(ActualRecord)] == [
    "index" if c.name == "idx" else c.name for c in t.actual_lrps.columns
]


def _index_then_presence(record: ActualRecord) -> tuple[int, str]:
    return record.index, record.presence


def _actual(row: sa.Row) -> ActualRecord:
    return ActualRecord(*row)


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


_TASK_FIELDS = [f.name for f in dataclasses.fields(TaskRecord)]
# Records are built from the first columns of a row, positionally; the sealed part follows them.
assert [c.name for c in t.tasks.columns] == [*_TASK_FIELDS, "key_label", "sealed"]
_TASK_WIDTH = len(_TASK_FIELDS)
# A task's definition never changes after it is created: updates (every state change) leave it, and its
# sealed part, alone.
_TASK_UPDATED_FIELDS = [name for name in _TASK_FIELDS if name not in ("task_guid", "definition")]
_SEALED_TABLES = (t.desired_lrps, t.tasks)
_GUID_COLUMN = {t.desired_lrps.name: "process_guid", t.tasks.name: "task_guid"}


def _cell(row: sa.Row) -> CellRecord:
    return CellRecord(
        cell_id=row.cell_id, presence=row.presence, expires_at=row.expires_at, disappeared=row.disappeared,
        cordoned=row.cordoned, draining=row.draining,
    )


def _cell_params(record: CellRecord) -> dict[str, Any]:
    """What a heartbeat writes: never the operator's flags (cordoned, draining), which set_cell_flags does."""
    return {
        "cell_id": record.cell_id,
        "presence": record.presence,
        "expires_at": record.expires_at,
        "disappeared": record.disappeared,
    }


def _keyed_update(table: sa.Table, key_columns: Sequence[str]) -> sa.Update:
    """UPDATE table SET ... WHERE <key> = :k_<key>, for executemany with one dict per row (the SET
    clause comes from the other keys of those dicts)."""
    return table.update().where(*[table.c[name] == sa.bindparam(f"k_{name}") for name in key_columns])


_ACTUAL_KEY = ("process_guid", "idx", "presence")
_ACTUAL_VALUES = [name for name in _ACTUAL_FIELDS if name not in _ACTUAL_KEY]
_UPDATE_TASK = _keyed_update(t.tasks, ["task_guid"])
_UPDATE_DEFINITION = {
    table.name: _keyed_update(table, [_GUID_COLUMN[table.name]]) for table in _SEALED_TABLES
}
_UPDATE_CELL = _keyed_update(t.cells, ["cell_id"])


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


def _keys_statement(dialect: sa.engine.Dialect, size: int) -> DriverStatement:
    order = [name for i in range(size) for name in (f"process_guid__{i}", f"idx__{i}")]
    return STATEMENTS.get(dialect, ("keys", size), functools.partial(_keys_query, size), t.actual_lrps, order)


def _compile_hot_statements(dialect: sa.engine.Dialect) -> None:
    """Compile the key lookups of every bucket size now (the 400-key one takes a while), so the first
    big lifecycle round after a start does not pay for it."""
    for size in _KEY_BUCKETS:
        _keys_statement(dialect, size)


_GENERATION = "actual_lrps"
_READ_GENERATION = sa.select(t.generations.c.value).where(t.generations.c.name == _GENERATION)

class Tx:
    """One transaction's view of the store. Methods take and return records."""

    def __init__(
        self,
        connection: AsyncConnection,
        cache: ActualCache,
        write_lock: PriorityLock,
        *,
        keys: KeyRing | None = None,
        writing: bool = False,
    ) -> None:
        self.connection = connection
        self._keys = keys
        self._cache = cache
        self._writing = writing
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

    def _text_order(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """Strings sort by code point on both databases: SQLite compares bytes, while PostgreSQL
        would follow the database's locale (en_US puts "app-2" between "app1" and "app3")."""
        return sa.collate(column, "C") if self.connection.dialect.name == "postgresql" else column

    async def _rows(self, query: sa.Select[Any]) -> list[sa.Row]:
        return list((await self.connection.execute(query)).all())

    async def _records(self, query: sa.Select[Any], convert: Callable[[sa.Row], T]) -> list[T]:
        """All rows of a possibly big query, converted partition by partition; other requests get
        the event loop between partitions (a 10,000-row read must not stall heartbeats)."""
        found: list[T] = []
        result = await self.connection.stream(query)
        async for partition in result.partitions(PARTITION):
            found.extend(convert(row) for row in partition)
            await asyncio.sleep(0)
        return found

    async def _executemany(self, statement: sa.Executable, params: list[dict[str, Any]]) -> None:
        if params:
            await self.connection.execute(statement, params)

    # --- sealed definitions ---------------------------------------------------------------------

    def _desired(self, row: sa.Row) -> DesiredRecord:
        return DesiredRecord(
            process_guid=row.process_guid,
            domain=row.domain,
            instances=row.instances,
            definition=open_definition(
                self._keys, t.desired_lrps.name, row.process_guid, row.definition, row.key_label, row.sealed
            ),
            created_at=row.created_at,
            mod_epoch=row.mod_epoch,
            mod_index=row.mod_index,
            on_cell_loss=row.on_cell_loss,
        )

    def _desired_params(self, record: DesiredRecord) -> dict[str, Any]:
        guid = record.process_guid
        clear, label, sealed = seal_definition(self._keys, t.desired_lrps.name, guid, record.definition)
        return {**_desired_columns(record), "definition": clear, "key_label": label, "sealed": sealed}

    def _task(self, row: sa.Row) -> TaskRecord:
        record = TaskRecord(*row[:_TASK_WIDTH])
        record.definition = open_definition(
            self._keys, t.tasks.name, record.task_guid, record.definition, row.key_label, row.sealed
        )
        return record

    def _task_params(self, record: TaskRecord) -> dict[str, Any]:
        clear, label, sealed = seal_definition(self._keys, t.tasks.name, record.task_guid, record.definition)
        params = {name: getattr(record, name) for name in _TASK_FIELDS}
        return {**params, "definition": clear, "key_label": label, "sealed": sealed}

    async def key_labels(self) -> dict[str, dict[str | None, int]]:
        """Per table (desired_lrps, tasks): how many rows are sealed under each key label (None: clear)."""
        return {table.name: await _key_labels(self.connection, table) for table in _SEALED_TABLES}

    async def reseal(self, table_name: str, after: str, limit: int) -> list[str]:
        """Seal with the active key up to `limit` rows of `table_name` (desired_lrps or tasks) whose guid
        sorts after `after` and whose key is another (rows in the clear too); their guids, in order.
        Walking the guids (not "the first rows not yet done") makes a whole pass one read of the table, and a
        pass stopped half-way resumes by starting again: rows already done are passed over."""
        if self._keys is None:
            raise RuntimeError("resealing needs the key ring")
        table = t.desired_lrps if table_name == t.desired_lrps.name else t.tasks
        guid = table.c[_GUID_COLUMN[table.name]]
        c = table.c
        query = (
            sa.select(guid, c.definition, c.key_label, c.sealed)
            .where(guid > after, sa.or_(c.key_label.is_(None), c.key_label != self._keys.active))
            .order_by(guid)
            .limit(limit)
        )
        rows = await self._rows(query)
        params = []
        for row_guid, clear, label, sealed in rows:
            definition = open_definition(self._keys, table.name, row_guid, clear, label, sealed)
            clear, label, sealed = seal_definition(self._keys, table.name, row_guid, definition)
            params.append(
                {f"k_{guid.name}": row_guid, "definition": clear, "key_label": label, "sealed": sealed}
            )
        await self._executemany(_UPDATE_DEFINITION[table.name], params)
        return [row[0] for row in rows]

    # --- desired LRPs ---------------------------------------------------------------------------

    async def get_desired(self, process_guid: str) -> DesiredRecord | None:
        rows = await self._rows(
            sa.select(t.desired_lrps).where(t.desired_lrps.c.process_guid == process_guid)
        )
        return self._desired(rows[0]) if rows else None

    async def desired_by_guid(self, process_guids: Iterable[str]) -> dict[str, DesiredRecord]:
        found: dict[str, DesiredRecord] = {}
        for chunk in _chunks(sorted(set(process_guids))):
            query = sa.select(t.desired_lrps).where(t.desired_lrps.c.process_guid.in_(list(chunk)))
            for row in await self._rows(query):
                found[row.process_guid] = self._desired(row)
        return found

    async def list_desired(self, domain: str | None = None) -> list[DesiredRecord]:
        query = sa.select(t.desired_lrps).order_by(self._text_order(t.desired_lrps.c.process_guid))
        if domain is not None:
            query = query.where(t.desired_lrps.c.domain == domain)
        return [self._desired(row) for row in await self._rows(query)]

    async def desired_sizes(self) -> list[DesiredSize]:
        """Every desired LRP's instance count and cell-loss policy (what a convergence pass needs),
        definitions unread."""
        c = t.desired_lrps.c
        query = sa.select(c.process_guid, c.domain, c.instances, c.on_cell_loss).order_by(
            self._text_order(c.process_guid))
        return [DesiredSize(*row) for row in await self._rows(query)]

    async def desired_totals(self) -> tuple[int, int]:
        """(desired LRPs, instances they desire in total): what the quotas (bbs/quotas.py) count."""
        c = t.desired_lrps.c
        row = (await self._rows(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(c.instances), 0))))[0]
        return int(row[0]), int(row[1])

    async def insert_desireds(self, records: Sequence[DesiredRecord]) -> bool:
        """Insert several in one statement; False (and nothing written) when one exists already."""
        try:
            async with self.connection.begin_nested():
                await self._executemany(t.desired_lrps.insert(), [self._desired_params(r) for r in records])
        except IntegrityError:
            return False
        return True

    async def update_desired(self, record: DesiredRecord) -> None:
        """Write `record` over its row. Its command and env never change (an update changes the instances):
        a sealed row keeps its sealed part as it is, never sealed again; a row in the clear is written whole
        (and sealed, with a ring)."""
        where = t.desired_lrps.c.process_guid == record.process_guid
        if self._keys is not None:
            kept = await self.connection.execute(
                t.desired_lrps.update()
                .where(where, t.desired_lrps.c.key_label.is_not(None))
                .values({**_desired_columns(record), "definition": _without_secrets(record.definition)})
            )
            if kept.rowcount == 1:
                return
        await self.connection.execute(
            t.desired_lrps.update().where(where).values(self._desired_params(record))
        )

    async def delete_desired(self, process_guid: str) -> None:
        await self.connection.execute(
            t.desired_lrps.delete().where(t.desired_lrps.c.process_guid == process_guid)
        )

    # --- actual LRPs ----------------------------------------------------------------------------

    async def list_actuals(
        self,
        process_guid: str | None = None,
        cell_id: str | None = None,
        state: str | None = None,
        presence: str | None = None,
    ) -> list[ActualRecord]:
        """Actual LRPs matching every given filter, by (process_guid, index, presence). Read through the
        driver (a convergence pass reads all 250,000 at Diego's scale) and converted in partitions,
        so other requests get the event loop in between."""
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
        result = await query.execute(self.connection, [given[name] for name in filters])
        convert = _actual_reader(dialect, result)
        rows = result.all()
        found: list[ActualRecord] = []
        for start in range(0, len(rows), PARTITION):
            found.extend(map(convert, rows[start : start + PARTITION]))
            await asyncio.sleep(0)
        return found

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
        for chunk in _chunks(sorted(set(process_guids))):
            query = sa.select(t.actual_lrps).where(t.actual_lrps.c.process_guid.in_(list(chunk)))
            found.extend(_actual(row) for row in await self._rows(query))
        return found

    async def actuals_for_keys(self, keys: Iterable[tuple[str, int]]) -> list[ActualRecord]:
        """Every presence of each (process_guid, index), a few hundred keys per statement."""
        if (cache := await self._cached()) is not None:
            return cache.for_keys(set(keys))
        dialect = self.connection.dialect
        found: list[ActualRecord] = []
        for chunk in _chunks(sorted(set(keys))):
            size = next(b for b in _KEY_BUCKETS if b >= len(chunk))
            padded = [*chunk, *[chunk[-1]] * (size - len(chunk))]  # repeats match the same rows
            query = _keys_statement(dialect, size)
            params = [value for key in padded for value in key]
            result = await query.execute(self.connection, params)
            found.extend(map(_actual_reader(dialect, result), result.all()))
        return found

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
        previous = changes.previous
        for record in changes.updates:
            key = actual_key(record)
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

    async def count_actuals(self, process_guid: str | None = None) -> list[tuple[str, str, int]]:
        """(state, presence, count) for every combination present."""
        if (cache := await self._cached()) is not None:
            return cache.counts(process_guid)
        c = t.actual_lrps.c
        query = sa.select(c.state, c.presence, sa.func.count()).group_by(c.state, c.presence)
        if process_guid is not None:
            query = query.where(c.process_guid == process_guid)
        return [(row[0], row[1], int(row[2])) for row in await self._rows(query)]

    # --- tasks ----------------------------------------------------------------------------------

    async def get_task(self, task_guid: str) -> TaskRecord | None:
        rows = await self._rows(sa.select(t.tasks).where(t.tasks.c.task_guid == task_guid))
        return self._task(rows[0]) if rows else None

    async def tasks_by_guid(self, task_guids: Iterable[str]) -> dict[str, TaskRecord]:
        found: dict[str, TaskRecord] = {}
        for chunk in _chunks(sorted(set(task_guids))):
            query = sa.select(t.tasks).where(t.tasks.c.task_guid.in_(list(chunk)))
            for row in await self._rows(query):
                found[row.task_guid] = self._task(row)
        return found

    async def list_tasks(self, state: str | None = None, domain: str | None = None) -> list[TaskRecord]:
        query = sa.select(t.tasks).order_by(t.tasks.c.created_at, self._text_order(t.tasks.c.task_guid))
        if state is not None:
            query = query.where(t.tasks.c.state == state)
        if domain is not None:
            query = query.where(t.tasks.c.domain == domain)
        return await self._records(query, self._task)

    async def insert_task(self, record: TaskRecord) -> bool:
        """False when a task with this guid exists already."""
        try:
            # In a savepoint: on PostgreSQL a failed statement would void the whole transaction.
            async with self.connection.begin_nested():
                await self.connection.execute(t.tasks.insert().values(self._task_params(record)))
        except IntegrityError:
            return False
        return True

    async def update_tasks(self, records: Iterable[TaskRecord]) -> None:
        """Write the state of these tasks (their definitions never change, and are left as stored)."""
        params = [{"k_task_guid": r.task_guid, **{name: getattr(r, name) for name in _TASK_UPDATED_FIELDS}}
                  for r in records]
        await self._executemany(_UPDATE_TASK, params)

    async def delete_tasks(self, task_guids: Iterable[str]) -> None:
        for chunk in _chunks(sorted(set(task_guids))):
            await self.connection.execute(t.tasks.delete().where(t.tasks.c.task_guid.in_(list(chunk))))

    # --- cells ----------------------------------------------------------------------------------

    async def get_cell(self, cell_id: str) -> CellRecord | None:
        rows = await self._rows(sa.select(t.cells).where(t.cells.c.cell_id == cell_id))
        return _cell(rows[0]) if rows else None

    async def cells_by_id(self, cell_ids: Iterable[str]) -> dict[str, CellRecord]:
        found: dict[str, CellRecord] = {}
        for chunk in _chunks(sorted(set(cell_ids))):
            for row in await self._rows(sa.select(t.cells).where(t.cells.c.cell_id.in_(list(chunk)))):
                found[row.cell_id] = _cell(row)
        return found

    async def list_cells(self, present_at: float | None = None) -> list[CellRecord]:
        query = sa.select(t.cells).order_by(self._text_order(t.cells.c.cell_id))
        if present_at is not None:
            query = query.where(t.cells.c.expires_at >= present_at)
        return [_cell(row) for row in await self._rows(query)]

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
        for chunk in _chunks(sorted(set(cell_ids))):
            await self.connection.execute(
                t.cells.update().where(t.cells.c.cell_id.in_(list(chunk))).values(disappeared=True)
            )

    async def delete_cells(self, cell_ids: Iterable[str]) -> None:
        for chunk in _chunks(sorted(set(cell_ids))):
            await self.connection.execute(t.cells.delete().where(t.cells.c.cell_id.in_(list(chunk))))

    async def next_cell_expiry(self) -> float | None:
        """The earliest expiry among cells not yet announced as gone: when convergence should look."""
        query = sa.select(sa.func.min(t.cells.c.expires_at)).where(t.cells.c.disappeared.is_(False))
        return (await self.connection.execute(query)).scalar()

    # --- what cells accepted (bbs/placements.py) -------------------------------------------------

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
        for chunk in _chunks(sorted(set(ids))):
            query = sa.select(t.placements).where(t.placements.c.id.in_(list(chunk)))
            found.extend((int(row.id), float(row.placed_at), row.accepted) for row in await self._rows(query))
        return found

    async def delete_placements(self, ids: Iterable[int]) -> None:
        for chunk in _chunks(sorted(set(ids))):
            await self.connection.execute(t.placements.delete().where(t.placements.c.id.in_(list(chunk))))

    # --- leases ---------------------------------------------------------------------------------
    # A lease's expiry is decided by the database's clock, never by a replica's: two BBS replicas whose
    # clocks disagree would otherwise both see "expired" (or both "held") and fencing would not hold.

    async def database_time(self) -> float:
        """Now, in epoch seconds, by the database server's clock."""
        return float(
            (await self.connection.execute(sa.select(_database_now(self.connection.dialect)))).scalar_one()
        )

    async def acquire_lease(
        self, name: str, owner: str, ttl: float, now: float | None = None, url: str = ""
    ) -> int | None:
        """Take or renew the lease `name`; its fencing token when held, None when someone else has it.
        `url` is where the holder answers (peers forward to it); a renewal may change it. `now`: the
        database's clock unless given (tests pin it)."""
        if now is None:
            now = await self.database_time()
        rows = await self._rows(sa.select(t.leases).where(t.leases.c.name == name))
        if not rows:
            try:
                async with self.connection.begin_nested():
                    await self.connection.execute(
                        t.leases.insert().values(
                            name=name, owner=owner, token=1, expires_at=now + ttl, url=url
                        )
                    )
            except IntegrityError:
                return None  # another replica created it first
            return 1
        lease = rows[0]
        if lease.owner != owner and lease.expires_at >= now:
            return None
        token = lease.token if lease.owner == owner else lease.token + 1
        # Conditional on the row as read (owner and token are its version): writes are serialised
        # already, but a lease is what fencing rests on, so it is never taken over blindly.
        taken = await self.connection.execute(
            t.leases.update()
            .where(t.leases.c.name == name, t.leases.c.owner == lease.owner, t.leases.c.token == lease.token)
            .values(owner=owner, token=token, expires_at=now + ttl, url=url)
        )
        return token if taken.rowcount == 1 else None

    async def release_lease(self, name: str, owner: str, token: int) -> bool | None:
        """Give up the lease `name` held by `owner` under `token`, so another owner may take it at once
        (with the next token: the row stays, so tokens keep growing). True: released (or already
        expired); False: someone else holds it, or a newer term does; None: nobody ever took it."""
        rows = await self._rows(sa.select(t.leases).where(t.leases.c.name == name))
        if not rows:
            return None
        # Expired by every clock: 0, not "now".
        released = await self.connection.execute(
            t.leases.update()
            .where(t.leases.c.name == name, t.leases.c.owner == owner, t.leases.c.token == token)
            .values(expires_at=0.0)
        )
        return released.rowcount == 1

    async def lease(self, name: str) -> LeaseRecord | None:
        """The lease row `name` as stored (expired or not), None if nobody ever took it."""
        rows = await self._rows(sa.select(t.leases).where(t.leases.c.name == name))
        return _lease(rows[0]) if rows else None

    async def held_lease(self, name: str) -> LeaseRecord | None:
        """The lease `name` while someone holds it (unexpired by the database's clock), else None."""
        now = _database_now(self.connection.dialect)
        rows = await self._rows(
            sa.select(t.leases).where(t.leases.c.name == name, t.leases.c.expires_at >= now)
        )
        return _lease(rows[0]) if rows else None

    # --- bearer tokens --------------------------------------------------------------------------

    async def insert_token(self, record: TokenRecord) -> None:
        await self.connection.execute(t.tokens.insert().values(_token_params(record)))

    async def list_tokens(self) -> list[TokenRecord]:
        query = sa.select(t.tokens).order_by(t.tokens.c.created_at, self._text_order(t.tokens.c.id))
        return [_token(row) for row in await self._rows(query)]

    async def token_by_hash(self, secret_sha256: str) -> TokenRecord | None:
        """The token whose secret hashes to this (valid or not: the caller decides)."""
        rows = await self._rows(sa.select(t.tokens).where(t.tokens.c.secret_sha256 == secret_sha256))
        return _token(rows[0]) if rows else None

    async def revoke_token(self, token_id: str, now: float) -> bool:
        """Revoke it from `now` on (a token revoked before keeps its first revocation time); False when
        there is no such token."""
        rows = await self._rows(sa.select(t.tokens.c.revoked_at).where(t.tokens.c.id == token_id))
        if not rows:
            return False
        if rows[0].revoked_at is None:
            await self.connection.execute(
                t.tokens.update().where(t.tokens.c.id == token_id).values(revoked_at=now)
            )
        return True


def _database_now(dialect: sa.engine.Dialect) -> sa.ColumnElement[float]:
    """The database server's clock in epoch seconds, as an SQL expression. SQLite evaluates 'now' once per
    statement; julianday works on every version (unixepoch('subsec') needs 3.42). PostgreSQL:
    clock_timestamp() is the time of the call (now() would be the transaction's start)."""
    if dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Float)
    return (sa.func.julianday("now") - 2440587.5) * 86400.0


def _lease(row: sa.Row) -> LeaseRecord:
    return LeaseRecord(row.name, row.owner, row.token, row.expires_at, row.url or "")


def _token(row: sa.Row) -> TokenRecord:
    return TokenRecord(
        row.id, row.name, row.role, row.secret_sha256, row.created_at, row.expires_at, row.revoked_at
    )


def _token_params(record: TokenRecord) -> dict[str, Any]:
    return dataclasses.asdict(record)
