"""A real `vendue bbs` (uvloop, HTTPS) bounds its connections (common/serving.py): the flags reach the
server, and its event loop honours the handshake timeout, the header timeout and the connection cap."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest

from tests.support.bbs_process import BBSProcess
from tests.support.connections import closed_within
from tests.support.polling import eventually

WAIT_S = 5.0


def port_of(bbs: BBSProcess) -> int:
    return int(bbs.url.rsplit(":", 1)[1])


@pytest.mark.timeout(90)
async def test_the_bbs_closes_connections_without_a_request_head_or_tls(tmp_path: Path) -> None:
    bbs = BBSProcess(tmp_path, "timeouts", None, "--tls-handshake-timeout", "0.5", "--header-timeout", "0.5")
    try:
        assert isinstance(bbs.verify, ssl.SSLContext)
        port = port_of(bbs)
        for ssl_context, sent in ((None, b""), (bbs.verify, b""), (bbs.verify, b"GET /v1/desired_l")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl_context)
            try:
                writer.write(sent)
                await writer.drain()
                assert await closed_within(reader, WAIT_S), \
                    f"expected the BBS to close a connection (tls={ssl_context is not None}, sent {sent!r})"
            finally:
                writer.close()
    finally:
        bbs.stop()


@pytest.mark.timeout(90)
async def test_the_bbs_refuses_connections_beyond_its_cap_and_serves_those_it_holds(tmp_path: Path) -> None:
    cap = 3
    bbs = BBSProcess(tmp_path, "cap", None, "--max-connections", str(cap), "--header-timeout", "60")
    try:
        assert isinstance(bbs.verify, ssl.SSLContext)
        port = port_of(bbs)
        async with bbs.async_client(timeout=WAIT_S) as client:
            assert (await client.get("/v1/desired_lrps")).status_code == 200  # its connection: one of the cap
            idle = [await asyncio.open_connection("127.0.0.1", port, ssl=bbs.verify) for _ in range(cap - 1)]
            try:
                for reader, _ in idle:
                    assert not await closed_within(reader, 0.2), "expected a connection within the cap kept"
                refused = False
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=bbs.verify)
                except (ConnectionError, ssl.SSLError):
                    refused = True
                else:
                    try:
                        refused = await closed_within(reader, WAIT_S)
                    finally:
                        writer.close()
                assert refused, f"expected a connection beyond the cap of {cap} closed"
                response = await client.get("/v1/desired_lrps")
                assert response.status_code == 200, response.text
            finally:
                for _, writer in idle:
                    writer.close()
            # once they are gone, new connections are served again
            async def served() -> bool:
                async with bbs.async_client(timeout=WAIT_S) as fresh:
                    return (await fresh.get("/ping")).status_code == 200

            await eventually(served, WAIT_S * 2, "a new connection served below the cap",
                             retry_on=(httpx.TransportError,))
    finally:
        bbs.stop()
