"""Opening the database: the async engine (an SQLite file in WAL mode by default, PostgreSQL through
asyncpg in production) and its Alembic migrations.

Everything that differs between the two databases is decided here and in the store's modules
(bbs/store/), never in the BBS logic: URL spelling, connection setup, pool sizes, and how writers are
serialised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"

# The async driver each supported database is reached through; a bare `postgresql://` (what most
# operators have in DATABASE_URL) or `sqlite://` URL gets it.
ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}

# PostgreSQL advisory lock keys (any 64-bit numbers; these spell "vendue-w" and "vendue-m").
WRITE_LOCK_KEY = 0x76656E6475652D77  # held by every BBS write transaction, see Store.write
MIGRATION_LOCK_KEY = 0x76656E6475652D6D  # held while migrating, so replicas starting together take turns

PG_POOL_SIZE = 10  # connections kept open: one writer at a time per process, the rest serve reads
PG_MAX_OVERFLOW = 10
PG_POOL_TIMEOUT_S = 10.0  # waiting longer for a connection is an error, not a hang
PG_POOL_RECYCLE_S = 1800.0  # reconnect now and then (proxies and failovers drop idle connections)
PG_CONNECT_TIMEOUT_S = 5.0
PG_COMMAND_TIMEOUT_S = 60.0
PG_IDLE_IN_TRANSACTION_MS = 60_000
PG_LOCK_TIMEOUT_MS = 30_000
# How soon the server gives up a replica that vanished (partitioned, its host gone): TCP keepalives on an
# idle connection (PG_KEEPALIVE_IDLE_S, then PG_KEEPALIVE_COUNT probes PG_KEEPALIVE_INTERVAL_S apart) and a
# bound on unacknowledged data otherwise. A replica cut off in the middle of a write transaction holds
# the write lock (and row locks) until its session ends: every other replica's writes, heartbeats among
# them, wait until then, which without these is idle_in_transaction_session_timeout (60 s), or the
# kernel's two hours of keepalive idle when the server was the one waiting for an answer.
PG_KEEPALIVE_IDLE_S = 2
PG_KEEPALIVE_INTERVAL_S = 1
PG_KEEPALIVE_COUNT = 3
PG_TCP_USER_TIMEOUT_MS = 5_000
# Execution option of the store's write transactions (see create_engine's BEGIN on SQLite).
WRITER_OPTION = "vendue_writer"
SQLITE_CHECKPOINT_PAGES = 16_384  # checkpoint the WAL at about 64 MiB (4 KiB pages), not 4 MiB
SQLITE_CACHE_KIB = 65_536  # page cache per connection: the hot tables of 250,000 instances fit
# SQLite's `synchronous` pragma by setting (--sqlite-synchronous). In WAL mode FULL syncs the WAL at every
# commit, so an acknowledged write survives a power loss; NORMAL syncs only at checkpoints, so it survives
# a crash of the process but the last commits may be lost with the machine.
SQLITE_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}


def _json_encoder() -> Any:
    """json.dumps for JSON columns, with the C encoder built once: json.dumps builds it anew on every
    call, half the cost of encoding one instance's ports (250,000 of them in a scale run's lifecycle
    writes). Same output as json.dumps; json.dumps itself where the C accelerator is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)  # CPython's C accelerator, not in typeshed
    if make is None:
        return json.dumps
    # No circular-reference check (records hold plain trees); otherwise json.dumps's defaults.
    default = json.JSONEncoder().default
    encode = make(None, default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)

    def dumps(value: Any) -> str:
        if isinstance(value, (list, dict)):
            return "".join(encode(value, 0))
        return json.dumps(value)

    return dumps


json_dumps = _json_encoder()


class UnsupportedDatabase(ValueError):
    pass


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer BBS: this one must not touch it."""

    def __init__(self, current: str, head: str | None) -> None:
        super().__init__(
            f"database schema {current} is newer than this BBS (knows up to {head}): upgrade the BBS"
        )
        self.current = current
        self.head = head


def database_url(url: str) -> URL:
    """The SQLAlchemy URL to open: parsed, checked, and given its async driver when it names none."""
    parsed = make_url(url)  # raises ArgumentError when it is not a URL at all
    backend = parsed.get_backend_name()
    if backend == "postgres":  # Heroku-style spelling
        parsed, backend = parsed.set(drivername="postgresql"), "postgresql"
    driver = ASYNC_DRIVERS.get(backend)
    if driver is None:
        raise UnsupportedDatabase(f"unsupported database {backend!r} (use sqlite or postgresql)")
    given = parsed.get_driver_name() if "+" in parsed.drivername else driver
    if given != driver:
        raise UnsupportedDatabase(f"{backend} is reached through {driver}, not {given!r}")
    if backend == "postgresql" and not parsed.database:
        raise UnsupportedDatabase("the PostgreSQL URL names no database")
    return parsed.set(drivername=f"{backend}+{driver}")


# SQLSTATE classes that say the server cannot take the statement now, not that the statement is wrong:
# connection exception, insufficient resources, operator intervention (shutting down, starting up,
# recovering after a crash; a statement cancelled).
UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is not there for now (down, restarting, the connection lost), as
    opposed to refusing a statement: what a caller answers with "try again"."""
    if isinstance(exc, ConnectionError):  # the driver's connect, refused or reset, is not wrapped
        return True
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated or isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    return sqlstate[:2] in UNAVAILABLE_SQLSTATE_CLASSES


