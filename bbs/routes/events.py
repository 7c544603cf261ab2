"""/v1/events: the server-sent event stream (bbs/events.py); /v1/events/recent: the recent past."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from common.models import GUID_PATTERN, EventType

from ..events import EventFilter
from ..quotas import QuotaExceeded
from ..recent_past import past_events
from ..records import iso
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


RECENT_MAX = 1000


@router.get("/v1/events/recent")
async def recent_events(
    bbs: TheBBS,
    limit: Annotated[int, Query(ge=1, le=RECENT_MAX)] = 100,
    process_guid: Annotated[str | None, Query(alias="app", pattern=GUID_PATTERN)] = None,
    cell: GuidQuery = None,
    types: Annotated[list[EventType] | None, Query(alias="type")] = None,
) -> dict[str, Any]:
    """The last `limit` events of app, cell, one of the types (when given), oldest first, and the id of the
    newest event on the stream: what a client shows of the past before it follows the stream. From the
    events the stream kept (built while someone followed it) and, for the time they do not cover, from the
    apps' stories and the cluster's rare events, always kept (bbs/recent_past.py, docs/events.md)."""
    wanted = EventFilter(app=process_guid, cell=cell, types=frozenset(types or ()))
    streamed = bbs.hub.recent(limit, wanted)
    past = past_events(bbs.uow.history, bbs.uow.cluster, limit - len(streamed), wanted,
                       before=bbs.hub.covered_since)
    return {"items": past + streamed, "last_event_id": bbs.hub.last_id, "kept": bbs.hub.replay_events,
            "covered_since": iso(bbs.hub.covered_since)}
