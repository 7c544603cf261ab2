"""Group commit: callers submit items one by one; whatever queued up while the previous batch was
being handled is the next batch, in one call. Each caller gets its own result. Under load this turns N
concurrent callers into a handful of calls; alone, an item is handled at once.

The BBS uses it for transactions (many requests, one transaction); a rep hosting many cells uses it for
requests (many cells' lifecycle reports, one HTTP request to the BBS).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

log = logging.getLogger("vendue.group_commit")

MAX_BATCH = 200


class GroupCommit(Generic[Item, Result]):
    def __init__(
        self,
        handle: Callable[[list[Item]], Awaitable[list[Result]]],
        max_batch: int = MAX_BATCH,
        *,
        split_on_failure: bool = True,
    ) -> None:
        """`split_on_failure`: a failed batch is retried item by item, so one bad item fails only its
        caller (right for a transaction). Off, every caller of a failed batch gets its error (right for
        a request that failed as a whole: the callers retry with their own backoff)."""
        self._handle = handle
        self._max_batch = max_batch
        self._split_on_failure = split_on_failure
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
            if len(batch) > 1 and self._split_on_failure:
                # One bad item must not fail the others: handle them one at a time.
                log.warning(
                    "batch failed; retrying its items one by one", extra={"data": {"error": repr(exc)}}
                )
                for single in batch:
                    await self._run([single])
                return
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
