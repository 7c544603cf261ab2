"""Continuous health checks: every RUNNING instance of the rep's cells checked for its whole life.

One scheduler per rep process, in its event loop: each watched instance has one `loop.call_at` timer, and
a due check is one short coroutine (no thread, no process, no HTTP client). The checks
(docs/health-checks.md):
- `port`: a TCP connect to 127.0.0.1:<host port>, or to a container's own address and port (closed with
  a reset: no TIME_WAIT left per check);
- `http`: `GET <path> HTTP/1.0` on that port; a 2xx or 3xx status line is healthy;
- `process`: the process is alive (its exit is reported by the executor as it happens, with its status).

Each check has `invocation_timeout_s`. After a healthy check the next is due `interval_s` later, up to
JITTER earlier (instances started together drift apart instead of being checked in bursts); after a failed
one the next starts one invocation timeout after it, so `failure_threshold` failures in a row are seen
within interval + timeout × threshold of the first. Then the instance's `on_failure` gets what failed
(`port 8080: connection refused`) and it is no longer watched.

A check that timed out while the event loop was blocked (its timeout fired LATE_S or more after it was
due) is not a failure: the instance had no fair chance to answer. Nor is a check the rep could not make
(no descriptor or memory left for a socket): the trouble is the rep's. Either counts as nothing and runs
again one invocation timeout later. A check that starts late (the timer fired late) starts its timeout
then, and so is not penalised.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import re
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from common.models import HealthCheck

log = logging.getLogger("rep.health")

JITTER = 0.1  # a fraction of the interval a check may come early
LATE_S = 0.25  # a timeout this late says the loop was blocked, not that the instance was slow
HTTP_READ_CAP = 64 * 1024  # read at most this much of a response (the status line is what counts)
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})(?: |\r?\n|$)")
# SO_LINGER on, 0 s: close() sends a reset, so a port check leaves no socket in TIME_WAIT on the rep.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


@dataclass(frozen=True, slots=True)
class Target:
    """What to check of one instance: `kind` port/http/process, its first port (the container port names it
    in a reason; the check connects to `address`:`port`) and whether its process is alive."""

    kind: str
    container_port: int = 0
    port: int = 0
    path: str = "/"
    alive: Callable[[], bool] = lambda: True
    address: str = "127.0.0.1"

    @classmethod
    def of(cls, check: HealthCheck, ports: list[tuple[int, int]], alive: Callable[[], bool],
           address: str | None = None) -> Target:
        """The first of `ports` (container, host): on the host's loopback at its host port, or with an
        `address` (a container's own, as kubelet probes a pod's) at its container port. An instance with no
        ports can only be checked as a process."""
        if check.type == "process" or not ports:
            return cls("process", alive=alive)
        container_port, host_port = ports[0]
        if address is not None:
            return cls(check.type, container_port, container_port, check.path, alive, address)
        return cls(check.type, container_port, host_port, check.path, alive)


# A check's outcome: healthy (None), what failed (a reason), or INCONCLUSIVE (the rep's trouble).
INCONCLUSIVE = "inconclusive"


class _RepTrouble(Exception):
    """The rep could not make the check: no socket for it."""


async def check_once(target: Target, timeout_s: float) -> str | None:
    """Run one check of `target` within `timeout_s`: None when healthy, else what failed, or
    INCONCLUSIVE when it timed out only because the event loop was blocked past its deadline, or the rep
    had no socket to make it with."""
    if target.kind == "process":
        return None if target.alive() else "process: not running"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen = bytearray()  # what an http check read so far: a status line read in time is the answer
    what = (f"port {target.container_port}" if target.kind == "port"
            else f"http GET {target.path} on port {target.container_port}")
    try:
        async with asyncio.timeout_at(deadline):
            if target.kind == "port":
                failure = await _connect(loop, target.address, target.port)
            else:
                failure = await _http_get(loop, target.address, target.port, target.path, seen)
    except _RepTrouble:
        return INCONCLUSIVE
    except TimeoutError:
        if loop.time() - deadline >= LATE_S:
            return INCONCLUSIVE
        if target.kind == "http" and seen:  # answered, and then kept the connection open
            failure = _status(seen)
        else:
            failure = f"timed out after {timeout_s:g}s"
    return None if failure is None else f"{what}: {failure}"


async def _connected(loop: asyncio.AbstractEventLoop, address: str, port: int) -> socket.socket:
    """A non-blocking socket connected to address:port (raises OSError). Not loop.sock_connect: uvloop's
    resolves even a numeric address through getaddrinfo, most of a check's CPU; on loopback the connect
    mostly completes or is refused at once, and otherwise the loop says when it has."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:  # EMFILE, ENFILE, ENOBUFS, ENOMEM: the rep's, not the instance's
        raise _RepTrouble(str(exc)) from exc
    try:
        sock.setblocking(False)
        error = sock.connect_ex((address, port))
        if error == errno.EINPROGRESS:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock.fileno(), _set_result, writable)
            try:
                await writable
            finally:
                loop.remove_writer(sock.fileno())
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise OSError(error, os.strerror(error))  # ECONNREFUSED makes a ConnectionRefusedError
    except BaseException:
        sock.close()
        raise
    return sock


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _os_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    return exc.strerror or type(exc).__name__


