"""`unless`: work abandoned when its interrupt comes first, and only then."""

from __future__ import annotations

import asyncio

import pytest

from common.interrupt import Interrupted, unless


async def _endless(started: asyncio.Event, ended: list[bool]) -> None:
    """Work that never finishes by itself: says when it started, and records that it ended."""
    started.set()
    try:
        await asyncio.Event().wait()
    finally:
        ended.append(True)


async def test_work_that_finishes_first_returns_its_result_and_ends_the_interrupt() -> None:
    interrupt = asyncio.Event()
    waiting = asyncio.ensure_future(interrupt.wait())
    assert await unless(asyncio.sleep(0, "done"), waiting) == "done"
    await asyncio.sleep(0)
    assert waiting.cancelled()


async def test_an_interrupt_first_cancels_the_work_and_awaits_its_end() -> None:
    started, ended = asyncio.Event(), []
    work = _endless(started, ended)

    async def interrupt() -> None:
        await started.wait()

    with pytest.raises(Interrupted):
        await unless(work, interrupt())
    assert ended == [True]


async def test_the_work_s_own_error_is_raised_as_is() -> None:
    async def work() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await unless(work(), asyncio.Event().wait())


async def test_cancelling_the_caller_cancels_the_work() -> None:
    started, ended = asyncio.Event(), []
    work = _endless(started, ended)

    caller = asyncio.ensure_future(unless(work, asyncio.Event().wait()))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended == [True]
