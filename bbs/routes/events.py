"""/v1/events: the server-sent event stream (bbs/events.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from common.models import GUID_PATTERN, EventType

from ..events import EventFilter
from ..quotas import QuotaExceeded
from ..sse_gzip import accepts_gzip
from .wire import GuidQuery, TheBBS

router = APIRouter()


@router.get("/v1/events")
async def events(
    bbs: TheBBS,
    process_guid: Annotated[str | None, Query(alias="app", pattern=GUID_PATTERN)] = None,
    cell: GuidQuery = None,
    types: Annotated[list[EventType] | None, Query(alias="type")] = None,
    last_event_id: Annotated[str | None, Header(max_length=200)] = None,
    accept_encoding: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Server-sent events, only those of app (process_guid) and cell and of one of the types when
    given; Last-Event-ID: what was missed since, or a `resync` event (bbs/events.py). Gzipped for a
    client that accepts it."""
    limit = bbs.settings.max_event_subscribers
    if bbs.hub.full(limit):
        raise QuotaExceeded(f"quota: at most {limit} event stream subscribers (max_event_subscribers)")
    wanted = EventFilter(app=process_guid, cell=cell, types=frozenset(types or ()))
    gzip = accepts_gzip(accept_encoding)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Vary": "Accept-Encoding"}
    if gzip:
        headers["Content-Encoding"] = "gzip"
    return StreamingResponse(
        bbs.hub.stream(limit, wanted, last_event_id, gzip=gzip),
        media_type="text/event-stream",
        headers=headers,
    )
