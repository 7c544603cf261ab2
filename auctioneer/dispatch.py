"""Sending the auction's work to the winning reps, every rep process concurrently.

The winning cells of one rep process (their presences name the same rep: cells.RepAddress) get their
work in ONE request: HostWork, every cell's work with each desired LRP written once, split over several
requests of whole cells past HOST_WORK_MAX_ITEMS instances; answered with each cell's WorkResult
(HostWorkResult, rep/api.py). Over HTTP that is POST {rep_url}/work (Dispatcher), over NATS a request
on vendue.rep.<rep_id>.work (nats_dispatch.NatsWorkSender); the rest is shared.

What a rep rejects (a cell's WorkResult) comes back as rejections; a failed request rejects the work of
every cell in it as undelivered, and a cell the answer leaves out (not hosted there) likewise.
`split_rejections` carries them into the next batch until they have had `max_attempts` tries.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from common.accepted_work import lrps_text, tasks_text
from common.models import AcceptedWork, HostWorkResult, WorkResult
from placement.diagnosis import NO_CELLS
from placement.types import AuctionResult, Failure

from .batcher import Batch, PendingLRP, PendingTask
from .cells import RepAddress
from .clients import RepClients, RepUnreachable
from .metrics import Metrics

log = logging.getLogger("auctioneer.dispatch")

# What a sender given no token writes: no lease's (a lease's tokens start at 1), so every rep refuses it.
FENCING_TOKEN = 0
REJECTED_WITHOUT_REASON = "insufficient resources"
# Instances and tasks per work request at most (a process's cells are split over several requests beyond
# it): the rep places a request's work without yielding, and the request must end within work_timeout.
HOST_WORK_MAX_ITEMS = 10_000


@dataclass(slots=True)
class CellWork:
    cell_id: str
    rep: RepAddress
    lrps: list[PendingLRP] = field(default_factory=list)
    tasks: list[PendingTask] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lrps) + len(self.tasks)

    def items(self) -> list[PendingLRP | PendingTask]:
        return [*self.lrps, *self.tasks]


@dataclass(slots=True)
class Rejection:
    item: PendingLRP | PendingTask
    cell_id: str
    reason: str
    unreachable: bool  # the work never reached the rep (or it answered with an error status)


@dataclass(slots=True)
class DispatchOutcome:
    lrps_placed: int = 0
    tasks_placed: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    # What each cell took, for the BBS (common/accepted_work.py): work a present cell accepted is never
    # auctioned again, however late its claim arrives.
    accepted: dict[str, AcceptedWork] = field(default_factory=dict)


def group_work(result: AuctionResult, batch: Batch, reps: dict[str, RepAddress]) -> list[CellWork]:
    """The engine's assignments as one CellWork per winning cell."""
    works: dict[str, CellWork] = {}

    def work_for(cell_id: str) -> CellWork:
        work = works.get(cell_id)
        if work is None:
            work = works[cell_id] = CellWork(cell_id, reps[cell_id])
        return work

    for a in result.lrp_assignments:
        work_for(a.cell_id).lrps.append(batch.lrps[(a.process_guid, a.index)])
    for t in result.task_assignments:
        work_for(t.cell_id).tasks.append(batch.tasks[t.task_guid])
    return list(works.values())


class BodyWriter:
    """Work bodies as JSON (`HostWork(desired=..., cells=..., fencing_token=...).model_dump_json()`), each
    desired LRP serialised once per auction however many cells and processes get its instances, and each
    cell's instances of it as one `lrp_groups` entry naming it by position. At 250,000 instances
    serialising (and the rep parsing) the same DesiredLRP per instance would dominate.
    """

    def __init__(self, fencing_token: int = FENCING_TOKEN) -> None:
        self._desired: dict[int, str] = {}
        self.fencing_token = fencing_token  # one auction, one token: every body of it carries the same

    def _desired_json(self, item: PendingLRP) -> str:
        desired = self._desired.get(id(item.desired))
        if desired is None:
            desired = self._desired[id(item.desired)] = item.desired.model_dump_json()
        return desired

    def body(self, works: list[CellWork]) -> bytes:
        """The work of these cells (of one rep process) as one HostWork body."""
        positions: dict[int, int] = {}  # id(desired) -> its position in `desired`
        desired: list[str] = []
        cells: list[str] = []
        for work in works:
            groups: dict[int, list[str]] = {}  # id(desired) -> [its position, index, index, ...]
            for item in work.lrps:
                group = groups.get(id(item.desired))
                if group is None:
                    position = positions.get(id(item.desired))
                    if position is None:
                        position = positions[id(item.desired)] = len(desired)
                        desired.append(self._desired_json(item))
                    group = groups[id(item.desired)] = [str(position)]
                group.append(str(item.index))
            cells.append(f'{json.dumps(work.cell_id)}:{{"lrp_groups":[{_lrp_groups(groups)}],"tasks":[{_tasks(work)}]}}')
        return (
            f'{{"desired":[{",".join(desired)}],"cells":{{{",".join(cells)}}},"fencing_token":{self.fencing_token:d}}}'
        ).encode()


