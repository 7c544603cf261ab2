"""The HTTP clients the auctioneer talks to reps with: pooled keep-alive connections, sharded.

httpcore's pool does work proportional to the square of its connection count on every request it
queues or finishes (it rescans every connection per idle connection), so one pool of 256 connections
spends seconds of CPU on a 1,000-cell state fetch. Small pools keep that cost flat: each cell always
uses the same shard, so its keep-alive connection is found again in the next auction.
"""

from __future__ import annotations

import ssl
import zlib
from functools import cache

import httpx

CONNECTIONS_PER_SHARD = 16


@cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every client: building one loads the CA bundle (~0.1 s each)."""
    return httpx.create_ssl_context(trust_env=False)


class RepClients:
    def __init__(self, max_connections: int = 256, timeout: float = 10.0) -> None:
        shards = max(1, -(-max_connections // CONNECTIONS_PER_SHARD))
        per_shard = min(max_connections, CONNECTIONS_PER_SHARD)
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        # trust_env=False: the control plane talks to its peers directly, never through an HTTP proxy.
        self._shards = [
            httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False, verify=tls_context())
            for _ in range(shards)
        ]

    def for_cell(self, cell_id: str) -> httpx.AsyncClient:
        return self._shards[zlib.crc32(cell_id.encode()) % len(self._shards)]

    async def aclose(self) -> None:
        for client in self._shards:
            await client.aclose()

    async def __aenter__(self) -> RepClients:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
