"""/v1/desired_lrps/{guid}/events: an app's last events, kept per app by this BBS (bbs/app_history.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from common.models.app_events import AppEvents

from .wire import GuidPath, TheBBS

router = APIRouter()


@router.get("/v1/desired_lrps/{process_guid}/events", response_model=AppEvents)
async def app_events(process_guid: GuidPath, bbs: TheBBS) -> dict[str, Any]:
    """Oldest first; with the restart policy they are read against (when a crashed instance restarts)."""
    await bbs.desired_lrps.get(process_guid)  # 404 for an app that does not exist
    history = bbs.uow.history
    return {"events": history.recent(process_guid), "kept": history.per_app,
            "restart_policy": dataclasses.asdict(bbs.actual_lrps.policy)}
