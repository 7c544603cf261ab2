"""The convergence loop: a pass every interval, sooner when woken (a cell returning) or when a cell's
presence expires or a crashed instance's backoff ends. Only the holder of the "convergence" lease runs
passes, so
several BBS processes on one database converge once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid

from .core import BBS
from .events import event

log = logging.getLogger("bbs.converger")

LEASE = "convergence"
MIN_GAP_S = 0.2  # wake-ups closer than this are folded into one pass
EXPIRY_SLACK_S = 0.01
RELEASE_TIMEOUT_S = 2.0


class Converger:
    def __init__(self, bbs: BBS, interval: float, lease_ttl: float) -> None:
        self.bbs = bbs
        self.interval = interval
        self.lease_ttl = lease_ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Where this BBS serves, once bound (bbs/server.py): the lease's url, so that this BBS restarted on
        # the same address (kill -9, then its supervisor) takes the lease back at once
        # (bbs/store/leases.py, restarted_holder).
        self.seat = ""
        self.passes = 0
        self.token: int | None = None  # the lease's fencing token while this process holds it
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        bbs.uow.on_wake = self.wake
        bbs.uow.on_due = self.wake_at
        bbs.uow.converger = self

    def wake(self) -> None:
        self._wake.set()

    def serving_at(self, url: str) -> None:
        """This BBS serves at `url`, which no other live process can: ask for the lease with it now."""
        self.seat = url
        self.wake()

    def wake_at(self, when: float) -> None:
        """Run a pass at `when` (epoch seconds), e.g. when a crash backoff ends."""
        asyncio.get_running_loop().call_later(max(0.0, when - time.time() + EXPIRY_SLACK_S), self.wake)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="bbs-converger")

    async def stop(self) -> None:
        """Stop the loop and, if this process holds the lease, give it up: another BBS replica converges
        from its next attempt (within TTL/3) instead of after the TTL."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        token, self.token = self.token, None
        self.bbs.metrics.diego.lease(False)
        if token is None:
            return
        try:
            released = await asyncio.wait_for(
                self.bbs.leases.release(LEASE, self.owner, token), RELEASE_TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - the lease then simply expires
            log.warning("could not release the convergence lease", extra={"data": {"error": repr(exc)}})
            return
        log.info("convergence lease released", extra={"data": {"token": token, "released": bool(released)}})

    async def run(self) -> None:
        min_gap = min(MIN_GAP_S, self.interval)
        while True:
            started = time.monotonic()
            timeout = min(self.interval, self.lease_ttl / 3)
            try:
                timeout = min(timeout, await self._pass())
            except Exception:  # a failed pass must not end the loop; the next one retries
                log.exception("convergence pass failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            rest = min_gap - (time.monotonic() - started)
            if rest > 0:
                await asyncio.sleep(rest)

    async def _pass(self) -> float:
        """Run a pass if this process holds the lease; returns the longest wait before the next one."""
        held = self.token
        try:
            self.token = await self.bbs.leases.acquire(LEASE, self.owner, url=self.seat)
        except Exception:
            # No answer: not known to hold it, so no counts that may be stale (another replica's to give).
            self.bbs.metrics.diego.lease(False)
            raise
        self.bbs.metrics.diego.lease(self.token is not None)
        if self.token is None:
            return self.interval
        if self.token != held:  # a new term: this process knows of nothing in flight
            self.bbs.convergence.took_over(time.time())
        started = time.perf_counter()
        next_due = await self.bbs.convergence.run_pass()
        took = time.perf_counter() - started
        self.bbs.metrics.convergence_seconds.observe(took)
        self.bbs.metrics.diego.converged(took)
        if self.bbs.hub.listening:  # the dashboard's "last convergence" (one small event per pass)
            self.bbs.hub.publish([event("convergence_completed", {"duration_s": round(took, 6)})])
        self.passes += 1
        if next_due is None:
            return self.interval
        return max(0.0, next_due - time.time() + EXPIRY_SLACK_S)
