"""/v1/desired_lrps: the apps people desire, scale and remove."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from common.models import DesiredLRP, DesiredLRPChange, DesiredLRPCreate

from ..operations.desired_lrps import DesiredLRPs
from ..redact import env_for_caller, without_credentials
from .wire import GuidPath, GuidQuery, items, operations, the_bbs

Operations = Annotated[DesiredLRPs, Depends(operations(lambda bbs: bbs.desired_lrps))]
router = APIRouter()


@router.post("/v1/desired_lrps", status_code=201, response_model=DesiredLRP)
async def desire_lrp(request: Request, body: DesiredLRPCreate, ops: Operations) -> dict[str, Any]:
    # The image pinned before anything is stored (bbs/images.py): a refused one is a 422 naming `image`.
    body = await the_bbs(request).images.pinned(body)
    return without_credentials(await ops.desire(body))


@router.get("/v1/desired_lrps")
async def list_desired(request: Request, ops: Operations, domain: GuidQuery = None) -> Response:
    return items(env_for_caller(request, await ops.list_all(domain)))


@router.get("/v1/desired_lrps/{process_guid}", response_model=DesiredLRP)
async def get_desired(request: Request, process_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    return env_for_caller(request, [await ops.get(process_guid)])[0]


@router.patch("/v1/desired_lrps/{process_guid}", response_model=DesiredLRPChange)
async def update_desired(
    request: Request, process_guid: GuidPath, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    # Any subset of the definition (a new version, rolled out: bbs/operations/rollouts.py), or
    # `instances`/`on_cell_loss` alone (a scale, no version); `modification_tag` and `rollout` besides.
    change = await the_bbs(request).rollouts.patch(process_guid, body)
    return {**change, "desired_lrp": without_credentials(change["desired_lrp"])}


@router.delete("/v1/desired_lrps/{process_guid}", status_code=204)
async def remove_desired(process_guid: GuidPath, ops: Operations) -> Response:
    await ops.remove(process_guid)
    return Response(status_code=204)
