"""What every component's uvicorn server shares: a shutdown that does not wait on idle TLS connections.

On SIGTERM uvicorn closes each idle keep-alive connection with `transport.close()`. Over TLS that is a
polite close: asyncio sends close_notify and keeps the connection until the peer answers with its own, or
for ssl_shutdown_timeout (30 s). A client that keeps the connection idle in its pool (the BBS's httpx
client to the auctioneer, the auctioneer's aiohttp client to the reps) reads nothing until its next
request, so it never answers, and the server's graceful shutdown waited out its whole timeout: a stopped
auctioneer exited only after 10 s, or was killed first. Idle connections carry no request: dropping them
(`abort`) loses nothing, and the client's pool discards the dead connection when it next reaches for it,
as with any server that closes idle connections.
"""

from __future__ import annotations

import socket

import uvicorn


def drop_idle_connections(server: uvicorn.Server) -> int:
    """Abort every connection of `server` with no request in progress; returns how many."""
    dropped = 0
    for connection in list(server.server_state.connections):
        cycle = getattr(connection, "cycle", None)
        transport = getattr(connection, "transport", None)
        if transport is not None and (cycle is None or cycle.response_complete):
            transport.abort()
            dropped += 1
    return dropped


class Server(uvicorn.Server):
    """uvicorn's server whose shutdown drops idle connections at once (see the module's docstring), then
    lets requests in progress finish within the graceful timeout as uvicorn does."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        drop_idle_connections(self)
        await super().shutdown(sockets)
