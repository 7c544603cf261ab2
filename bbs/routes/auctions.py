"""The auctioneer's reports (/v1/placement_failures, /v1/auctions) and an instance's placement
explanation (`vendue why`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from common.models import INT32_MAX, AuctionReport, PlacementExplanation, PlacementFailures

from ..operations.auctions import Auctions
from .wire import GuidPath, documented_body, json_body, operations

Operations = Annotated[Auctions, Depends(operations(lambda bbs: bbs.auctions))]
router = APIRouter()


@router.post("/v1/placement_failures", status_code=204)
async def placement_failures(body: PlacementFailures, ops: Operations) -> Response:
    await ops.placement_failures(body)
    return Response(status_code=204)


@router.post("/v1/auctions", status_code=204, openapi_extra=documented_body(AuctionReport))
async def auction_report(
    body: Annotated[AuctionReport, json_body(AuctionReport)], ops: Operations
) -> Response:
    await ops.record(body)
    return Response(status_code=204)


@router.get("/v1/actual_lrps/{process_guid}/{index}/placement", response_model=PlacementExplanation)
async def placement(
    process_guid: GuidPath, index: Annotated[int, Path(ge=0, le=INT32_MAX)], ops: Operations
) -> Response:
    return Response(await ops.placement(process_guid, index), media_type="application/json")
