"""Leases: the convergence lease (bbs/converger.py) and the auctioneer's (taken through the API), with
fencing tokens; expiry is by the database's clock. Lease writes are urgent: a renewal queued behind bulk
writes would miss its deadline and turn load into failover."""

from __future__ import annotations

from ..records import LeaseRecord
from ..unit_of_work import UnitOfWork


class Leases:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def acquire(self, name: str, owner: str, *, url: str = "", ttl: float | None = None) -> int | None:
        """Take or renew the lease `name` for `ttl` seconds (default: this BBS's lease TTL); its fencing
        token when held, None when another owner holds it."""
        ttl = self.uow.settings.lease_ttl if ttl is None else ttl
        async with self.uow.write(urgent=True) as (tx, _):
            return await tx.acquire_lease(name, owner, ttl, url=url)

    async def take(self, name: str, owner: str, *, url: str, ttl: float) -> tuple[bool, LeaseRecord]:
        """Acquire or renew, then the lease as it stands after, in one transaction: (held, lease)."""
        async with self.uow.write(urgent=True) as (tx, _):
            before = await tx.lease(name)
            token = await tx.acquire_lease(name, owner, ttl, url=url)
            lease = await tx.lease(name)
        assert lease is not None  # acquire_lease creates the row when there is none
        if token is not None and before is not None and before.token != token:
            # A new holder: what the old one had in hand may be lost; convergence auctions it again now.
            self.uow.on_wake()
        return token is not None, lease

    async def release(self, name: str, owner: str, token: int) -> bool | None:
        """Give the lease up (graceful stop): True released, False held by another owner or term, None never
        taken."""
        async with self.uow.write(urgent=True) as (tx, _):
            return await tx.release_lease(name, owner, token)

    async def get(self, name: str) -> LeaseRecord | None:
        """The lease row as stored, expired or not."""
        async with self.uow.read() as tx:
            return await tx.lease(name)

    async def held(self, name: str) -> LeaseRecord | None:
        """The lease while someone holds it, by the database's clock; None when nobody does."""
        async with self.uow.read() as tx:
            return await tx.held_lease(name)
