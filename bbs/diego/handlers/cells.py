"""Cells and domains: Vendue's present cells, each with the URL where Diego's client reads its state (the
rep serves it: rep/diego_state.py); domains upserted with their TTL."""

from __future__ import annotations

from typing import Any

from common.diego_state import cell_state_url

from ..codec import DiegoError
from ..mapping import diego_cell
from ..pb import diego_pb2 as pb
from . import Call

MAX_TTL_S = 10 * 365 * 86400


async def cells(call: Call, _request: Any) -> pb.CellsResponse:
    found = await call.bbs.cells.list_all()
    return pb.CellsResponse(cells=[
        diego_cell(c, cell_state_url(str(c.get("rep_url") or ""), str(c["cell_id"]))) for c in found])


async def domains(call: Call, _request: Any) -> pb.DomainsResponse:
    return pb.DomainsResponse(domains=await call.bbs.domains.fresh())


async def upsert_domain(call: Call, request: pb.UpsertDomainRequest) -> pb.UpsertDomainResponse:
    if not request.domain:
        raise DiegoError(pb.Error.InvalidRequest, "domain: required")
    if len(request.domain) > 128:
        raise DiegoError(pb.Error.InvalidRequest, "domain: at most 128 characters")
    await call.bbs.domains.upsert(request.domain, min(request.ttl, MAX_TTL_S))
    return pb.UpsertDomainResponse()


async def ping(_call: Call, _request: Any) -> pb.PingResponse:
    return pb.PingResponse(available=True)