async def _connect(loop: asyncio.AbstractEventLoop, address: str, port: int) -> str | None:
    try:
        sock = await _connected(loop, address, port)
    except OSError as exc:
        return _os_error(exc)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    return None


async def _http_get(loop: asyncio.AbstractEventLoop, address: str, port: int, path: str,
                    seen: bytearray) -> str | None:
    """HTTP/1.0 GET, read until the server closes (or the cap): reading to the end spares the app a reset
    while it still writes its answer."""
    request = f"GET {path} HTTP/1.0\r\nHost: {address}:{port}\r\nUser-Agent: vendue-health\r\n\r\n"
    try:
        sock = await _connected(loop, address, port)
    except OSError as exc:
        return _os_error(exc)
    try:
        await loop.sock_sendall(sock, request.encode("ascii"))
        while len(seen) < HTTP_READ_CAP:
            chunk = await loop.sock_recv(sock, 4096)
            if not chunk:
                break
            seen += chunk
    except OSError as exc:
        if not seen:
            return _os_error(exc)
    finally:
        sock.close()
    return _status(seen)


def _status(response: bytes | bytearray) -> str | None:
    if not response:
        return "no response"
    match = _STATUS_LINE.match(bytes(response[:64]))
    if match is None:
        return "not an HTTP response"
    status = int(match.group(1))
    return None if 200 <= status < 400 else f"status {status}"


@dataclass(slots=True, eq=False)
class _Watch:
    guid: str
    check: HealthCheck
    target: Target
    on_failure: Callable[[str], None]
    failures: int = 0
    timer: asyncio.TimerHandle | None = None
    running: asyncio.Task[None] | None = None


class HealthMonitor:
    """The rep's one scheduler of continuous health checks (see the module's docstring)."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self._watches: dict[str, _Watch] = {}
        self._rng = rng or random.Random()
        self.checks = 0  # checks run (a benchmark's denominator)
        self.inconclusive = 0  # checks not counted: the loop was blocked

    def __len__(self) -> int:
        return len(self._watches)

    def watch(self, guid: str, check: HealthCheck, target: Target, on_failure: Callable[[str], None]) -> None:
        """Check `target` from one interval on until `unwatch`, or `on_failure` (called once, with what
        failed, after `failure_threshold` failures in a row)."""
        self.unwatch(guid)
        w = _Watch(guid, check, target, on_failure)
        self._watches[guid] = w
        loop = asyncio.get_running_loop()
        self._schedule(w, loop.time() + self._interval(check))

    def unwatch(self, guid: str) -> None:
        w = self._watches.pop(guid, None)
        if w is None:
            return
        if w.timer is not None:
            w.timer.cancel()
        if w.running is not None:
            w.running.cancel()

    async def close(self) -> None:
        running = [w.running for w in self._watches.values() if w.running is not None]
        for guid in list(self._watches):
            self.unwatch(guid)
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _interval(self, check: HealthCheck) -> float:
        return check.interval_s * (1.0 - JITTER * self._rng.random())

    def _schedule(self, w: _Watch, when: float) -> None:
        w.timer = asyncio.get_running_loop().call_at(when, self._due, w)

    def _due(self, w: _Watch) -> None:
        w.timer = None
        if self._watches.get(w.guid) is not w:
            return
        w.running = asyncio.get_running_loop().create_task(self._run(w), name=f"health-{w.guid}")

    async def _run(self, w: _Watch) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            outcome = await check_once(w.target, w.check.invocation_timeout_s)
        except Exception:  # a bug of the check's must not end an instance's checks, nor the instance
            log.exception("health check raised", extra={"data": {"instance_guid": w.guid}})
            outcome = INCONCLUSIVE
        w.running = None
        if self._watches.get(w.guid) is not w:
            return
        self.checks += 1
        if outcome is None:
            w.failures = 0
            self._schedule(w, started + self._interval(w.check))
        elif outcome == INCONCLUSIVE:
            self.inconclusive += 1
            self._schedule(w, loop.time() + min(w.check.invocation_timeout_s, w.check.interval_s))
        else:
            w.failures += 1
            if w.failures >= w.check.failure_threshold:
                self.unwatch(w.guid)
                w.on_failure(outcome)
            else:
                self._schedule(w, started + min(w.check.invocation_timeout_s, w.check.interval_s))