def _lrp_groups(groups: dict[int, list[str]]) -> str:
    return ",".join(f'{{"desired":{g[0]},"indices":[{",".join(g[1:])}]}}' for g in groups.values())


def _tasks(work: CellWork) -> str:
    return ",".join(item.task.model_dump_json() for item in work.tasks)


def tally(works: list[CellWork], rejected: list[list[Rejection]]) -> DispatchOutcome:
    """What was placed (and by which cell) and what came back rejected, given each work's rejections."""
    outcome = DispatchOutcome()
    for work, rejections in zip(works, rejected, strict=True):
        refused = {id(r.item) for r in rejections}
        lrps = [i.key for i in work.lrps if id(i) not in refused] if refused else [i.key for i in work.lrps]
        tasks = [i.key for i in work.tasks if id(i) not in refused]
        outcome.lrps_placed += len(lrps)
        outcome.tasks_placed += len(tasks)
        if lrps or tasks:
            # Built unvalidated from the keys of work this auction sent, which came validated.
            outcome.accepted[work.cell_id] = AcceptedWork.model_construct(
                lrps=lrps_text(lrps), tasks=tasks_text(tasks))
        outcome.rejections.extend(rejections)
    return outcome


class ConcurrentWorkSender:
    """What every transport's work sender shares: its settings, the winning cells grouped by rep process
    (one request per process, or per HOST_WORK_MAX_ITEMS of it), every request at once (at most
    `max_concurrency` in flight), and the answers read back. A transport says how one process's
    request travels (_send_rep)."""

    def __init__(
        self, metrics: Metrics, *, timeout: float = 10.0, max_concurrency: int = 256,
        fencing_token: Callable[[], int] = lambda: FENCING_TOKEN,
    ) -> None:
        self._metrics = metrics
        self._timeout = timeout
        self._max_concurrency = max_concurrency
        self._fencing_token = (
            fencing_token  # the lease's token, read per auction (it changes with the leader)
        )

    async def send(self, works: list[CellWork]) -> DispatchOutcome:
        writer = BodyWriter(self._fencing_token())
        limit = asyncio.Semaphore(self._max_concurrency)
        by_rep: dict[RepAddress, list[CellWork]] = {}
        for work in works:
            by_rep.setdefault(work.rep, []).append(work)
        requests = [(rep, chunk) for rep, ws in by_rep.items() for chunk in _chunks(ws, HOST_WORK_MAX_ITEMS)]
        answers = await asyncio.gather(
            *(self._send_rep(rep, chunk, writer, limit) for rep, chunk in requests)
        )
        sent = [w for _, chunk in requests for w in chunk]
        return tally(sent, [rejected for answer in answers for rejected in answer])

    async def _send_rep(
        self, rep: RepAddress, works: list[CellWork], writer: BodyWriter, limit: asyncio.Semaphore
    ) -> list[list[Rejection]]:
        """Several cells' work in one request to their rep process: each work's rejections, in order."""
        raise NotImplementedError

    def _rejections_in(self, rep: RepAddress, works: list[CellWork], answer: bytes) -> list[list[Rejection]]:
        """Each work's rejections in a rep's HostWorkResult. A cell the answer leaves out (not hosted
        there) had none of its work taken."""
        try:
            result = HostWorkResult.model_validate_json(answer)
        except ValidationError as exc:
            # The rep answered, so it took the work; a body we cannot read must not double-place it.
            self._metrics.bad_reply("work")
            log.warning("unreadable work result", extra={"data": {
                "rep": rep.url or rep.rep_id, "cells": len(works), "errors": exc.error_count(),
                "bytes": len(answer),  # not the body: rejected work carries the app's env (its secrets)
            }})
            return [[] for _ in works]
        left_out = "work not delivered: cell not on its rep"
        _log_undelivered(rep, [w for w in works if w.cell_id not in result.cells], left_out)
        return [
            rejections_from(w, result.cells[w.cell_id])
            if w.cell_id in result.cells
            else _rejected_whole(w, left_out)
            for w in works
        ]


