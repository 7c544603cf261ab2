"""/v1/actual_lrps and /v1/lifecycle: the instances, and the reps' reports of what their cells did."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from common.auth import require_cells
from common.models import ActualLRPSummary, ActualState, HostLifecycle, HostLifecycleResult, Presence

from ..lifecycle_wire import HOST_REPORT, HostReport
from ..operations.actual_lrps import ActualLRPs
from .wire import GuidQuery, documented_body, items, json_body, operations, unless_client_gone

Operations = Annotated[ActualLRPs, Depends(operations(lambda bbs: bbs.actual_lrps))]
router = APIRouter()


@router.get("/v1/actual_lrps")
async def list_actuals(
    ops: Operations,
    process_guid: GuidQuery = None,
    cell_id: GuidQuery = None,
    state: ActualState | None = None,
    presence: Presence | None = None,
) -> Response:
    rows = await ops.list_all(
        process_guid=process_guid,
        cell_id=cell_id,
        state=state.value if state else None,
        presence=presence.value if presence else None,
    )
    return items(rows)


@router.get("/v1/actual_lrps/summary", response_model=ActualLRPSummary)
async def summarize_actuals(ops: Operations, process_guid: GuidQuery = None) -> dict[str, Any]:
    return await ops.summarize(process_guid)


@router.post(
    "/v1/lifecycle", response_model=HostLifecycleResult, openapi_extra=documented_body(HostLifecycle)
)
async def host_lifecycle(
    request: Request, body: Annotated[HostReport, json_body(HOST_REPORT)], ops: Operations
) -> dict[str, Any]:
    cells = body["cells"]
    require_cells(request, cells)

    async def every_cell() -> list[dict[str, Any]]:
        # Each cell's report joins the same group commit as other reps' reports: one transaction for all.
        # In a coroutine (a task once started), not a bare gather: a cancelled gather future ends with
        # a CancelledError *exception* rather than cancelled, and a client gone would be a 500.
        return await asyncio.gather(*(ops.lifecycle(cid, report) for cid, report in cells.items()))

    results = await unless_client_gone(request, every_cell())
    return {"cells": dict(zip(cells, results, strict=True))}