def is_sqlite(url: str | URL) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def create_engine(url: str | URL, *, sqlite_synchronous: str = "full") -> AsyncEngine:
    """An async engine. SQLite: the file's folder created, WAL, `synchronous` as `sqlite_synchronous`
    says (a key of SQLITE_SYNCHRONOUS), and real BEGINs. PostgreSQL: a bounded pool whose connections
    are checked before use (a restarted server is noticed) and named `vendue-bbs` in pg_stat_activity."""
    synchronous = SQLITE_SYNCHRONOUS.get(sqlite_synchronous)
    if synchronous is None:
        raise ValueError(f"sqlite_synchronous: {sorted(SQLITE_SYNCHRONOUS)}, not {sqlite_synchronous!r}")
    parsed = database_url(url) if isinstance(url, str) else url
    if not is_sqlite(parsed):
        return create_async_engine(
            parsed,
            json_serializer=json_dumps,
            pool_pre_ping=True,
            pool_size=PG_POOL_SIZE,
            max_overflow=PG_MAX_OVERFLOW,
            pool_timeout=PG_POOL_TIMEOUT_S,
            pool_recycle=PG_POOL_RECYCLE_S,
            connect_args={
                "timeout": PG_CONNECT_TIMEOUT_S,
                "command_timeout": PG_COMMAND_TIMEOUT_S,
                "server_settings": {
                    "application_name": "vendue-bbs",
                    # A writer that hangs mid-transaction (partitioned, stopped) must not hold the
                    # write lock for ever, and a write must fail rather than wait for ever.
                    "idle_in_transaction_session_timeout": str(PG_IDLE_IN_TRANSACTION_MS),
                    "lock_timeout": str(PG_LOCK_TIMEOUT_MS),
                    "tcp_keepalives_idle": str(PG_KEEPALIVE_IDLE_S),
                    "tcp_keepalives_interval": str(PG_KEEPALIVE_INTERVAL_S),
                    "tcp_keepalives_count": str(PG_KEEPALIVE_COUNT),
                    "tcp_user_timeout": str(PG_TCP_USER_TIMEOUT_MS),
                },
            },
        )
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(parsed, json_serializer=json_dumps, connect_args={"timeout": 30})

    @sa.event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy, not the driver, open transactions (the driver would skip BEGIN before a
        # SELECT, so a read-then-write request would not see one snapshot).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=30000")
        # At 250,000 instances a lifecycle round rewrites pages all over the table: with the default
        # 1,000-page WAL checkpoints and 2 MiB page cache, checkpointing and re-reading pages took
        # longer than the updates themselves (250,000 updates: 16 s -> 10 s measured).
        cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_CHECKPOINT_PAGES}")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.close()

    @sa.event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection) -> None:
        # A write transaction takes the database's write lock at BEGIN: one that read first would otherwise
        # fail at its first write ("database is locked", no waiting) if another process committed since its
        # read (`vendue bbs rotate-keys` while the BBS serves).
        immediate = connection.get_execution_options().get(WRITER_OPTION)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


async def take_advisory_lock(connection: AsyncConnection, key: int) -> None:
    """PostgreSQL: wait for the transaction-scoped advisory lock `key` (released at commit or
    rollback, also when the client dies). SQLite has a single writer anyway: nothing to do."""
    if connection.dialect.name == "postgresql":
        await connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def known_head() -> str | None:
    """The newest revision this code has a migration for."""
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def _refuse_unknown_revision(connection: sa.Connection) -> None:
    current = MigrationContext.configure(connection).get_current_revision()
    scripts = ScriptDirectory.from_config(alembic_config(""))
    if current is not None and current not in {script.revision for script in scripts.walk_revisions()}:
        raise SchemaTooNew(current, scripts.get_current_head())


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision` (an empty database gets every migration). Refuses, with
    SchemaTooNew, a database at a revision this code does not know (a newer BBS migrated it)."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))

    def upgrade(connection: sa.Connection) -> None:
        _refuse_unknown_revision(connection)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    async with engine.begin() as connection:
        await take_advisory_lock(connection, MIGRATION_LOCK_KEY)
        await connection.run_sync(upgrade)


async def check_schema(engine: AsyncEngine) -> None:
    """Raise SchemaTooNew when the database is at a revision this code does not know."""
    async with engine.connect() as connection:
        await connection.run_sync(_refuse_unknown_revision)


async def schema_revision(engine: AsyncEngine) -> tuple[str | None, str | None]:
    """(current revision of the database, newest revision known to this code)."""

    def current(connection: sa.Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(current), known_head()
