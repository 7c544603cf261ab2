"""/v1/cells: the reps' heartbeats, the cell listing, an operator's cordon, uncordon and drain, and the
removal of a cell gone for good."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError

from common.auth import require_cells
from common.models import CellPresences, HeartbeatAnswer
from common.urls import callback_refusal

from ..operations.cells import CellMode, Cells
from .wire import GuidPath, documented_body, json_body, operations

Operations = Annotated[Cells, Depends(operations(lambda bbs: bbs.cells))]
router = APIRouter()
removal = APIRouter()  # mounted after the rebalancing routes: the order the API has always listed them in


@router.put("/v1/cells", response_model=HeartbeatAnswer, openapi_extra=documented_body(CellPresences))
async def heartbeats(
    request: Request, body: Annotated[CellPresences, json_body(CellPresences)], ops: Operations
) -> dict[str, list[str]]:
    """The heartbeats; the answer names the cells among them the operator cordoned (or drains): their rep
    refuses work for them, should an auction that started before place some."""
    require_cells(request, (presence.cell_id for presence in body.cells))
    refuse_rep_urls(body)
    cordoned = await asyncio.gather(*(ops.heartbeat(p.cell_id, p) for p in body.cells))
    return {"cordoned": [p.cell_id for p, yes in zip(body.cells, cordoned, strict=True) if yes]}


def refuse_rep_urls(body: CellPresences) -> None:
    """422 for a rep_url the BBS and the auctioneer must never call: a link-local or cloud metadata address
    (the same filter as completion callbacks, common/urls.py, without their allowlist). The wire model
    already refuses what is not an http(s) URL."""
    errors = [
        {"type": "value_error", "loc": ("body", "cells", i, "rep_url"),
         "msg": f"refused rep_url: {problem}", "input": presence.rep_url}
        for i, presence in enumerate(body.cells)
        if (problem := callback_refusal(presence.rep_url)) is not None
    ]
    if errors:
        raise RequestValidationError(errors)


@router.get("/v1/cells")
async def list_cells(ops: Operations, all: bool = False) -> Response:  # noqa: A002 (the query parameter's name)
    return Response(await ops.list_json(expired=all), media_type="application/json")


def cell_mode_route(mode: CellMode) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def set_cell_mode(cell_id: GuidPath, ops: Operations) -> dict[str, Any]:
        return await ops.set_mode(cell_id, mode)

    return set_cell_mode


# An operator's cordon, uncordon and drain (Cells.set_mode): the cell state after.
for mode in get_args(CellMode):
    router.post(f"/v1/cells/{{cell_id}}/{mode}", name=f"{mode}_cell")(cell_mode_route(mode))


@removal.delete("/v1/cells/{cell_id}", status_code=204)
async def remove_cell(cell_id: GuidPath, ops: Operations) -> Response:
    await ops.remove(cell_id)
    return Response(status_code=204)
