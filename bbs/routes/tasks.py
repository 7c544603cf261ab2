"""/v1/tasks: one-off work people desire, cancel and delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError

from common.models import Task, TaskCreate, TaskState

from ..operations.tasks import Tasks
from ..quotas import callback_problem
from ..redact import env_for_caller, without_credentials
from .wire import GuidPath, GuidQuery, TheBBS, items, operations

Operations = Annotated[Tasks, Depends(operations(lambda bbs: bbs.tasks))]
router = APIRouter()


@router.post("/v1/tasks", status_code=201, response_model=Task)
async def desire_task(body: TaskCreate, bbs: TheBBS) -> dict[str, Any]:
    if (problem := callback_problem(bbs.settings, body.completion_callback_url)) is not None:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "completion_callback_url"),
                    "msg": f"refused callback URL: {problem} (allow it: --callback-allow)",
                    "input": body.completion_callback_url,
                }
            ]
        )
    body = await bbs.images.pinned(body)  # before anything is stored: a refused image is a 422 (images.py)
    return without_credentials(await bbs.tasks.desire(body))


@router.get("/v1/tasks")
async def list_tasks(
    request: Request, ops: Operations, state: TaskState | None = None, domain: GuidQuery = None
) -> Response:
    return items(env_for_caller(request, await ops.list_all(state.value if state else None, domain)))


@router.get("/v1/tasks/{task_guid}", response_model=Task)
async def get_task(request: Request, task_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    return env_for_caller(request, [await ops.get(task_guid)])[0]


@router.post("/v1/tasks/{task_guid}/cancel", response_model=Task)
async def cancel_task(task_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    return without_credentials(await ops.cancel(task_guid))


@router.delete("/v1/tasks/{task_guid}", status_code=204)
async def delete_task(task_guid: GuidPath, ops: Operations) -> Response:
    await ops.delete(task_guid)
    return Response(status_code=204)
