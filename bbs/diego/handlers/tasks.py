"""Tasks: list, by guid (and their `.r2` forms), desire, cancel, resolving, delete."""

from __future__ import annotations

from common.models import TaskCreate

from ...errors import Conflict
from ..codec import DiegoError
from ..mapping import diego_task, task_body
from ..pb import diego_pb2 as pb
from . import Call


async def tasks(call: Call, request: pb.TasksRequest) -> pb.TasksResponse:
    rows = await call.bbs.tasks.list_all(domain=request.domain or None)
    if request.cell_id:
        rows = [r for r in rows if r.get("cell_id") == request.cell_id]
    return pb.TasksResponse(tasks=[diego_task(r, sees_env=call.sees_env) for r in rows])


async def task(call: Call, request: pb.TaskByGuidRequest) -> pb.TaskResponse:
    row = await call.bbs.tasks.get(request.task_guid)
    return pb.TaskResponse(task=diego_task(row, sees_env=call.sees_env))


async def desire(call: Call, request: pb.DesireTaskRequest) -> pb.TaskLifecycleResponse:
    body = TaskCreate.model_validate(task_body(request.task_guid, request.domain, request.task_definition))
    body = await call.bbs.images.pinned(body)  # a docker:// rootfs pinned to its digest (bbs/images.py)
    try:
        await call.bbs.tasks.desire(body)
    except Conflict as exc:
        raise DiegoError(pb.Error.ResourceExists, str(exc)) from exc
    return pb.TaskLifecycleResponse()


async def _transition(step: object) -> pb.TaskLifecycleResponse:
    try:
        await step  # type: ignore[misc]
    except Conflict as exc:
        raise DiegoError(pb.Error.InvalidStateTransition, str(exc)) from exc
    return pb.TaskLifecycleResponse()


async def cancel(call: Call, request: pb.TaskGuidRequest) -> pb.TaskLifecycleResponse:
    return await _transition(call.bbs.tasks.cancel(request.task_guid))


async def resolving(call: Call, request: pb.TaskGuidRequest) -> pb.TaskLifecycleResponse:
    return await _transition(call.bbs.tasks.resolving(request.task_guid))


async def delete(call: Call, request: pb.TaskGuidRequest) -> pb.TaskLifecycleResponse:
    return await _transition(call.bbs.tasks.delete(request.task_guid))
