"""An asyncio lock with two queues: urgent waiters get it before ordinary ones, FIFO within each.

The BBS serialises its write transactions. Bulk ones (a lifecycle round of thousands of instances,
a batch of desires) can queue up under load; a lease renewal or a heartbeat queued behind them would
miss its deadline, and a missed lease or presence turns load into failover and re-placement. Those
small, deadline-bound writes are urgent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PriorityLock:
    def __init__(self) -> None:
        self._locked = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._ordinary: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._locked

    async def acquire(self, urgent: bool = False) -> None:
        if not self._locked and not self._urgent and not self._ordinary:
            self._locked = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._ordinary
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed to us as we were cancelled: hand it on
            elif waiter in queue:  # (a release may have passed over it already)
                queue.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter (urgent first), or unlock."""
        if not self._locked:
            raise RuntimeError("release of an unlocked PriorityLock")
        for queue in (self._urgent, self._ordinary):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # stays locked: it is the waiter's now
                    return
        self._locked = False

    @asynccontextmanager
    async def hold(self, urgent: bool = False) -> AsyncIterator[None]:
        await self.acquire(urgent)
        try:
            yield
        finally:
            self.release()
