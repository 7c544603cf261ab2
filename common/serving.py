"""What every component's uvicorn server shares: bounded connections, and a shutdown that does not wait on
idle TLS connections.

**Bounded connections.** uvicorn times only the idle wait between two requests (`timeout_keep_alive`):
a connection that completed the TLS handshake and sent nothing, or half a request line, stayed open
for ever, and asyncio gives a TLS handshake 60 s. Thousands of such connections held as many
descriptors. Here (settings in common/limits.py):
- the TLS handshake has `tls_handshake_timeout` (asyncio's own parameter, which uvicorn does not pass);
- a request head (request line and headers) must be complete within `header_timeout` of the
  connection's start, or of its first byte for a later request on a kept-alive connection: else the
  connection is aborted (no close_notify to wait on, the descriptor is freed at once);
- at most `max_connections` connections are served at once, the open-file limit raised to its hard limit
  at start and the cap held to half of it (the rest: connections in their handshake, the database,
  outbound calls); one more is aborted as soon as it is made, while those already served go on.
  uvicorn's own `limit_concurrency` is not used: it answers 503 to requests on the connections already
  admitted, and requests are bounded by common/limits.py's `max_concurrent_requests`.

**Shutdown.** On SIGTERM uvicorn closes each idle keep-alive connection with `transport.close()`. Over TLS
that is a polite close: asyncio sends close_notify and keeps the connection until the peer answers with its
own, or for ssl_shutdown_timeout (30 s). A client that keeps the connection idle in its pool (the BBS's
httpx client to the auctioneer, the auctioneer's aiohttp client to the reps) reads nothing until its next
request, so it never answers, and the server's graceful shutdown waited out its whole timeout: a stopped
auctioneer exited only after 10 s, or was killed first. Idle connections carry no request: dropping them
(`abort`) loses nothing, and the client's pool discards the dead connection when it next reaches for it,
as with any server that closes idle connections.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .limits import RequestLimitOptions

log = logging.getLogger("serving")

STARTUP_FAILURE = 3  # uvicorn's exit status when it cannot listen
WS_MAX_BYTES = 64 * 1024  # a WebSocket message, at most (common/exec_stream.py's frames are smaller)


class Config(uvicorn.Config):
    """uvicorn's Config, carrying the connection limits (`limits`: a service's settings) to the server and
    its protocol; HTTP parsed by ConnectionProtocol unless `http` names another (a subclass of it)."""

    def __init__(self, app: Any, *, limits: RequestLimitOptions | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("http", ConnectionProtocol)
        # The one WebSocket, `vendue exec`'s, carries frames of at most CHUNK_BYTES and small JSON: a
        # bigger message is refused as it arrives, not gathered (uvicorn's default would take 16 MiB).
        kwargs.setdefault("ws_max_size", WS_MAX_BYTES)
        super().__init__(app, **kwargs)
        self.limits = limits or RequestLimitOptions()
        self.max_connections = self.limits.max_connections


def connection_limits(config: uvicorn.Config) -> RequestLimitOptions:
    limits = getattr(config, "limits", None)
    return limits if isinstance(limits, RequestLimitOptions) else RequestLimitOptions()


def max_connections(config: uvicorn.Config) -> int:
    return getattr(config, "max_connections", None) or connection_limits(config).max_connections


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a hard limit the kernel will not take (above nr_open): keep ours
            pass
    return soft


class ConnectionProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the connection cap and the header timeout (see the module's
    docstring)."""

    _refused = False
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= max_connections(self.config):
            self._refused = True
            self.transport = transport
            transport.abort()
            return
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._refused:
            return
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a later request on a kept-alive connection: timed from its first byte
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(
            connection_limits(self.config).header_timeout, self._head_timed_out
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm_head_timer()  # a pipelined head waits behind a request being answered: not its fault
            return
        if not self.transport.is_closing():
            # debug: one line per connection would let a flood of idle connections flood the log too
            log.debug("no request head in time: connection closed", extra={"data": {
                "client": f"{self.client[0]}:{self.client[1]}" if self.client else "",
                "header_timeout_s": connection_limits(self.config).header_timeout}})
            self.transport.abort()


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
    """uvicorn's server with the TLS handshake timed and the connections capped (see the module's
    docstring), whose shutdown drops idle connections at once, then lets requests in progress finish
    within the graceful timeout as uvicorn does."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own startup, but for asyncio's ssl_handshake_timeout, which it does not pass on.
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        config = self.config
        limits = connection_limits(config)
        open_files = raise_open_files_limit()
        cap = limits.max_connections
        if open_files != resource.RLIM_INFINITY and cap > open_files // 2:
            cap = open_files // 2
            log.warning("max_connections held to half the open-file limit", extra={"data": {
                "max_connections": limits.max_connections, "open_files": open_files, "cap": cap}})
        config.max_connections = cap  # type: ignore[attr-defined]

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop
            )

        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if config.ssl is not None:
            tls = {"ssl": config.ssl, "ssl_handshake_timeout": limits.tls_handshake_timeout}
        if sockets is not None:
            self.servers = [
                await loop.create_server(create_protocol, sock=sock, backlog=config.backlog, **tls)
                for sock in sockets
            ]
        else:
            try:
                server = await loop.create_server(
                    create_protocol, host=config.host, port=config.port, backlog=config.backlog, **tls
                )
            except OSError as exc:
                log.error("cannot listen", extra={"data": {"host": config.host, "port": config.port,
                                                           "error": str(exc)}})
                await self.lifespan.shutdown()
                sys.exit(STARTUP_FAILURE)
            self.servers = [server]
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        drop_idle_connections(self)
        await super().shutdown(sockets)
