"""Group commit: callers submit items one by one; whatever queued up while the previous batch was
being written is handled as the next batch, in one call (one transaction). Each caller gets its own
result. Under load this turns N concurrent requests into a handful of transactions; alone, an item
is handled at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

log = logging.getLogger("bbs.group_commit")

MAX_BATCH = 200


class GroupCommit(Generic[Item, Result]):
    def __init__(
        self, handle: Callable[[list[Item]], Awaitable[list[Result]]], max_batch: int = MAX_BATCH
    ) -> None:
        self._handle = handle
        self._max_batch = max_batch
        self._queue: list[tuple[Item, asyncio.Future[Result]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            batch = [(item, future) for item, future in batch if not future.cancelled()]
            if batch:
                await self._run(batch)

    async def _run(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._handle([item for item, _ in batch])
        except Exception as exc:  # noqa: BLE001 - handed to the callers
            if len(batch) > 1:
                # One bad item must not fail the others: handle them one at a time.
                log.warning(
                    "batch failed; retrying its items one by one", extra={"data": {"error": repr(exc)}}
                )
                for single in batch:
                    await self._run([single])
                return
            _, future = batch[0]
            if not future.done():
                future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
