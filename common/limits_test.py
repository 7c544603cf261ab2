"""The request limits against a real uvicorn server on loopback: bodies are sent over raw sockets, so what
the server does before it has the whole body is seen as a client on the wire sees it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from common.limits import DISCARD_LIMIT_BYTES, MIB, RequestLimitOptions, add_limits
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)

STREAM_CHUNKS, STREAM_PACE_S = 8, 0.1
WAIT_S = 10.0


@dataclass
class Seen:
    """What the app behind the limits did."""

    bodies: list[int] = field(default_factory=list)  # sizes of the bodies it read whole
    hanging: int = 0  # requests inside /hang now
    cancelled: int = 0  # /hang requests cancelled
    release: asyncio.Event = field(default_factory=asyncio.Event)


def make_app(options: RequestLimitOptions, seen: Seen) -> FastAPI:
    app = FastAPI()

    @app.post("/small")
    @app.post("/bulk")
    async def take(request: Request) -> dict[str, int]:
        body = await request.body()
        seen.bodies.append(len(body))
        return {"bytes": len(body)}

    @app.get("/hang")
    async def hang() -> dict[str, bool]:
        seen.hanging += 1
        try:
            await seen.release.wait()
        except asyncio.CancelledError:
            seen.cancelled += 1
            raise
        finally:
            seen.hanging -= 1
        return {"released": True}

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> AsyncIterator[str]:
            for i in range(STREAM_CHUNKS):  # the stream lasts longer than the request timeout
                yield f"chunk {i}\n"
                await asyncio.sleep(STREAM_PACE_S)

        return StreamingResponse(chunks(), media_type="text/plain")

    @app.put("/streamed/{name}")
    async def streamed(request: Request) -> dict[str, int]:
        size = 0
        async for part in request.stream():
            size += len(part)
        seen.bodies.append(size)
        return {"bytes": size}

    add_limits(app, options, bulk={("POST", "/bulk")}, streamed={("PUT", "/streamed/")})
    return app


@contextlib.asynccontextmanager
async def serving(options: RequestLimitOptions, seen: Seen) -> AsyncIterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_app(options, seen), log_config=None, lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), WAIT_S, "uvicorn started", lambda: task)
        assert server.started, f"expected uvicorn to start; it ended: {task}"
        yield "127.0.0.1", port
    finally:
        seen.release.set()
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    headers = {k.lower(): v for k, v in headers.items()}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    return int(lines[0].split()[1]), headers, json.loads(body)


async def test_a_declared_body_over_the_cap_is_413_before_the_app_reads_any_of_it() -> None:
    seen = Seen()
    async with serving(RequestLimitOptions(), seen) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"POST /small HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     f"content-length: {10 * MIB}\r\n\r\n".encode() + b"x" * 65536)
        await writer.drain()
        status, _, body = await read_response(reader)  # with 64 KiB of the 10 MiB sent
        assert status == 413 and f"larger than {MIB} bytes (--max-body-bytes)" in body["detail"], (
            status,
            body,
        )
        writer.close()
    assert seen.bodies == [], "the app read a body the cap refused"


async def test_a_client_that_sends_the_whole_body_first_reads_the_413_on_a_connection_it_keeps() -> None:
    seen = Seen()
    async with serving(RequestLimitOptions(), seen) as (host, port), \
            httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as http:
        refused = await http.post("/small", content=b"x" * (10 * MIB))
        assert refused.status_code == 413 and "(--max-body-bytes)" in refused.json()["detail"], refused.text
        assert (await http.post("/small", content=b"{}")).status_code == 200
    assert seen.bodies == [2]


async def test_a_body_declared_past_the_discard_limit_is_cut_off() -> None:
    seen = Seen()
    async with serving(RequestLimitOptions(), seen) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"POST /small HTTP/1.1\r\nhost: x\r\ncontent-length: {DISCARD_LIMIT_BYTES + 1}\r\n\r\n".encode()
        )
        await writer.drain()
        status, headers, _ = await read_response(reader)
        assert (status, headers.get("connection")) == (413, "close"), (status, headers)
        assert await asyncio.wait_for(reader.read(), 10) == b"", "expected the server to close the connection"
        writer.close()
    assert seen.bodies == []


async def test_a_chunked_body_is_counted_as_it_arrives_and_refused_past_the_cap() -> None:
    seen = Seen()
    attempted = 64 * MIB
    async with serving(RequestLimitOptions(), seen) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /small HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"  # 64 KiB chunks
        response = asyncio.ensure_future(read_response(reader))
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < attempted and not response.done():
                writer.write(chunk)
                await writer.drain()
                sent += 0x10000
        status, _, body = await response
        writer.close()
    assert status == 413 and "(--max-body-bytes)" in body["detail"], (status, body)
    assert sent < attempted, f"expected the 413 before the whole {attempted}-byte body was sent, sent {sent}"
    assert seen.bodies == []


async def test_bulk_routes_take_the_bulk_cap_and_the_others_the_small_one() -> None:
    seen = Seen()
    options = RequestLimitOptions(max_body_bytes=MIB, max_bulk_body_bytes=4 * MIB)
    async with (
        serving(options, seen) as (host, port),
        httpx.AsyncClient(base_url=f"http://{host}:{port}") as http,
    ):
        taken = await http.post("/bulk", content=b"x" * (2 * MIB))
        assert taken.status_code == 200 and taken.json() == {"bytes": 2 * MIB}, taken.text
        refused = await http.post("/bulk", content=b"x" * (5 * MIB))
        assert refused.status_code == 413 and "(--max-bulk-body-bytes)" in refused.json()["detail"], (
            refused.text
        )
        small = await http.post("/small", content=b"x" * (2 * MIB))
        assert small.status_code == 413 and "(--max-body-bytes)" in small.json()["detail"], small.text
    assert seen.bodies == [2 * MIB]


async def test_a_request_unanswered_within_the_timeout_is_504_and_its_work_cancelled() -> None:
    seen = Seen()
    async with serving(RequestLimitOptions(request_timeout=0.3), seen) as (host, port), \
            httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
        response = await http.get("/hang")
        assert response.status_code == 504 and "request timeout" in response.json()["detail"], response.text
        await eventually(lambda: seen.cancelled == 1 and seen.hanging == 0, WAIT_S,
                         "the hanging handler to be cancelled", lambda: seen)


async def test_past_the_concurrency_limit_a_request_is_503_with_retry_after_and_probes_still_answer() -> None:
    seen = Seen()
    async with serving(RequestLimitOptions(max_concurrent_requests=2), seen) as (host, port), \
            httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
        held = [asyncio.ensure_future(http.get("/hang")) for _ in range(2)]
        await eventually(lambda: seen.hanging == 2, WAIT_S, "two requests inside the app", lambda: seen)
        refused = await http.get("/hang")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
        assert "at most 2" in refused.json()["detail"]
        assert (await http.get("/ping")).status_code == 200  # a probe is neither counted nor refused
        seen.release.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
        assert (await http.post("/small", content=b"{}")).status_code == 200  # the slots are free again


async def test_a_stream_under_way_is_neither_timed_nor_counted() -> None:
    seen = Seen()
    options = RequestLimitOptions(request_timeout=STREAM_PACE_S * 2, max_concurrent_requests=1)
    async with serving(options, seen) as (host, port), \
            httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
        async with http.stream("GET", "/stream") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == "chunk 0"
            assert (await http.post("/small", content=b"{}")).status_code == 200  # the stream holds no slot
            rest = [line async for line in lines]
        assert rest == [f"chunk {i}" for i in range(1, STREAM_CHUNKS)], rest


async def test_a_streamed_route_bounds_its_own_body_and_is_timed_from_its_latest_part() -> None:
    seen = Seen()
    options = RequestLimitOptions(max_body_bytes=MIB, request_timeout=0.4)

    async def paced(parts: int, pause_s: float, stall_s: float = 0.0) -> AsyncIterator[bytes]:
        for n in range(parts):
            if n:
                await asyncio.sleep(pause_s)  # the client's own pace, what is under test
            yield b"x" * (MIB // 2)
        await asyncio.sleep(stall_s)
        yield b""

    async with serving(options, seen) as (host, port), \
            httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
        declared = await http.put("/streamed/a", content=b"x" * (3 * MIB))
        assert declared.status_code == 200 and declared.json() == {"bytes": 3 * MIB}, declared.text
        # 8 parts 0.2 s apart: 1.4 s in all, past the 0.4 s timeout, and never 0.4 s without a part.
        steady = await http.put("/streamed/b", content=paced(8, 0.2))
        assert steady.status_code == 200 and steady.json() == {"bytes": 4 * MIB}, steady.text
        stalled = await http.put("/streamed/c", content=paced(2, 0.1, stall_s=1.5))
        assert stalled.status_code == 504, stalled.text
        # Not streamed: the same body past the cap is refused.
        assert (await http.post("/small", content=b"x" * (3 * MIB))).status_code == 413
    assert seen.bodies == [3 * MIB, 4 * MIB]
