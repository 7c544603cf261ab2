"""Asking a cell's rep what the cell holds, in the background: a convergence pass never waits on a silent
host.

Two decisions need a cell's own word: the keep-replicas policy's check of a lost cell (bbs/cell_loss.py: does
its rep still answer?) and a late claim (bbs/placements.py: does the present cell that accepted an instance
still hold it?). A pass asks for a probe (`request`) and decides with the latest finished one (`latest`);
a probe that finishes wakes convergence, so the next pass uses it at once.

A probe asks GET {rep_url}/state?lrps=full&cells=<cell> (the BBS's certificate may: rep/policy.py), again
after each CELL_PROBES delay (common/retry.py: 0.25-0.5 s) until the rep answers for the cell or the probe's
window (`--cell-loss-check`, 5 s) has passed: a host that is down, or that no longer hosts the cell, has not
answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from common.models import CellDetail
from common.retry import CELL_PROBES, Again, retrying

from .records import CellRecord

log = logging.getLogger("bbs.cell_probes")

MIN_ATTEMPT_S = 0.1  # the shortest time an attempt is given near the end of the window

# One attempt: the cell in detail from its rep within the timeout (s), or None (no answer, or not hosted
# there).
AskCell = Callable[[CellRecord, float], Awaitable[CellDetail | None]]


@dataclass(frozen=True, slots=True)
class Probe:
    """What a cell's rep said the cell holds, asked at `started_at` (epoch s); `lrps` None: no answer."""

    started_at: float
    lrps: frozenset[tuple[str, int]] | None  # (process_guid, index) of every instance it holds
    tasks: frozenset[str] = frozenset()

    @property
    def answered(self) -> bool:
        return self.lrps is not None


def probe_of(started_at: float, detail: CellDetail | None) -> Probe:
    if detail is None:
        return Probe(started_at, None)
    return Probe(started_at, frozenset((lrp.process_guid, lrp.index) for lrp in detail.lrps),
                 frozenset(task.task_guid for task in detail.bid.tasks))


class CellProbes:
    def __init__(self, ask: AskCell, window_s: float, *, on_done: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.time) -> None:
        self._ask = ask
        self.window_s = window_s
        self.on_done = on_done  # the converger's wake-up
        self._clock = clock
        self._latest: dict[str, Probe] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    def latest(self) -> Mapping[str, Probe]:
        """The latest finished probe of each cell probed (a copy: passes run in a worker thread)."""
        return dict(self._latest)

    def request(self, cells: Iterable[CellRecord]) -> None:
        """Start a probe of each of these cells that is not being probed already (on the event loop)."""
        for cell in cells:
            if cell.cell_id not in self._running:
                task = asyncio.create_task(self._probe(cell), name=f"probe-{cell.cell_id}")
                self._running[cell.cell_id] = task
                task.add_done_callback(functools.partial(self._forget, cell.cell_id))

    def _forget(self, cell_id: str, _: asyncio.Task[None]) -> None:
        self._running.pop(cell_id, None)

    def keep_only(self, cell_ids: Collection[str]) -> None:
        """Forget the probes of cells no longer known (removed, or forgotten after their expiry)."""
        for cell_id in [c for c in self._latest if c not in cell_ids]:
            del self._latest[cell_id]

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _probe(self, cell: CellRecord) -> None:
        started_at = self._clock()
        deadline = time.monotonic() + self.window_s
        detail: CellDetail | None = None
        with contextlib.suppress(Again):  # no answer before the window's end: a probe without one
            async for attempt in retrying(CELL_PROBES, within_s=self.window_s):
                with attempt:
                    try:
                        detail = await self._ask(cell, max(deadline - time.monotonic(), MIN_ATTEMPT_S))
                    except Exception:  # noqa: BLE001 - a probe that fails says "no answer", never ends convergence
                        log.exception("probing a cell failed", extra={"data": {"cell_id": cell.cell_id}})
                    if detail is None:
                        raise Again
        probe = probe_of(started_at, detail)
        self._latest[cell.cell_id] = probe
        log.info("cell probed", extra={"data": {
            "cell_id": cell.cell_id, "answered": probe.answered,
            "seconds": round(self._clock() - started_at, 3)}})
        self.on_done()
