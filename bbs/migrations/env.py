"""Alembic environment for the BBS schema.

The BBS runs migrations programmatically (bbs.store.database.migrate) and hands over an open
connection in `config.attributes["connection"]`; without one (the `alembic` command line) this opens
the async engine named by `sqlalchemy.url` itself.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from bbs.store.tables import metadata

config = context.config


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async() -> None:
    engine = create_async_engine(config.get_main_option("sqlalchemy.url") or "")
    async with engine.begin() as connection:
        await connection.run_sync(run_with)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
elif (given := config.attributes.get("connection")) is not None:
    run_with(given)
else:
    asyncio.run(run_async())
