"""The rep process: the cells it hosts, its BBS client, heartbeats, outbox flushers and shutdown.

One process hosts one cell (process executor) or many simulated ones (sim executor). Everything that
talks to the BBS lives here: one pooled httpx client, one flusher per cell (one lifecycle request in
flight per cell), and one heartbeat loop that PUTs every cell's presence every TTL/3. The cells' reports
and heartbeats travel together, however many cells the process hosts: one lifecycle request and one
heartbeat request per round for the process (HostLifecycleSender, PUT /v1/cells), not per cell.

Shutdown:
- SIGTERM, or POST /evacuate naming no cell: evacuate every cell (heartbeat evacuating=true, reject
  work, wait until the BBS stopped every instance or the evacuation timeout passed, stop what is
  left, report it `removed`), then exit. POST /evacuate naming cells evacuates those; the process
  exits once every cell is evacuated.
- SIGINT: stop every container (SIGTERM, then SIGKILL after the grace), report them, exit.
- A second signal: kill every container at once, report what can be reported within a second, exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import httpx

from common.group_commit import GroupCommit
from common.models import (
    CancelTasks,
    CellPresences,
    CordonCells,
    Found,
    HeartbeatAnswer,
    HostCellDetails,
    HostCellStates,
    HostLifecycleResult,
    HostWork,
    HostWorkResult,
    LifecycleResult,
    StopInstances,
)
from common.retry import REGISTRATION

from .cell import RepCell, all_rejected
from .executor import Executor
from .outbox import SendLifecycle
from .reports import Reports, host_json

log = logging.getLogger("rep.host")

EVACUATED_TASK_REASON = "cell evacuated before completion"
SHUTDOWN_TASK_REASON = "cell shut down before completion"
DRAIN_TIMEOUT_S = 10.0
# A round in which a cell's heartbeat failed is tried again after common/retry.py's REGISTRATION delays,
# capped at the heartbeat interval, instead of a whole interval (TTL/3) later: a cell's first heartbeat may
# find no BBS yet (a cluster starts every process at once), and a rep that was stalled (a pause, a stopped
# VM) comes back with a TTL nearly spent, where its first heartbeat may fail on a connection the BBS closed
# meanwhile: the next, an interval later, came after its presence had expired.
# The first heartbeat makes the cells present, and every auction then asks them for their state: a rep not
# yet able to answer (its HTTP server not serving, its NATS subscription not made) holds a NATS auction's
# gather open until the auctioneer's cell_state_timeout (5 s) and drops out of it, so what that auction
# places goes elsewhere. The first round waits until the rep answers auctions, looking this often, for at
# most one heartbeat interval: a rep whose NATS server is away still keeps its cells present.
ANSWERS_AUCTIONS_POLL_S = 0.01


# The answer for a cell the BBS refused nothing of (shared: its readers never change it).
NOTHING_REFUSED = LifecycleResult()
HOST_BATCH_CELLS = 500  # cells per host-level request (a lifecycle round or a heartbeat round)


class HostLifecycleSender:
    """The outboxes' transport: the reports of every cell of the process that has something to say go
    in ONE POST {bbs}/v1/lifecycle (group commit: whatever cells queued while the previous request was
    in flight go in the next one). Each cell's outbox still has one request in
    flight, so a cell appears at most once per request, and a failed request fails every cell's send:
    each outbox keeps its reports and retries them, as with its own request."""

    def __init__(self, client: httpx.AsyncClient, bbs_url: str) -> None:
        self._client = client
        self._url = f"{bbs_url.rstrip('/')}/v1/lifecycle"
        self._group: GroupCommit[tuple[str, Reports], LifecycleResult] = GroupCommit(
            self._post, max_batch=HOST_BATCH_CELLS, split_on_failure=False
        )

    def for_cell(self, cell_id: str) -> SendLifecycle:
        async def send(batch: Reports) -> LifecycleResult:
            return await self._group.submit((cell_id, batch))

        return send

    async def _post(self, reports: list[tuple[str, Reports]]) -> list[LifecycleResult]:
        # The HostLifecycle body, written straight from the plain reports (rep/reports.py).
        response = await self._client.post(
            self._url, content=host_json(reports), headers={"content-type": "application/json"}
        )
        response.raise_for_status()
        answer = HostLifecycleResult.model_validate_json(response.content)
        return [answer.cells.get(cell_id) or NOTHING_REFUSED for cell_id, _ in reports]


class RepHost:
    def __init__(
        self,
        cells: list[RepCell],
        executors: list[Executor],
        client: httpx.AsyncClient,
        bbs_url: str,
        *,
        rep_id: str = "",
        presence_ttl_s: float = 10.0,
        evacuation_timeout_s: float = 600.0,
    ) -> None:
        self.cells = {cell.cell_id: cell for cell in cells}
        self.rep_id = rep_id  # the process's name (CellPresence.rep_id): its NATS subjects
        self.executors = executors
        self._client = client  # the process's: its requests are host-level, a few in flight at most
        self.bbs_url = bbs_url.rstrip("/")
        self.presence_ttl_s = presence_ttl_s
        self.heartbeat_interval_s = presence_ttl_s / 3
        # A heartbeat that has no answer within TTL/2 goes to the next BBS replica (the failover transport
        # moves on after a timeout): one sent TTL/3 after the last accepted one then still lands before
        # the presence expires. With the client's own timeout (10 s), a replica that hangs (cut off from
        # its database) let every presence it served expire first, and their instances be replaced.
        read_timeout = client.timeout.read
        self.heartbeat_timeout_s = min(
            presence_ttl_s / 2, read_timeout if read_timeout is not None else math.inf
        )
        # Loop time each cell's last accepted heartbeat was sent: a gap of a TTL means the BBS may have let
        # its presence expire (see _heartbeats).
        self._last_beat_sent: dict[str, float] = {}
        self._cordon_pushed_at: dict[str, float] = {}  # cell -> loop time the BBS last pushed its cordon
        self.evacuation_timeout_s = evacuation_timeout_s
        self.heartbeats_sent = 0
        self._failed_rounds = 0
        self._slow_rounds = 0
        self._beating: set[str] = set()  # cells whose heartbeat is in flight
        self._beat_now = asyncio.Event()
        self._retry_delays = REGISTRATION.capped(self.heartbeat_interval_s).delays()
        self._retry: asyncio.TimerHandle | None = None
        self._shutdown = asyncio.Event()
        self._force = False
        self._signals_seen = 0
        self._loops: list[asyncio.Task[None]] = []
        self._evacuations: dict[str, asyncio.Task[None]] = {}

    def find(self, cell_id: str) -> RepCell | None:
        """The live cell `cell_id` hosted here (None when it is not, or was retired)."""
        cell = self.cells.get(cell_id)
        return None if cell is None or cell.retired else cell

    def live(self, cell_ids: Iterable[str] | None = None) -> list[RepCell]:
        """The live cells named (those hosted here), or every live cell."""
        if cell_ids is None:
            return [c for c in self.cells.values() if not c.retired]
        return [c for c in map(self.find, cell_ids) if c is not None]

    # --- the one rep API (HTTP and NATS: rep/api.py, rep/nats_bus.py) --------------------------------

    def states(self, cell_ids: Iterable[str] | None = None) -> HostCellStates:
        """The bids of the live cells named (or of every live cell): what the auctioneer fetches."""
        return HostCellStates.model_construct(cells=[c.state() for c in self.live(cell_ids)])

    def details(self, cell_ids: Iterable[str] | None = None) -> HostCellDetails:
        """The same cells in detail: each bid with the rep's own view of the cell (CellDetail)."""
        return HostCellDetails.model_construct(cells=[c.detail() for c in self.live(cell_ids)])

    def take(self, work: HostWork) -> HostWorkResult:
        """Each hosted cell's part of the work (a cell not hosted here, or retired, is left out of the
        answer, its work untouched). Validated once for the process: each desired LRP once."""
        results = {}
        for cell_id, part in work.cells.items():
            cell = self.find(cell_id)
            if cell is not None:
                results[cell_id] = cell.take(work.instances(cell_id), part.tasks, work.fencing_token)
        return HostWorkResult.model_construct(cells=results)

    def refuse(self, work: HostWork, reason: str) -> HostWorkResult:
        """Each hosted cell's part of the work, all rejected with `reason` (nothing taken)."""
        return HostWorkResult.model_construct(cells={
            cell_id: all_rejected(work.instances(cell_id), part.tasks, reason)
            for cell_id, part in work.cells.items() if self.find(cell_id) is not None
        })

    def stop(self, request: StopInstances) -> Found:
        """Stop the named instances the cells hold (in the background); answers those found."""
        named = ((s.cell_id, s.instance_guid) for s in request.instances)
        return self._in_background(named, RepCell.has_instance, RepCell.stop_lrp)

    def cancel(self, request: CancelTasks) -> Found:
        """Cancel the named tasks the cells hold (in the background); answers those found."""
        named = ((c.cell_id, c.task_guid) for c in request.tasks)
        return self._in_background(named, RepCell.has_task, RepCell.cancel_task)

    def cordon(self, request: CordonCells) -> Found:
        """The BBS says the operator (un)cordoned these cells: a cordoned cell refuses work. Answers the cell
        ids hosted here."""
        found = []
        for item in request.cells:
            cell = self.find(item.cell_id)
            if cell is not None:
                cell.cordoned = item.cordoned
                self._cordon_pushed_at[item.cell_id] = asyncio.get_running_loop().time()
                found.append(item.cell_id)
        return Found(found=found)

    def _in_background(
        self,
        named: Iterable[tuple[str, str]],
        holds: Callable[[RepCell, str], bool],
        act: Callable[[RepCell, str], Coroutine[Any, Any, object]],  # RepCell.stop_lrp, RepCell.cancel_task
    ) -> Found:
        """`act(cell, guid)` in the background for each (cell id, guid) a live cell here holds; answers those
        found."""
        found = []
        for cell_id, guid in named:
            cell = self.find(cell_id)
            if cell is not None and holds(cell, guid):
                cell.in_background(act(cell, guid))
                found.append(guid)
        return Found(found=found)

    # --- running ------------------------------------------------------------------------------------

    async def start(self, answers_auctions: Callable[[], bool] = lambda: True) -> None:
        """Open the executors, start the outboxes and the heartbeats; the first heartbeat waits (at most an
        interval) until `answers_auctions()`: see ANSWERS_AUCTIONS_POLL_S."""
        for executor in self.executors:
            await executor.open()
        for cell in self.cells.values():
            cell.awaiting_registration = True
            self._loops.append(asyncio.create_task(cell.outbox.run(), name=f"outbox-{cell.cell_id}"))
        self._loops.append(asyncio.create_task(self._heartbeat_loop(answers_auctions), name="heartbeat"))

    async def heartbeat_once(self) -> int:
        """PUT every live cell's presence (PUT /v1/cells, a request per HOST_BATCH_CELLS cells, concurrently);
        returns how many the BBS accepted.

        A cell whose previous heartbeat is still in flight (a slow BBS) is skipped: heartbeats never
        pile up, and the next round goes out on schedule for everyone else.
        """
        cells = [c for c in self.cells.values() if not c.retired and c.cell_id not in self._beating]
        self._beating.update(c.cell_id for c in cells)
        started = asyncio.get_running_loop().time()
        try:
            chunks = [cells[i : i + HOST_BATCH_CELLS] for i in range(0, len(cells), HOST_BATCH_CELLS)]
            outcomes = await asyncio.gather(*(self._heartbeats(c) for c in chunks), return_exceptions=True)
            results = [outcome for chunk, outcome in zip(chunks, outcomes, strict=True) for _ in chunk]
        finally:
            self._beating.difference_update(c.cell_id for c in cells)
        took = asyncio.get_running_loop().time() - started
        ok = sum(1 for r in results if r is True)
        if ok < len(cells) or any(c.awaiting_registration and not c.retired for c in cells):
            self._retry_soon()
        else:
            self._retry_delays.reset()
        self.heartbeats_sent += ok
        if ok < len(cells):
            # Say it when the BBS becomes unreachable, then only every 10th failed round.
            if self._failed_rounds % 10 == 0:
                errors = sorted({repr(r) for r in results if r is not True})[:3]
                failure = {"failed": len(cells) - ok, "rounds": self._failed_rounds + 1, "errors": errors}
                log.warning("heartbeats failed", extra={"data": failure})
            self._failed_rounds += 1
        elif self._failed_rounds:
            log.info("heartbeats succeed again", extra={"data": {"after_failed_rounds": self._failed_rounds}})
            self._failed_rounds = 0
        if took > self.heartbeat_interval_s:
            self._slow_rounds += 1
            if self._slow_rounds % 10 == 1:
                slow = {
                    "seconds": round(took, 3),
                    "interval_s": self.heartbeat_interval_s,
                    "cells": len(cells),
                }
                log.warning(
                    "heartbeat round slower than its interval: the BBS answers slowly", extra={"data": slow}
                )
        return ok

    def _retry_soon(self) -> None:
        """The next round soon (backing off), not a whole interval away: no cell takes work before the
        BBS has accepted its boot, so a rep that started before its BBS would idle for up to TTL/3; and a
        presence whose heartbeat failed may have less than an interval left."""
        if self._retry is not None:
            self._retry.cancel()
        delay = next(self._retry_delays)
        self._retry = asyncio.get_running_loop().call_later(delay, self._beat_now.set)

    async def _heartbeats(self, cells: list[RepCell]) -> bool:
        """These cells' presences in one PUT /v1/cells."""
        body = CellPresences.model_construct(cells=[c.presence() for c in cells])
        loop = asyncio.get_running_loop()
        sent = loop.time()
        response = await self._client.put(
            f"{self.bbs_url}/v1/cells",
            content=body.model_dump_json(),
            headers={"content-type": "application/json"},
            timeout=self.heartbeat_timeout_s,
        )
        response.raise_for_status()
        answered = loop.time()
        cordoned = heartbeat_cordoned(response)
        for cell in cells:
            cell.awaiting_registration = False
            # An answer to a heartbeat sent before the BBS's last push for the cell may predate that
            # (un)cordon: the push holds until a later heartbeat says otherwise.
            if cordoned is not None and self._cordon_pushed_at.get(cell.cell_id, -math.inf) < sent:
                cell.cordoned = cell.cell_id in cordoned
            # The BBS counts a presence's TTL from when it wrote the heartbeat: after the previous accepted
            # one was sent, before this one was answered. Only if those are a TTL apart can it have expired
            # in between (a partition, a stalled rep or BBS) and the cell's instances been replaced.
            previous = self._last_beat_sent.get(cell.cell_id)
            if previous is not None and answered - previous >= self.presence_ttl_s:
                reasserted = cell.reassert_running()
                silence = {"cell_id": cell.cell_id, "instances": reasserted,
                           "silent_s": round(answered - previous, 3)}
                log.info("presence may have expired: running instances reported again",
                         extra={"data": silence})
            self._last_beat_sent[cell.cell_id] = sent
        return True

    async def _heartbeat_loop(self, answers_auctions: Callable[[], bool]) -> None:
        """Start a round every TTL/3 on a fixed schedule (or at once when asked), never waiting for one; the
        first once the rep answers auctions, or an interval on."""
        loop = asyncio.get_running_loop()
        rounds: set[asyncio.Task[int]] = set()
        give_up_at = loop.time() + self.heartbeat_interval_s
        while not answers_auctions() and loop.time() < give_up_at:
            await asyncio.sleep(ANSWERS_AUCTIONS_POLL_S)
        try:
            while True:
                self._beat_now.clear()
                next_at = loop.time() + self.heartbeat_interval_s
                beat = asyncio.create_task(self.heartbeat_once())
                rounds.add(beat)
                beat.add_done_callback(rounds.discard)
                beat.add_done_callback(_log_round_error)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._beat_now.wait(), timeout=max(0.0, next_at - loop.time()))
        finally:
            if self._retry is not None:
                self._retry.cancel()
            for beat in rounds:
                beat.cancel()

    # --- evacuation and shutdown --------------------------------------------------------------------

    def evacuate(self, cells: list[RepCell] | None = None) -> None:
        """Start evacuating these cells (all by default); idempotent."""
        for cell in cells if cells is not None else list(self.cells.values()):
            if cell.cell_id in self._evacuations or cell.retired:
                continue
            cell.evacuating = True
            self._evacuations[cell.cell_id] = asyncio.create_task(
                self._evacuate(cell), name=f"evacuate-{cell.cell_id}"
            )
        self._beat_now.set()

    async def _evacuate(self, cell: RepCell) -> None:
        log.info(
            "evacuating", extra={"data": {"cell_id": cell.cell_id, "timeout_s": self.evacuation_timeout_s}}
        )
        emptied = await cell.wait_empty(self.evacuation_timeout_s)
        if not emptied:
            log.warning(
                "evacuation timed out; stopping what is left", extra={"data": {"cell_id": cell.cell_id}}
            )
        await cell.stop_everything(EVACUATED_TASK_REASON)
        await cell.outbox.drain(DRAIN_TIMEOUT_S)
        cell.retired = True
        log.info("evacuated", extra={"data": {"cell_id": cell.cell_id}})
        if all(c.retired for c in self.cells.values()):
            self._shutdown.set()

    def on_signal(self, signum: int) -> None:
        self._signals_seen += 1
        if self._signals_seen > 1:
            log.warning("second signal: stopping at once", extra={"data": {"signal": signum}})
            self._force = True
            for executor in self.executors:
                executor.kill_all()
            self._shutdown.set()
        elif signum == signal.SIGTERM:
            log.info("SIGTERM: draining")
            self.evacuate()
        else:
            log.info("shutting down", extra={"data": {"signal": signum}})
            self._shutdown.set()

    def request_shutdown(self) -> None:
        self._shutdown.set()

    async def wait_shutdown(self) -> None:
        await self._shutdown.wait()

    async def close(self) -> None:
        """Stop what is still running, deliver the last reports (bounded), release everything."""
        for task in self._evacuations.values():
            task.cancel()
        live = [c for c in self.cells.values() if not c.retired]
        stop_budget = 1.0 if self._force else None
        try:
            await asyncio.wait_for(
                asyncio.gather(*(c.stop_everything(SHUTDOWN_TASK_REASON) for c in live)), timeout=stop_budget
            )
        except TimeoutError:
            pass
        drain_budget = 1.0 if self._force else DRAIN_TIMEOUT_S
        await asyncio.gather(*(c.outbox.drain(drain_budget) for c in self.cells.values()))
        for cell in self.cells.values():
            cell.retired = True
            await cell.wait_background(drain_budget)
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, *self._evacuations.values(), return_exceptions=True)
        for executor in self.executors:
            await executor.close()


def heartbeat_cordoned(response: httpx.Response) -> set[str] | None:
    """The cells the BBS's heartbeat answer names cordoned (the others are not); None from a BBS too old to
    say (204), which never cordons."""
    if response.status_code == 204 or not response.content:
        return None
    return set(HeartbeatAnswer.model_validate_json(response.content).cordoned)


def _log_round_error(task: asyncio.Task[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("heartbeat round failed", exc_info=task.exception())
