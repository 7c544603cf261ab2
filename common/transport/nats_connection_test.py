"""The NATS connection helper against a real nats-server: retry while unreachable, reconnect for ever."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.aio.client import DEFAULT_MAX_RECONNECT_ATTEMPTS

from common.procutil import free_port
from common.transport.nats_connection import NatsConnection, redact
from common.transport.nats_server import NatsServer
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)
WAIT_S = 15.0


def test_log_lines_never_show_credentials():
    assert redact("nats://user:pw@10.0.0.1:4222") == "nats://***@10.0.0.1:4222"
    assert redact("nats://tok@a:1,nats://b:2") == "nats://***@a:1,nats://b:2"
    assert redact("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


async def test_unreachable_at_start_logs_retries_then_connects_and_runs_the_on_connect_callbacks(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="common.nats")
    server = NatsServer(port=free_port(), token="t0k", log_path=tmp_path / "nats.log")
    conn = NatsConnection(server.url, name="test", token="t0k", max_backoff=0.2)
    subscribed = asyncio.Event()

    async def on_connect(nc) -> None:
        subscribed.set()

    conn.on_connect(on_connect)
    conn.start()
    try:
        await eventually(lambda: conn.failed_attempts >= 2, WAIT_S, "two failed attempts", conn.status)
        assert not conn.connected
        unreachable = [
            r for r in caplog.records if r.getMessage() == "NATS unreachable; retrying with backoff"
        ]
        assert len(unreachable) == 1, "expected one log line while unreachable, not one per attempt"
        assert "t0k" not in caplog.text
        server.start()
        await conn.wait_connected(15)
        assert conn.connected and subscribed.is_set()
    finally:
        await conn.close()
        server.stop()


async def test_a_server_restart_is_survived_and_subscriptions_come_back(tmp_path):
    server = NatsServer(log_path=tmp_path / "nats.log").start()
    conn = NatsConnection(server.url, name="test")
    received: list[bytes] = []
    conn.start()
    try:
        await conn.wait_connected(10)
        nc = conn.client

        async def on_msg(msg) -> None:
            received.append(msg.data)

        await nc.subscribe("vendue.test", cb=on_msg)
        await nc.flush()
        server.kill()
        await eventually(lambda: not conn.connected,
                         WAIT_S, "the connection to notice the server died", conn.status)
        assert not await conn.until_connected(0.05)
        server.start()
        assert await conn.until_connected(15), f"expected a reconnect; saw {conn.status()}"
        await nc.publish("vendue.test", b"after restart")
        await eventually(lambda: received == [b"after restart"], WAIT_S, "the message after the restart",
                         lambda: received)
        assert conn.reconnects == 1 and conn.disconnects == 1
    finally:
        await conn.close()
        server.stop()


async def test_an_outage_longer_than_nats_py_s_reconnect_limit_is_survived(tmp_path):
    # nats-py gives a connection up after DEFAULT_MAX_RECONNECT_ATTEMPTS failed tries unless told not to;
    # a server that `vendue up` restarts with backoff may be away for that long. A short wait between
    # tries makes those tries take seconds here.
    server = NatsServer(log_path=tmp_path / "nats.log").start()
    conn = NatsConnection(server.url, name="test", reconnect_wait=0.02)
    conn.start()
    try:
        await conn.wait_connected(10)
        server.kill()
        await eventually(lambda: conn.reconnect_failures > 2 * DEFAULT_MAX_RECONNECT_ATTEMPTS, WAIT_S,
                         "more failed reconnect attempts than nats-py's default limit", conn.status)
        assert not conn.client.is_closed, f"expected the client still trying; saw {conn.status()}"
        server.start()
        assert await conn.until_connected(WAIT_S), f"expected a reconnect; saw {conn.status()}"
    finally:
        await conn.close()
        server.stop()
