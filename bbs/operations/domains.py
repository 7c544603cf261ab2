"""Domains (Diego's, docs/diego-api.md): whoever desires a domain's LRPs upserts it with a TTL while it is
in step; an expired one keeps convergence from deleting that domain's extra instances."""

from __future__ import annotations

import time

from ..unit_of_work import UnitOfWork


class Domains:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def upsert(self, name: str, ttl_s: int) -> None:
        """Fresh for `ttl_s` seconds from now; 0: for ever."""
        expires_at = time.time() + ttl_s if ttl_s > 0 else None
        async with self.uow.write() as (tx, _effects):
            await tx.upsert_domain(name, expires_at)

    async def fresh(self) -> list[str]:
        """The domains fresh now, sorted."""
        now = time.time()
        async with self.uow.read() as tx:
            domains = await tx.list_domains()
        return sorted(name for name, until in domains.items() if until is None or until > now)
