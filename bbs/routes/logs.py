"""/v1/logs/{process_guid} and /v1/tasks/{task_guid}/logs: instances' and tasks' output, relayed from the
reps (bbs/log_relay.py). Admin only (bbs/policy.py): an app's output can hold its secrets."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from common.streaming import BoundedStreamingResponse, with_heartbeats

from ..core import BBS
from ..errors import NotFound
from ..log_relay import LogAsk, Rep, Targets, client_line, relay, rep_fetcher
from ..records import COMPLETED, RESOLVING, TASK_RUNNING, CellRecord, TaskRecord
from .wire import GuidPath, TheBBS

router = APIRouter()
MAX_RECENT = 100_000
NDJSON = "application/x-ndjson"
Recent = Annotated[int | None, Query(ge=0, le=MAX_RECENT, description="The last N lines (default: 100, "
                                                                      "10 when following).")]
Since = Annotated[int, Query(ge=0, description="Only lines after this Unix time, in nanoseconds.")]
Stream = Annotated[Literal["stdout", "stderr"] | None, Query(description="One stream only.")]
Follow = Annotated[bool, Query(description="Go on with what is printed from now on, until the client "
                                           "leaves.")]


def _default_recent(recent: int | None, follow: bool) -> int:
    return recent if recent is not None else (10 if follow else 100)


def _by_rep(cells: list[CellRecord]) -> list[Rep]:
    grouped: dict[str, list[str]] = {}
    for cell in cells:
        if cell.rep_url:
            grouped.setdefault(cell.rep_url.rstrip("/"), []).append(cell.cell_id)
    return [Rep(url, tuple(ids)) for url, ids in grouped.items()]


def _answer(bbs: BBS, ask: LogAsk, targets: Targets) -> BoundedStreamingResponse:
    lines = relay(ask, targets, rep_fetcher(bbs.outbound.client))
    return BoundedStreamingResponse(with_heartbeats(lines) if ask.follow else lines, media_type=NDJSON,
                                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/v1/logs/{process_guid}")
async def app_logs(bbs: TheBBS, process_guid: GuidPath, index: Annotated[int | None, Query(ge=0)] = None,
                   recent: Recent = None, since: Since = 0, stream: Stream = None,
                   follow: Follow = False) -> BoundedStreamingResponse:
    """The app's instances' output (one index's, when given), merged in time order: JSON lines with time,
    index, cell, instance_guid, stream and text. Without `follow`, every present cell is asked (a crashed
    instance's logs stay on its cell); following, the cells of its instances, looked up again every second."""
    async with bbs.uow.read() as tx:
        known = await tx.get_desired(process_guid) is not None
        if not known and not await tx.list_actuals(process_guid=process_guid):
            raise NotFound(f"app {process_guid!r} not found")
    ask = LogAsk(process_guid=process_guid, index=index, recent=_default_recent(recent, follow),
                 since_ns=since, stream=stream, follow=follow)

    async def targets() -> list[Rep]:
        async with bbs.uow.read() as tx:
            cells = await tx.list_cells(present_at=time.time())
            if not follow:
                return _by_rep(cells)
            actuals = await tx.list_actuals(process_guid=process_guid)
        held = {a.cell_id for a in actuals if a.cell_id and (index is None or a.index == index)}
        return _by_rep([c for c in cells if c.cell_id in held])

    return _answer(bbs, ask, targets)


@router.get("/v1/tasks/{task_guid}/logs")
async def task_logs(bbs: TheBBS, task_guid: GuidPath, recent: Recent = None, since: Since = 0,
                    stream: Stream = None, follow: Follow = False) -> BoundedStreamingResponse:
    """A task's output: from its rep while it runs (following, until it ends); once it completed, its
    result (the last part of its output, kept with the task: --task-retention) as lines of one time."""
    async with bbs.uow.read() as tx:
        task = await tx.get_task(task_guid)
    if task is None:
        raise NotFound(f"task {task_guid!r} not found")
    wanted = _default_recent(recent, follow)
    if task.state in (COMPLETED, RESOLVING):
        return BoundedStreamingResponse(_result_lines(task, wanted, since, stream), media_type=NDJSON)
    ask = LogAsk(task_guid=task_guid, recent=wanted, since_ns=since, stream=stream, follow=follow)

    async def targets() -> list[Rep] | None:
        async with bbs.uow.read() as tx:
            current = await tx.get_task(task_guid)
            if current is None or current.state in (COMPLETED, RESOLVING):
                return None
            if current.state != TASK_RUNNING or not current.cell_id:
                return []  # pending: followed once it runs
            cell = await tx.get_cell(current.cell_id)
        return _by_rep([cell]) if cell is not None else []

    async def lines() -> AsyncGenerator[bytes, None]:
        relayed = False
        source = relay(ask, targets, rep_fetcher(bbs.outbound.client))
        async with contextlib.aclosing(source) as relayed_lines:
            async for chunk in relayed_lines:
                relayed = relayed or bool(chunk.strip())
                yield chunk
        if follow and not relayed:  # it ran and ended before its rep was followed: what it left
            async with bbs.uow.read() as tx:
                done = await tx.get_task(task_guid)
            if done is not None and done.state in (COMPLETED, RESOLVING):
                async for chunk in _result_lines(done, wanted, since, stream):
                    yield chunk

    return BoundedStreamingResponse(with_heartbeats(lines()) if follow else lines(), media_type=NDJSON,
                                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _result_lines(task: TaskRecord, recent: int, since: int,
                        stream: str | None) -> AsyncIterator[bytes]:
    """A completed task's result (the last part of its output, both streams as they came), as lines
    stamped with its completion time."""
    finished = task.first_completed_at if task.first_completed_at is not None else task.updated_at
    ns = int(finished * 1e9)
    texts = task.result.splitlines() if stream != "stderr" and ns > since and recent > 0 else []
    for text in texts[-recent:] if texts else []:
        yield client_line({"ns": ns, "guid": task.task_guid, "cell_id": task.cell_id, "stream": "output",
                           "text": text})
