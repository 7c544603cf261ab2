"""RepClients against real local HTTP(S) servers (no mocks): answers, refusals, timeouts, and over TLS the
auctioneer's certificate on kept-alive connections."""

import asyncio

import pytest
from fastapi import FastAPI, Request

from auctioneer.clients import RepClients, RepUnreachable
from common.procutil import free_port
from common.tls import TLSFiles, client_context, init_ca, issue, server_context
from tests.auctioneer.fakes import caller_of, serving
from tests.support.polling import finishes

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
    # The clients' own timeout is an hour: only the request's (0.3 s) can end it before the test's bound.
    async with server, RepClients(timeout=3600.0) as reps:
        with pytest.raises(TimeoutError):
            await finishes(reps.get(url + "/state", timeout=0.3), 10.0, "the request's timeout to end it")


async def test_over_tls_reps_see_the_auctioneers_certificate_and_connections_are_reused(tmp_path):
    init_ca(tmp_path)
    issue(tmp_path, role="rep", name="cell-1", cells=["cell-1"])
    issue(tmp_path, role="auctioneer", name="auctioneer")
    callers: list[str] = []
    rep = FastAPI()

    @rep.get("/state")
    async def state(request: Request) -> dict:
        callers.append(caller_of(request))
        return {}

    @rep.post("/work")
    async def work(request: Request) -> dict:
        callers.append(caller_of(request))
        return {}

    auctioneer_tls = client_context(TLSFiles.in_dir(tmp_path, "auctioneer"))
    async with serving(rep, server_context(TLSFiles.in_dir(tmp_path, "cell-1"))) as url, \
            RepClients(max_connections=4, ssl_context=auctioneer_tls) as reps:
        assert url.startswith("https://")
        for _ in range(3):  # three auctions' worth, one after the other: one handshake in all
            assert await reps.get(url + "/state") == (200, b"{}")
            assert await reps.post_json(url + "/work", b"{}") == (200, b"{}")
        assert reps.connections_opened == 1, f"expected one handshake, saw {reps.connections_opened}"
        # Two at once need two connections: the counter counts every new one.
        await asyncio.gather(reps.get(url + "/state"), reps.get(url + "/state"))
        assert reps.connections_opened == 2
    assert callers == ["auctioneer 'auctioneer'"] * 8


async def test_a_rep_with_a_certificate_from_another_ca_is_unreachable(tmp_path):
    init_ca(tmp_path)
    issue(tmp_path, role="auctioneer", name="auctioneer")
    init_ca(tmp_path / "other")
    issue(tmp_path / "other", role="rep", name="cell-1", cells=["cell-1"])
    rep = FastAPI()

    @rep.get("/state")
    async def state() -> dict:
        return {}

    async with serving(rep, server_context(TLSFiles.in_dir(tmp_path / "other", "cell-1"))) as url, \
            RepClients(ssl_context=client_context(TLSFiles.in_dir(tmp_path, "auctioneer"))) as reps:
        with pytest.raises(RepUnreachable, match="certificate verify failed"):
            await reps.get(url + "/state")
