"""Fill a PriorityLock with waiters for a test (queued)."""

from __future__ import annotations

from bbs.store.priority_lock import PriorityLock
from tests.support.polling import eventually


def waiting(lock: PriorityLock) -> int:
    return len(lock._urgent) + len(lock._ordinary)


async def queued(lock: PriorityLock, waiters: int) -> None:
    """Until `waiters` tasks wait for the lock (a deadline, not a sleep)."""
    await eventually(lambda: waiting(lock) >= waiters, 5.0, f"{waiters} waiters", lambda: waiting(lock),
                     interval=0.001)
