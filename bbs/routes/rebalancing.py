"""/v1/rebalance: plan (and carry out) moves of running instances toward a better spread."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from common.models import RebalancePlan, RebalanceRequest, RebalanceStatus

from ..operations.rebalancing import Rebalancing
from .wire import operations

Operations = Annotated[Rebalancing, Depends(operations(lambda bbs: bbs.rebalancing))]
router = APIRouter()


@router.post("/v1/rebalance", response_model=RebalancePlan)
async def rebalance(body: RebalanceRequest, ops: Operations) -> dict[str, Any]:
    return await ops.request(body)


@router.get("/v1/rebalance", response_model=RebalanceStatus)
async def rebalance_status(ops: Operations) -> dict[str, Any]:
    return ops.status()
