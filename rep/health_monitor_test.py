"""The health monitor against servers in the test's own event loop: what each check calls healthy, what it
says failed, the threshold, and that a blocked loop is no failure."""

from __future__ import annotations

import asyncio
import errno
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from common.models import HealthCheck
from tests.support.polling import eventually

from . import health_monitor
from .health_monitor import INCONCLUSIVE, JITTER, LATE_S, HealthMonitor, Target, check_once

pytestmark = pytest.mark.timeout(30)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A server on 127.0.0.1 in this loop: (its port, the request lines it received)."""
    requests: list[bytes] = []

    async def recorded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            requests.append(line)
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(recorded, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], requests
    finally:
        server.close()


async def holds(condition: Callable[[], bool], duration: float, what: str) -> None:
    """`condition` true at every look for `duration` seconds, the loop running meanwhile."""
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    while loop.time() < end:
        assert condition(), f"expected {what} to hold for {duration:g}s"
        await asyncio.sleep(0.02)


def answering(status: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    return handler


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(port: int, path: str = "/health") -> Target:
    return Target("http", 8080, port, path)


async def test_a_port_check_passes_on_a_listener_and_says_refused_without_one() -> None:
    async def nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    async with serving(nothing) as (port, _):
        assert await check_once(Target("port", 8080, port), 1.0) is None
    assert await check_once(Target("port", 8080, closed_port()), 1.0) == "port 8080: connection refused"


@pytest.mark.parametrize("status", [b"200 OK", b"204 No Content", b"302 Found"])
async def test_an_http_check_passes_on_2xx_and_3xx_with_one_http_1_0_get(status: bytes) -> None:
    async with serving(answering(status)) as (port, requests):
        assert await check_once(http(port), 1.0) is None
    assert requests == [b"GET /health HTTP/1.0\r\n"]


@pytest.mark.parametrize(("handler", "reason"), [
    (answering(b"503 Service Unavailable"), "status 503"),
    (answering(b"404 Not Found"), "status 404"),
    (silent, "timed out after 0.3s"),
])
async def test_an_http_check_says_what_failed(handler: Handler, reason: str) -> None:
    async with serving(handler) as (port, _):
        assert await check_once(http(port), 0.3) == f"http GET /health on port 8080: {reason}"


async def test_an_http_check_refused_or_answered_with_something_else() -> None:
    assert await check_once(http(closed_port()), 1.0) == "http GET /health on port 8080: connection refused"

    async def ssh(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()

    async with serving(ssh) as (port, _):
        assert await check_once(http(port), 1.0) == "http GET /health on port 8080: not an HTTP response"


async def test_an_http_server_that_answers_and_keeps_the_connection_is_judged_on_its_status() -> None:
    async def keeps(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(3600)

    async with serving(keeps) as (port, _):
        assert await check_once(http(port), 0.3) is None


async def test_a_process_check_is_whether_the_process_lives() -> None:
    assert await check_once(Target("process", alive=lambda: True), 1.0) is None
    assert await check_once(Target("process", alive=lambda: False), 1.0) == "process: not running"


def test_an_instance_without_ports_is_checked_as_a_process() -> None:
    assert Target.of(HealthCheck(type="port"), [], lambda: True).kind == "process"
    target = Target.of(HealthCheck(type="http", path="/h"), [(8080, 61000), (9090, 61001)], lambda: True)
    assert (target.kind, target.container_port, target.port, target.path, target.address) == (
        "http", 8080, 61000, "/h", "127.0.0.1")


async def test_a_check_given_an_address_connects_to_it_at_the_container_port() -> None:
    """A container's check goes to its own address, as kubelet probes a pod's: a listener on another
    loopback address stands for it (nothing listens on 127.0.0.1 at that port)."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.2", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        ports = [(port, closed_port())]
        target = Target.of(HealthCheck(type="port"), ports, lambda: True, address="127.0.0.2")
        assert (target.address, target.port) == ("127.0.0.2", port)
        assert await check_once(target, 1.0) is None
        away = Target.of(HealthCheck(type="port"), ports, lambda: True)
        assert await check_once(away, 1.0) == f"port {port}: connection refused", "the host port: nothing"


