"""The queue of auction requests and the loop that runs one auction at a time.

Everything that arrives while an auction runs is the next batch. Within a batch, requests are deduped by
(process_guid, index) and task_guid; the latest request wins. Work a rep rejected comes back from the
auction as a carried batch and joins the next one, unless a newer request for the same item arrived.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from common.interrupt import Interrupted, unless
from common.models import DesiredLRP, LRPStartRequest, Task, TaskStartRequest

log = logging.getLogger("auctioneer.batcher")

LRPKey = tuple[str, int]


@dataclass(slots=True)
class PendingLRP:
    desired: DesiredLRP
    index: int
    attempts: int = 0  # times a rep rejected it (or could not be reached)

    @property
    def key(self) -> LRPKey:
        return (self.desired.process_guid, self.index)


@dataclass(slots=True)
class PendingTask:
    task: Task
    attempts: int = 0

    @property
    def key(self) -> str:
        return self.task.task_guid


@dataclass(slots=True)
class Batch:
    lrps: dict[LRPKey, PendingLRP] = field(default_factory=dict)
    tasks: dict[str, PendingTask] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.lrps) + len(self.tasks)

    def add_lrp(self, item: PendingLRP) -> None:
        self.lrps[item.key] = item

    def add_task(self, item: PendingTask) -> None:
        self.tasks[item.key] = item

    def merge_older(self, older: Batch) -> None:
        """Add `older` items (carried work) unless this batch already holds a newer request for them."""
        for lrp_key, lrp in older.lrps.items():
            self.lrps.setdefault(lrp_key, lrp)
        for task_guid, task in older.tasks.items():
            self.tasks.setdefault(task_guid, task)


RunAuction = Callable[[Batch], Awaitable[Batch]]  # one auction; returns the work to carry


class Gate(Protocol):
    """Whether this auctioneer may auction now (leadership.Leadership: it holds the lease)."""

    @property
    def leader(self) -> bool: ...

    async def until_leader(self) -> None: ...

    async def until_standby(self) -> None: ...


class Batcher:
    def __init__(
        self, run_auction: RunAuction, *, auction_timeout: float = 60.0, gate: Gate | None = None
    ) -> None:
        self._run_auction = run_auction
        self._auction_timeout = auction_timeout
        self._gate = gate
        self.auctions_abandoned = 0  # auctions cut short because the lease was lost
        self._pending = Batch()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.auction_running = False

    # --- the queue (called by the API: synchronous, never waits for an auction) ----------------------

    def add_lrps(self, requests: Iterable[LRPStartRequest]) -> int:
        # Batch.add_lrp inlined: one entry per instance, every instance of every desire passes here.
        lrps = self._pending.lrps
        n = 0
        for request in requests:
            desired = request.desired
            process_guid = desired.process_guid
            for index in request.indices:
                lrps[(process_guid, index)] = PendingLRP(desired, index)
            n += len(request.indices)
        self._wake.set()
        return n

    def add_tasks(self, requests: Iterable[TaskStartRequest]) -> int:
        n = 0
        for request in requests:
            self._pending.add_task(PendingTask(request.task))
            n += 1
        self._wake.set()
        return n

    @property
    def pending(self) -> int:
        return len(self._pending)

    def take(self) -> Batch:
        batch, self._pending = self._pending, Batch()
        return batch

    # --- the loop -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="auction-loop")

    async def run(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            if self._gate is not None and not self._gate.leader:
                await self._gate.until_leader()  # what a leader queued waits while it cannot renew
            self._wake.clear()
            if self._stopping:
                break
            batch = self.take()
            if not batch:
                continue
            carried = await self._one_auction(batch)
            if carried:
                self._pending.merge_older(carried)
                self._wake.set()

    async def _one_auction(self, batch: Batch) -> Batch:
        self.auction_running = True
        try:
            async with asyncio.timeout(self._auction_timeout):
                if self._gate is None:
                    return await self._run_auction(batch)
                return await self._unless_standby(batch, self._gate)
        except TimeoutError:
            # The BBS's convergence re-auctions anything still UNCLAIMED or PENDING, so nothing is lost.
            log.error(
                "auction timed out", extra={"data": {"items": len(batch), "timeout_s": self._auction_timeout}}
            )
        except Exception:
            log.exception("auction failed", extra={"data": {"items": len(batch)}})
        finally:
            self.auction_running = False
        return Batch()

    async def _unless_standby(self, batch: Batch, gate: Gate) -> Batch:
        """Run the auction, abandoning it the moment the lease is lost: a new leader (with a newer fencing
        token) may be auctioning the same work. The BBS's convergence re-auctions whatever was dropped."""
        try:
            return await unless(self._run_auction(batch), gate.until_standby())
        except Interrupted:
            self.auctions_abandoned += 1
            log.warning("lease lost: auction abandoned", extra={"data": {"items": len(batch)}})
            return Batch()

    async def stop(self, timeout: float) -> None:
        """Let the current auction finish within `timeout`, then abandon it; queued work is dropped."""
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        if not self.auction_running:  # waiting for work or for the lease: nothing to finish
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._log_dropped()
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(task)
        except TimeoutError:
            log.warning("abandoning the running auction at shutdown")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._log_dropped()

    def _log_dropped(self) -> None:
        if self.pending:
            log.info("dropping queued work at shutdown", extra={"data": {"items": self.pending}})
