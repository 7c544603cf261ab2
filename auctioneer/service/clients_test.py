"""RepClients against real local HTTP servers (no mocks): answers, refusals and timeouts."""

import asyncio

import pytest

from auctioneer.service.clients import RepClients, RepUnreachable
from common.procutil import free_port

pytestmark = pytest.mark.timeout(30)


async def _server(handler) -> tuple[asyncio.base_events.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_get_and_post_answer_status_and_body_over_kept_alive_connections():
    connections = 0
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            requests.append(head.split(b" ")[0] + b" " + body)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")
            await writer.drain()
            if reader.at_eof():
                break

    server, url = await _server(handler)
    async with server, RepClients(max_connections=4) as reps:
        assert await reps.get(url + "/state") == (200, b"{}")
        for _ in range(3):
            assert await reps.post_json(url + "/work", b'{"lrps":[]}') == (200, b"{}")
    assert requests == [b"GET ", *[b'POST {"lrps":[]}'] * 3]
    assert connections == 1, f"expected one kept-alive connection, saw {connections}"


async def test_a_refused_connection_is_unreachable_and_a_silent_rep_times_out():
    async with RepClients() as reps:
        with pytest.raises(RepUnreachable):
            await reps.get(f"http://127.0.0.1:{free_port()}/state")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers

    server, url = await _server(silent)
    async with server, RepClients() as reps:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await reps.get(url + "/state", timeout=0.3)
        assert loop.time() - started < 5, "the timeout bounds the request"