async def test_a_timeout_that_fires_late_because_the_loop_was_blocked_is_inconclusive() -> None:
    async def blocks_the_loop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        time.sleep(0.3 + 2 * LATE_S)  # the rep's loop stalled well past the check's deadline

    async with serving(blocks_the_loop) as (port, _):
        assert await check_once(http(port), 0.3) == INCONCLUSIVE


def check(**fields: float) -> HealthCheck:
    return HealthCheck(**{"interval_s": 0.1, "invocation_timeout_s": 0.3, **fields})  # type: ignore[arg-type]


async def test_failure_threshold_failures_in_a_row_stop_it_once_with_the_reason() -> None:
    failures: list[str] = []
    monitor = HealthMonitor()
    async with serving(answering(b"500 Internal Server Error")) as (port, requests):
        monitor.watch("i", check(failure_threshold=3), http(port), failures.append)
        await eventually(lambda: failures, 10.0, "a failure", lambda: requests)
        await holds(lambda: len(failures) == 1, 0.5, "one report, no second")
    assert failures == ["http GET /health on port 8080: status 500"]
    assert len(requests) == 3, "three checks, each failed"
    assert len(monitor) == 0, "no longer watched"


async def test_a_passing_check_resets_the_count() -> None:
    answers = iter([b"500 x", b"200 OK"] * 20)
    failures: list[str] = []

    async def alternating(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answering(next(answers, b"200 OK"))(reader, writer)

    monitor = HealthMonitor()
    async with serving(alternating) as (port, requests):
        monitor.watch("i", check(failure_threshold=2), http(port), failures.append)
        await eventually(lambda: len(requests) >= 12, 10.0, "a dozen checks", lambda: len(requests))
        await monitor.close()
    assert failures == []


async def test_a_blocked_loop_is_no_failure_and_the_check_runs_again_soon() -> None:
    failures: list[str] = []
    answered_once = False

    async def stalls_then_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered_once
        if not answered_once:
            answered_once = True
            time.sleep(0.3 + 2 * LATE_S)
            return
        await answering(b"200 OK")(reader, writer)

    monitor = HealthMonitor()
    async with serving(stalls_then_answers) as (port, requests):
        monitor.watch("i", check(interval_s=30, failure_threshold=1), http(port), failures.append)
        monitor._schedule(monitor._watches["i"], asyncio.get_running_loop().time())  # due now, not in 30 s
        await eventually(lambda: len(requests) == 2, 10.0, "a second check", lambda: requests)
        await eventually(lambda: monitor.checks == 2, 10.0, "two checks done", lambda: monitor.checks)
        assert (failures, monitor.inconclusive) == ([], 1)
        await monitor.close()


async def test_checks_come_no_later_than_the_interval_and_unwatch_stops_them() -> None:
    monitor = HealthMonitor(rng=random.Random(7))
    intervals = [monitor._interval(HealthCheck(interval_s=10)) for _ in range(1000)]
    assert 10 * (1 - JITTER) <= min(intervals) and max(intervals) <= 10
    assert max(intervals) - min(intervals) > 10 * JITTER / 2, "spread, not one phase for all"

    async with serving(answering(b"200 OK")) as (port, requests):
        monitor.watch("i", check(), http(port), lambda reason: None)
        await eventually(lambda: len(requests) >= 2, 10.0, "checks", lambda: requests)
        monitor.unwatch("i")
        seen = len(requests)
        await holds(lambda: len(requests) <= seen + 1, 0.3, "no check after unwatch")


async def test_a_check_the_rep_cannot_make_is_no_failure_of_the_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_descriptor_left(*args: object) -> socket.socket:
        raise OSError(errno.EMFILE, "Too many open files")

    port = closed_port()
    monkeypatch.setattr(health_monitor.socket, "socket", no_descriptor_left)
    assert await check_once(Target("port", 8080, port), 1.0) == INCONCLUSIVE
    assert await check_once(http(port), 1.0) == INCONCLUSIVE


async def test_a_check_that_raises_neither_crashes_the_instance_nor_ends_its_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(target: Target, timeout_s: float) -> str | None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(health_monitor, "check_once", broken)
    failures: list[str] = []
    monitor = HealthMonitor()
    monitor.watch("i", check(invocation_timeout_s=0.1), Target("process"), failures.append)
    await eventually(lambda: monitor.inconclusive >= 3, 10.0, "three checks, each inconclusive",
                     lambda: monitor.inconclusive)
    assert failures == [] and len(monitor) == 1
    await monitor.close()
