"""Desired LRPs: reads (list, by guid, scheduling and routing infos; their `.r2` forms are the same), and
desire, update, remove through Vendue's own operations."""

from __future__ import annotations

from typing import Any

from common.models import DesiredLRPCreate

from ...errors import Conflict
from ..codec import DiegoError
from ..mapping import diego_lrp, encode, lrp_body, routing_info, scheduling_info, updated_lrp
from ..pb import diego_pb2 as pb
from . import Call


async def _listed(call: Call, request: pb.DesiredLRPsRequest) -> list[pb.DesiredLRP]:
    rows = await call.bbs.desired_lrps.list_all(request.domain or None)
    if len(request.process_guids):
        wanted = set(request.process_guids)
        rows = [r for r in rows if r["process_guid"] in wanted]
    return [diego_lrp(r, sees_env=call.sees_env) for r in rows]


async def desired_lrps(call: Call, request: pb.DesiredLRPsRequest) -> pb.DesiredLRPsResponse:
    return pb.DesiredLRPsResponse(desired_lrps=await _listed(call, request))


async def desired_lrp(call: Call, request: pb.DesiredLRPByProcessGuidRequest) -> pb.DesiredLRPResponse:
    row = await call.bbs.desired_lrps.get(request.process_guid)
    return pb.DesiredLRPResponse(desired_lrp=diego_lrp(row, sees_env=call.sees_env))


async def scheduling_infos(
    call: Call, request: pb.DesiredLRPsRequest
) -> pb.DesiredLRPSchedulingInfosResponse:
    return pb.DesiredLRPSchedulingInfosResponse(
        desired_lrp_scheduling_infos=[scheduling_info(lrp) for lrp in await _listed(call, request)])


async def scheduling_info_by_guid(
    call: Call, request: pb.DesiredLRPByProcessGuidRequest
) -> pb.DesiredLRPSchedulingInfoByProcessGuidResponse:
    row = await call.bbs.desired_lrps.get(request.process_guid)
    return pb.DesiredLRPSchedulingInfoByProcessGuidResponse(
        desired_lrp_scheduling_info=scheduling_info(diego_lrp(row)))


async def routing_infos(call: Call, request: pb.DesiredLRPsRequest) -> pb.DesiredLRPRoutingInfosResponse:
    return pb.DesiredLRPRoutingInfosResponse(
        desired_lrp_routing_infos=[routing_info(lrp) for lrp in await _listed(call, request)])


async def desire(call: Call, request: pb.DesireLRPRequest) -> pb.DesiredLRPLifecycleResponse:
    if not request.HasField("desired_lrp"):
        raise DiegoError(pb.Error.InvalidRequest, "desired_lrp: required")
    body = DesiredLRPCreate.model_validate(lrp_body(request.desired_lrp))
    if await _exists(call, body.process_guid):
        raise DiegoError(pb.Error.ResourceExists, f"desired LRP {body.process_guid!r} exists")
    body = await call.bbs.images.pinned(body)  # a docker:// rootfs pinned to its digest (bbs/images.py)
    try:
        await call.bbs.desired_lrps.desire(body)
    except Conflict as exc:  # desired meanwhile by another caller: the guid is taken all the same
        raise DiegoError(pb.Error.ResourceExists, str(exc)) from exc
    return pb.DesiredLRPLifecycleResponse()


async def _exists(call: Call, process_guid: str) -> bool:
    from ...errors import NotFound

    try:
        await call.bbs.desired_lrps.get(process_guid)
    except NotFound:
        return False
    return True


async def update(call: Call, request: pb.UpdateDesiredLRPRequest) -> pb.DesiredLRPLifecycleResponse:
    row = await call.bbs.desired_lrps.get(request.process_guid)
    changed = updated_lrp(diego_lrp(row), request.update)
    patch: dict[str, Any] = {"diego": encode(changed)}
    if request.update.HasField("instances"):
        patch["instances"] = request.update.instances
    await call.bbs.rollouts.patch(request.process_guid, patch)
    return pb.DesiredLRPLifecycleResponse()


async def remove(call: Call, request: pb.RemoveDesiredLRPRequest) -> pb.DesiredLRPLifecycleResponse:
    await call.bbs.desired_lrps.remove(request.process_guid)
    return pb.DesiredLRPLifecycleResponse()