class Dispatcher(ConcurrentWorkSender):
    """Work over HTTP: one POST {rep_url}/work per rep process with winning cells."""

    def __init__(self, reps: RepClients, metrics: Metrics, **options: Any) -> None:
        super().__init__(metrics, **options)
        self._reps = reps

    async def _send_rep(
        self, rep: RepAddress, works: list[CellWork], writer: BodyWriter, limit: asyncio.Semaphore
    ) -> list[list[Rejection]]:
        try:
            async with limit, asyncio.timeout(self._timeout):  # the timeout starts once a slot is free
                self._metrics.request("rep_work")
                body = writer.body(works)
                response = await self._reps.post_json(rep.url + "/work", body, timeout=self._timeout,
                                                      cells=[w.cell_id for w in works])
        except (TimeoutError, RepUnreachable) as exc:
            return undelivered(rep, works, f"work not delivered: {type(exc).__name__}")
        if response.status_code == 409:  # a stale or unknown fencing token: refused whole, as over NATS
            why = _detail(response.content) or "fencing token refused"
            log.info("work refused", extra={"data": {"rep": rep.url, "cells": len(works), "why": why}})
            return [[Rejection(item, w.cell_id, why, False) for item in w.items()] for w in works]
        if response.status_code != 200:
            return undelivered(rep, works, f"work answered {response.status_code}")
        return self._rejections_in(rep, works, response.content)


def _chunks(works: list[CellWork], max_items: int) -> list[list[CellWork]]:
    """Consecutive runs of whole works of at most `max_items` items each (a bigger work alone)."""
    chunks: list[list[CellWork]] = []
    size = 0
    for work in works:
        if not chunks or size + len(work) > max_items:
            chunks.append([])
            size = 0
        chunks[-1].append(work)
        size += len(work)
    return chunks


def undelivered(rep: RepAddress, works: list[CellWork], why: str) -> list[list[Rejection]]:
    """Each work as rejections that never reached the rep (a failed request, any transport)."""
    _log_undelivered(rep, works, why)
    return [_rejected_whole(w, why) for w in works]


def _detail(body: bytes) -> str:
    """The `detail` of an error answer ({"detail": "..."}), or ""."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return ""
    return detail if isinstance(detail, str) else ""


def _rejected_whole(work: CellWork, why: str) -> list[Rejection]:
    return [Rejection(item, work.cell_id, why, True) for item in work.items()]


def _log_undelivered(rep: RepAddress, works: list[CellWork], why: str) -> None:
    """One log line for the process, not one per cell."""
    if works:
        log.warning("work not delivered", extra={"data": {
            "rep": rep.url or rep.rep_id, "cells": len(works), "items": sum(len(w) for w in works),
            "why": why,
        }})


def rejections_from(work: CellWork, result: WorkResult) -> list[Rejection]:
    """What a cell's WorkResult refused, mapped back to the pending items sent."""
    if not result.rejected_lrps and not result.rejected_tasks:
        return []
    reason = result.reason or REJECTED_WITHOUT_REASON
    sent_lrps = {item.key: item for item in work.lrps}
    sent_tasks = {item.key: item for item in work.tasks}
    rejections = []
    for lrp in result.rejected_lrps:
        item = sent_lrps.pop((lrp.desired.process_guid, lrp.index), None)
        if item is not None:  # a rep naming work it was not sent is ignored
            rejections.append(Rejection(item, work.cell_id, reason, False))
    for task in result.rejected_tasks:
        task_item = sent_tasks.pop(task.task_guid, None)
        if task_item is not None:
            rejections.append(Rejection(task_item, work.cell_id, reason, False))
    log.info(
        "work rejected",
        extra={"data": {"cell_id": work.cell_id, "rejected": len(rejections), "reason": reason}},
    )
    return rejections


def split_rejections(rejections: Iterable[Rejection], max_attempts: int) -> tuple[Batch, list[Failure]]:
    """Rejected work with tries left is carried (attempts + 1); the rest becomes placement failures."""
    carried = Batch()
    failures: list[Failure] = []
    for r in rejections:
        attempts = r.item.attempts + 1
        if attempts < max_attempts:
            if isinstance(r.item, PendingLRP):
                carried.add_lrp(PendingLRP(r.item.desired, r.item.index, attempts))
            else:
                carried.add_task(PendingTask(r.item.task, attempts))
            continue
        error = NO_CELLS if r.unreachable else r.reason
        detail = f"cell {r.cell_id}: {r.reason} (after {attempts} attempts)"
        if isinstance(r.item, PendingLRP):
            failures.append(
                Failure(error, detail, process_guid=r.item.desired.process_guid, index=r.item.index)
            )
        else:
            failures.append(Failure(error, detail, task_guid=r.item.task.task_guid))
    return carried, failures
