"""Liveness, readiness and metrics: what a supervisor, a load balancer and Prometheus ask."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ..core import BBS
from .wire import TheBBS

router = APIRouter()


@router.get("/ping")
async def ping(request: Request, bbs: TheBBS) -> dict[str, bool]:
    return {"ok": True, "ready": await unready_reason(bbs) is None, "insecure": request.app.state.insecure}


@router.get("/livez")
async def livez() -> dict[str, bool]:
    """Serving at all (a process supervisor restarts it otherwise)."""
    return {"ok": True}


@router.get("/readyz")
async def readyz(bbs: TheBBS) -> JSONResponse:
    """503 with the reason while the database or NATS is not there (a load balancer skips it)."""
    reason = await unready_reason(bbs)
    if reason is not None:
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)
    return JSONResponse({"ready": True})


@router.get("/metrics")
async def metrics(bbs: TheBBS) -> Response:
    return Response(bbs.metrics.render(), media_type="text/plain; version=0.0.4")


async def unready_reason(bbs: BBS) -> str | None:
    """Why this BBS cannot serve now (None: it can)."""
    if not await bbs.store.ping():
        return "the database does not answer"
    if not bbs.transport_ready():
        return "not connected to NATS"
    return None
