"""The connection limits of common/serving.py on a real server over TLS on loopback: a connection that
sends no request head, or half of one, is closed after the header timeout; one that never starts TLS
after the handshake timeout; one beyond the connection cap at once, while those admitted are served."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from common.auth import uvicorn_tls_options
from common.limits import RequestLimitOptions
from common.serving import Config, Server
from common.tls import TLSFiles, client_context, init_ca, issue, server_context
from tests.support.connections import closed_within
from tests.support.polling import eventually

SHORT_S = 0.5  # the timeout under test
LONG_S = 60.0  # a timeout not under test
WAIT_S = 5.0  # far beyond SHORT_S: a connection still open then was not closed by it


async def ping(_request: object) -> PlainTextResponse:
    return PlainTextResponse("pong")


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    init_ca(tmp_path)
    issue(tmp_path, role="bbs", name="server", sans=["127.0.0.1"])
    issue(tmp_path, role="admin", name="admin")
    return tmp_path


@asynccontextmanager
async def serving(pki: Path, limits: RequestLimitOptions) -> AsyncIterator[tuple[Server, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = Config(Starlette(routes=[Route("/ping", ping)]), limits=limits, log_config=None, lifespan="off",
                    timeout_graceful_shutdown=1, timeout_keep_alive=int(LONG_S),
                    **uvicorn_tls_options(server_context(TLSFiles.in_dir(pki, "server"))))
    server = Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started or task.done(), WAIT_S, "the server serving", lambda: task)
    assert server.started, f"the server stopped: {task}"
    try:
        yield server, port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, WAIT_S)


def client_tls(pki: Path) -> ssl.SSLContext:
    return client_context(TLSFiles.in_dir(pki, "admin"))


async def get_ping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /ping HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sent", [b"", b"GET /pi"], ids=["nothing", "half a request line"])
async def test_a_connection_without_a_request_head_is_closed_after_the_header_timeout(
    pki: Path, sent: bytes
) -> None:
    limits = RequestLimitOptions(header_timeout=SHORT_S, tls_handshake_timeout=LONG_S)
    async with serving(pki, limits) as (_server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls(pki))
        try:
            writer.write(sent)
            await writer.drain()
            assert await closed_within(reader, WAIT_S), f"expected the connection closed after {SHORT_S} s"
        finally:
            writer.close()


@pytest.mark.timeout(60)
async def test_half_a_request_after_a_served_one_is_closed_after_the_header_timeout(pki: Path) -> None:
    """A kept-alive connection: its idle wait is timeout_keep_alive's (long here), but once the next
    request has begun its head has header_timeout."""
    limits = RequestLimitOptions(header_timeout=SHORT_S, tls_handshake_timeout=LONG_S)
    async with serving(pki, limits) as (_server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls(pki))
        try:
            assert await get_ping(reader, writer) == b"HTTP/1.1 200 OK"
            await reader.readexactly(len(b"pong"))
            writer.write(b"GET /ping HTTP/1.1\r\nhost: 127.0")
            await writer.drain()
            assert await closed_within(reader, WAIT_S), f"expected the connection closed after {SHORT_S} s"
        finally:
            writer.close()


@pytest.mark.timeout(60)
async def test_a_connection_that_never_starts_tls_is_closed_after_the_handshake_timeout(pki: Path) -> None:
    limits = RequestLimitOptions(header_timeout=LONG_S, tls_handshake_timeout=SHORT_S)
    async with serving(pki, limits) as (_server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await closed_within(reader, WAIT_S), f"expected the connection closed after {SHORT_S} s"
        finally:
            writer.close()


@pytest.mark.timeout(60)
async def test_a_connection_beyond_the_cap_is_closed_while_those_admitted_are_served(pki: Path) -> None:
    cap = 3
    limits = RequestLimitOptions(header_timeout=LONG_S, tls_handshake_timeout=LONG_S, max_connections=cap)
    async with serving(pki, limits) as (server, port):
        admitted = [await asyncio.open_connection("127.0.0.1", port, ssl=client_tls(pki)) for _ in range(cap)]
        try:
            await eventually(lambda: len(server.server_state.connections) == cap, WAIT_S,
                             f"{cap} connections served")
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls(pki))
            except (ConnectionError, ssl.SSLError):
                pass  # refused during the handshake's last step: as good
            else:
                try:
                    assert await closed_within(reader, WAIT_S), "expected the connection past the cap closed"
                finally:
                    writer.close()
            assert len(server.server_state.connections) == cap
            for reader, writer in admitted:
                assert await get_ping(reader, writer) == b"HTTP/1.1 200 OK"
        finally:
            for _, writer in admitted:
                writer.close()
