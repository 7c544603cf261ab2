"""The BBS store: records in, records out, over SQLAlchemy Core; no SQL dialect leaks out of it.

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

A transaction (`Tx`) is every entity's queries on one connection, one module each, the way Diego's sqldb
is laid out: desired.py, actuals.py, tasks.py, cells.py, placements.py, leases.py, tokens.py, and
resealing.py for the sealed tables as a whole; transaction.py holds what they share.

Actual LRPs are also kept in memory (actual_cache.py): a transaction reads them from there while the
stored generation number says no other replica wrote since, and its committed changes go there too.

With a key ring (bbs/encryption.py), the `command` and `env` of desired LRPs and tasks are sealed on the way
in and opened on the way out (sealing.py): once per record read, never per instance, and never sealed again
while unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..encryption import KeyRing
from .actual_cache import ActualCache
from .actuals import ActualQueries, compile_hot_statements
from .cells import CellQueries
from .database import WRITE_LOCK_KEY, WRITER_OPTION, check_schema, create_engine, migrate, take_advisory_lock
from .desired import DesiredQueries
from .domains import DomainQueries
from .leases import LeaseQueries
from .placements import PlacementQueries
from .priority_lock import PriorityLock
from .resealing import Resealing, refuse_unknown_keys
from .tasks import TaskQueries
from .tokens import TokenQueries
from .versions import VersionQueries


class Tx(
    ActualQueries,
    DesiredQueries,
    TaskQueries,
    CellQueries,
    PlacementQueries,
    LeaseQueries,
    TokenQueries,
    VersionQueries,
    DomainQueries,
    Resealing,
):
    """One transaction's view of the store: every entity's queries on one connection. Methods take and
    return records."""


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
            await refuse_unknown_keys(engine, keys)
        except BaseException:
            await engine.dispose()
            raise
        compile_hot_statements(engine.dialect)
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
