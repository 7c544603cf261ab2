"""The priority lock: urgent waiters first, FIFO within a class, cancellation never loses the lock."""

from __future__ import annotations

import asyncio

import pytest

from bbs.store.priority_lock import PriorityLock
from tests.support.priority_lock import queued


async def test_urgent_waiters_go_first_and_each_class_is_fifo() -> None:
    lock = PriorityLock()
    order: list[str] = []

    async def take(name: str, urgent: bool) -> None:
        async with lock.hold(urgent):
            order.append(name)
            await asyncio.sleep(0)

    await lock.acquire()
    tasks = [asyncio.create_task(take(name, urgent)) for name, urgent in
             [("bulk-1", False), ("lease-1", True), ("bulk-2", False), ("lease-2", True)]]
    await queued(lock, 4)
    lock.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["lease-1", "lease-2", "bulk-1", "bulk-2"]
    assert not lock.locked()


async def test_a_cancelled_waiter_neither_keeps_nor_loses_the_lock() -> None:
    lock = PriorityLock()
    await lock.acquire()
    cancelled = asyncio.create_task(lock.acquire(urgent=True))
    after = asyncio.create_task(lock.acquire())
    await queued(lock, 2)
    cancelled.cancel()
    lock.release()  # the cancelled waiter's future is done: the lock goes to the next one
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(after, 5)
    assert lock.locked()
    lock.release()
    assert not lock.locked()


async def test_a_waiter_cancelled_as_it_is_handed_the_lock_hands_it_on() -> None:
    lock = PriorityLock()
    await lock.acquire()
    first = asyncio.create_task(lock.acquire())
    second = asyncio.create_task(lock.acquire())
    await queued(lock, 2)
    lock.release()  # hands it to `first` ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)
    assert lock.locked()
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
