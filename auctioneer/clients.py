"""The HTTP client the auctioneer talks to reps with: aiohttp, keep-alive connections, one session.

Every other HTTP client in Vendue is httpx; this one is not, for speed. An auction makes one state
request and one work request per rep process (2,000 requests at 1,000 one-cell reps), and here httpx spends
1.4-3 ms of CPU per request (anyio, the pure-Python h11 parser, and a connection pool that rescans
its connections for every request it queues) where aiohttp, with its C parser, spends 0.2-0.3 ms
(measured on this 2-core machine, 2,000 GETs of a 10 KB state against uvicorn). At 1,000 cells that
is the difference between a state fetch well under a second and one of several seconds.

The interface is two calls that answer (status, body) or raise `RepUnreachable` / `TimeoutError`, so
the fetcher and the dispatcher do not depend on which client library is underneath.

Over TLS the session presents the auctioneer's certificate and trusts only the cluster CA (the context is
built once by the service and shared: common.tls.client_context). A handshake costs more than the request
it opens for, so connections are pooled and kept alive; `connections_opened` counts the new ones (each a
handshake over TLS), and /v1/stats shows it as `rep_connections_opened`.

Over TLS, a request made for some cells (`cells=`) goes out only once the connection it is given, new or
pooled, shows the server's certificate to be the rep of those cells (common.tls.rep_refusal): a rep_url is
whatever the rep heartbeated, and must not lead the auctioneer, presenting its certificate, elsewhere.
"""

from __future__ import annotations

import contextvars
import ssl
from collections.abc import Iterable
from functools import cache
from typing import Any, NamedTuple

import aiohttp
import httpx
from aiohttp.client_proto import ResponseHandler
from aiohttp.tracing import Trace

from common.tls import peer_rep_refusal


@cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context (the system's CAs, no client certificate) for an auctioneer without TLS
    files of its own: building one loads the CA bundle (~0.1 s each)."""
    return httpx.create_ssl_context(trust_env=False)


# Idle connections are kept this long: auctions come every few seconds under load, and a 1,000-cell
# fetch that has to open 1,000 connections again costs about twice as much. Reps keep them longer
# (rep/main.py), so the rep never closes a connection the auctioneer is about to reuse.
KEEPALIVE_S = 60.0


class RepResponse(NamedTuple):
    status_code: int
    content: bytes


class RepUnreachable(Exception):
    """The rep refused the connection, reset it, or answered something that is not HTTP (or is not the rep of
    the cells the request was for)."""


class NotTheRep(aiohttp.ClientConnectionError):
    """The server at a rep_url is not the rep of the cells the request is for: nothing was sent."""


# The cells the request this task is making is for (None: no check), read by the connector.
_EXPECTED_CELLS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "auctioneer_expected_rep_cells", default=None
)


class RepClients:
    """Pooled connections to every rep, at most `max_connections` open at once."""

    def __init__(
        self, max_connections: int = 256, timeout: float = 10.0, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """`ssl_context`: for https rep URLs (common.tls.client_context: our certificate, the cluster CA)."""
        self.max_connections = max_connections
        self.timeout = timeout
        self.ssl_context = ssl_context
        # Reps are checked when the auctioneer calls them with the cluster's context (its certificate): the
        # system's (tls_context, no certificate of ours) lends no identity, and no rep certificate verifies.
        self._check_reps = ssl_context is not None and ssl_context is not tls_context()
        self.connections_opened = 0  # new connections (over TLS: handshakes), not reused ones
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use: an aiohttp session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = _CountingConnector(
                self, limit=self.max_connections, limit_per_host=0, ssl=self.ssl_context or tls_context(),
                ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S,
            )
            # trust_env=False: the control plane talks to its peers directly, never through a proxy.
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
        return self._session

    async def get(self, url: str, *, timeout: float | None = None, cells: Iterable[str] | None = None,
                  ) -> RepResponse:
        """GET from the rep of `cells` (over TLS its certificate must name each of them)."""
        return await self._request("GET", url, None, timeout, cells)

    async def post_json(self, url: str, body: bytes, *, timeout: float | None = None,
                        cells: Iterable[str] | None = None) -> RepResponse:
        """POST to the rep of `cells` (over TLS its certificate must name each of them)."""
        return await self._request("POST", url, body, timeout, cells)

    async def _request(self, method: str, url: str, body: bytes | None, timeout: float | None,
                       cells: Iterable[str] | None) -> RepResponse:
        headers = {"content-type": "application/json"} if body is not None else None
        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout)
        expected = _EXPECTED_CELLS.set(tuple(cells) if cells is not None and self._check_reps else None)
        try:
            async with self._open().request(
                method, url, data=body, headers=headers, timeout=limit
            ) as response:
                return RepResponse(response.status, await response.read())
        except TimeoutError:
            raise
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL aiohttp cannot use
            raise RepUnreachable(_describe(exc)) from exc
        finally:
            _EXPECTED_CELLS.reset(expected)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> RepClients:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _CountingConnector(aiohttp.TCPConnector):
    """Counts the connections it opens into `RepClients.connections_opened`. Not a TraceConfig: a session
    with one builds trace objects and awaits its signals on every request (~15 us of CPU each, measured),
    where this costs nothing on a reused connection. `_create_connection` is aiohttp's own seam for a new
    connection (the same signature throughout 3.x)."""

    def __init__(self, clients: RepClients, **options: Any) -> None:
        super().__init__(**options)
        self._clients = clients

    async def _create_connection(
        self, req: aiohttp.ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        protocol = await super()._create_connection(req, traces, timeout)
        self._clients.connections_opened += 1
        return protocol

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.connector.Connection:
        """A connection, new or pooled, for `req`; checked before anything is sent on it: a pooled one to a
        rep_url may be reused for a request about other cells."""
        connection = await super().connect(req, traces, timeout)
        cells = _EXPECTED_CELLS.get()
        if cells is not None and connection.transport is not None:
            refusal = peer_rep_refusal(connection.transport.get_extra_info("ssl_object"), cells)
            if refusal is not None:
                connection.close()
                raise NotTheRep(f"refused to talk to the rep of {', '.join(cells)}: {refusal}")
        return connection


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
