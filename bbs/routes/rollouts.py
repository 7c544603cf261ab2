"""/v1/desired_lrps/{guid}: a definition changed (PUT; PATCH is in desired_lrps.py), its versions and
rollouts (docs/rollouts.md), restarts of the app or of one instance."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from common.models import (
    DesiredLRPChange,
    DesiredLRPReplace,
    LRPVersions,
    RestartRequest,
    Rollout,
    RolloutAction,
    Rollouts,
    StoreInt,
)

from ..operations.rollouts import Rollouts as RolloutOps
from ..redact import env_for_caller, without_credentials
from .wire import GuidPath, operations

Operations = Annotated[RolloutOps, Depends(operations(lambda bbs: bbs.rollouts))]
router = APIRouter()


@router.put("/v1/desired_lrps/{process_guid}", response_model=DesiredLRPChange)
async def replace_desired(process_guid: GuidPath, body: DesiredLRPReplace, ops: Operations) -> dict[str, Any]:
    change = await ops.replace(process_guid, body)
    return {**change, "desired_lrp": without_credentials(change["desired_lrp"])}


@router.get("/v1/desired_lrps/{process_guid}/rollout", response_model=Rollout)
async def get_rollout(process_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    return await ops.latest(process_guid)


@router.get("/v1/desired_lrps/{process_guid}/rollouts", response_model=Rollouts)
async def list_rollouts(process_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    return {"rollouts": await ops.history(process_guid)}


@router.get("/v1/desired_lrps/{process_guid}/versions", response_model=LRPVersions)
async def list_versions(request: Request, process_guid: GuidPath, ops: Operations) -> dict[str, Any]:
    # A version's env is shown as the desired LRP's is: whole to an admin, values masked to a reader.
    versions = await ops.versions(process_guid)
    definitions = env_for_caller(request, [v["definition"] for v in versions])
    return {"versions": [{**v, "definition": d} for v, d in zip(versions, definitions, strict=True)]}


@router.post("/v1/desired_lrps/{process_guid}/rollout/pause", response_model=Rollout)
async def pause_rollout(process_guid: GuidPath, body: RolloutAction, ops: Operations) -> dict[str, Any]:
    return await ops.pause(process_guid)


@router.post("/v1/desired_lrps/{process_guid}/rollout/resume", response_model=Rollout)
async def resume_rollout(process_guid: GuidPath, body: RolloutAction, ops: Operations) -> dict[str, Any]:
    return await ops.resume(process_guid)


@router.post("/v1/desired_lrps/{process_guid}/rollout/undo", response_model=Rollout)
async def undo_rollout(process_guid: GuidPath, body: RolloutAction, ops: Operations) -> dict[str, Any]:
    return await ops.undo(process_guid)


@router.post("/v1/desired_lrps/{process_guid}/restart", response_model=Rollout)
async def restart_lrp(process_guid: GuidPath, body: RestartRequest, ops: Operations) -> dict[str, Any]:
    return await ops.restart(process_guid, body.all_at_once, body.max_in_flight)


@router.post("/v1/desired_lrps/{process_guid}/instances/{index}/restart", status_code=202)
async def restart_instance(
    process_guid: GuidPath, index: Annotated[StoreInt, Path(ge=0)], body: RolloutAction, ops: Operations
) -> dict[str, Any]:
    await ops.restart_instance(process_guid, index)
    return {}
