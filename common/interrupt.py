"""Work that is abandoned when something else happens first: a BBS request whose client disconnects,
an auction whose leader loses its lease."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

Result = TypeVar("Result")


class Interrupted(Exception):
    """`interrupt` completed before `work`, which was cancelled."""


async def unless(work: Awaitable[Result], interrupt: Awaitable[Any]) -> Result:
    """`work`'s result, unless `interrupt` completes first: then `work` is cancelled, its end awaited,
    and Interrupted raised. Cancelling the caller cancels both."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(interrupt)
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise Interrupted
    return task.result()
