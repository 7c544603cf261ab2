"""The blob store's garbage collection loop: every `--blob-gc-interval`, the replica holding the convergence
lease removes the blobs no desired LRP or task has named for `--blob-gc-grace` (operations/blobs.py); every
replica refreshes `vendue_blobs_stored_bytes`, since an upload to another replica changes it."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .core import BBS

log = logging.getLogger("bbs.blob_collector")


class BlobCollector:
    def __init__(self, bbs: BBS) -> None:
        self.bbs = bbs
        self.runs = 0  # collections this replica ran
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="bbs-blob-collector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def leading(self) -> bool:
        converger = self.bbs.uow.converger
        return converger is not None and converger.token is not None

    async def run_once(self) -> None:
        if self.leading():
            await self.bbs.blobs.collect()
            self.runs += 1
        else:
            await self.bbs.blobs.refresh_stored_bytes()

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a failed collection must not end the loop; the next one retries
                log.exception("blob collection failed")
            await asyncio.sleep(self.bbs.settings.blob_gc_interval)
