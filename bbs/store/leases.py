"""Leases: one row per elected role, its fencing token growing with every change of owner.

A lease's expiry is decided by the database's clock, never by a replica's: two BBS replicas whose clocks
disagree would otherwise both see "expired" (or both "held") and fencing would not hold.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ..records import LeaseRecord
from . import tables as t
from .transaction import Transaction


def _database_now(dialect: sa.engine.Dialect) -> sa.ColumnElement[float]:
    """The database server's clock in epoch seconds, as an SQL expression. SQLite evaluates 'now' once per
    statement; julianday works on every version (unixepoch('subsec') needs 3.42). PostgreSQL:
    clock_timestamp() is the time of the call (now() would be the transaction's start)."""
    if dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Float)
    return (sa.func.julianday("now") - 2440587.5) * 86400.0


def _lease(row: sa.Row) -> LeaseRecord:
    return LeaseRecord(row.name, row.owner, row.token, row.expires_at, row.url or "")


class LeaseQueries(Transaction):
    async def _read_lease(self, name: str, *where: sa.ColumnElement[bool]) -> LeaseRecord | None:
        """The one way lease rows are read: the lease `name` if its row matches `where` too."""
        found = await self._records(sa.select(t.leases).where(t.leases.c.name == name, *where), _lease)
        return found[0] if found else None

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
        lease = await self._read_lease(name)
        if lease is None:
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
        if lease.owner != owner and lease.expires_at >= now and not restarted_holder(lease.owner, lease.url,
                                                                                    owner, url):
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
        if await self._read_lease(name) is None:
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
        return await self._read_lease(name)

    async def held_lease(self, name: str) -> LeaseRecord | None:
        """The lease `name` while someone holds it (unexpired by the database's clock), else None."""
        return await self._read_lease(name, t.leases.c.expires_at >= _database_now(self.connection.dialect))


def restarted_holder(held_by: str, held_url: str, owner: str, url: str) -> bool:
    """Whether `owner` is the holder restarted (kill -9, then its supervisor): the same host (an owner
    starts with its hostname) answering at the same URL, which no two live processes can. It takes the
    lease at once, under the next token, instead of waiting out the dead process's term."""
    return bool(url) and url == held_url and owner.split(":", 1)[0] == held_by.split(":", 1)[0]
