"""Actual LRPs: the list with Diego's filters, Cloud Controller's batched read by process guids, and
retiring an instance (Vendue restarts that index: a new instance replaces it, as in Diego)."""

from __future__ import annotations

from typing import Any

from ...errors import NotFound
from ..mapping import diego_actual
from ..pb import diego_pb2 as pb
from . import Call


def _matches(row: dict[str, Any], request: pb.ActualLRPsRequest) -> bool:
    return ((not request.domain or row.get("domain") == request.domain)
            and (not request.HasField("index") or row.get("index") == request.index))


async def actual_lrps(call: Call, request: pb.ActualLRPsRequest) -> pb.ActualLRPsResponse:
    rows = await call.bbs.actual_lrps.list_all(process_guid=request.process_guid or None,
                                                cell_id=request.cell_id or None)
    return pb.ActualLRPsResponse(actual_lrps=[diego_actual(r) for r in rows if _matches(r, request)])


async def by_process_guids(call: Call, request: pb.ActualLRPsByProcessGuidsRequest) -> pb.ActualLRPsResponse:
    out: list[pb.ActualLRP] = []
    for guid in dict.fromkeys(request.process_guids):
        out.extend(diego_actual(r) for r in await call.bbs.actual_lrps.list_all(process_guid=guid))
    return pb.ActualLRPsResponse(actual_lrps=out)


async def retire(call: Call, request: pb.RetireActualLRPRequest) -> pb.ActualLRPLifecycleResponse:
    key = request.actual_lrp_key
    rows = await call.bbs.actual_lrps.list_all(process_guid=key.process_guid)
    if not any(r.get("index") == key.index for r in rows):
        raise NotFound(f"actual LRP {key.process_guid!r} index {key.index} not found")
    await call.bbs.rollouts.restart_instance(key.process_guid, key.index)
    return pb.ActualLRPLifecycleResponse()
