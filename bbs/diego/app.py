"""The Diego API's HTTP app (docs/diego-api.md): Diego's routes (routes.py, events.py) over the BBS's own
operations, behind the same authorization middleware as Vendue's API with its own table (policy.py). Served
on its own listener (`--diego-listen`, bbs/server.py), with the BBS's certificate and CA."""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from common.auth import add_auth, identity_of, token_identity
from common.http_metrics import add_http_metrics
from common.request_id import add_request_id
from common.tls import Identity

from ..core import BBS
from .codec import DiegoError, answer, as_diego_error, decode, error_answer
from .events import EVENT_STREAMS, Renderer, sse_stream
from .handlers import Call
from .pb import diego_pb2 as pb
from .policy import DIEGO_POLICY, SEES_ENV
from .routes import ROUTES, DiegoRoute

log = logging.getLogger("bbs.diego")
MAX_BODY_BYTES = 8 * 1024 * 1024  # a desire carries a whole DesiredLRP: far below this


def _sees_env(request: Request) -> bool:
    identity = identity_of(request)
    return identity is not None and identity.role in SEES_ENV


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise DiegoError(pb.Error.InvalidRequest, f"the body is over {MAX_BODY_BYTES} bytes")
    return body


def _endpoint(route: DiegoRoute) -> Any:
    async def endpoint(request: Request) -> Response:
        bbs: BBS = request.app.state.bbs
        try:
            message = decode(route.request, await _body(request)) if route.request is not None else None
            return answer(await route.handler(Call(bbs, _sees_env(request)), message))
        except Exception as exc:
            error = as_diego_error(exc)
            if error is None:
                raise
            return error_answer(route.response, error)

    endpoint.__name__ = route.path
    return endpoint


def _event_endpoint(stream: str) -> Any:
    async def endpoint(request: Request) -> Response:
        bbs: BBS = request.app.state.bbs
        cell_id = ""
        body = await _body(request) if request.method == "POST" else b""
        if body:
            try:
                cell_id = decode(pb.EventsByCellId, body).cell_id
            except DiegoError as exc:
                return Response(str(exc), status_code=400, media_type="text/plain")
        if bbs.hub.full(bbs.settings.max_event_subscribers):
            return Response("too many event subscribers", status_code=429, media_type="text/plain")
        return StreamingResponse(sse_stream(bbs.hub.follow(), Renderer(stream, cell_id)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return endpoint


def create_diego_app(bbs: BBS, *, insecure: bool) -> Starlette:
    """Diego's API over `bbs`. `insecure`: authorization off (every caller an admin), as the BBS's own."""
    routes = [Route(r.path, _endpoint(r), methods=["POST"]) for r in ROUTES]
    routes += [Route(path, _event_endpoint(stream), methods=["GET", "POST"])
               for path, stream in EVENT_STREAMS.items()]
    app = Starlette(routes=routes)
    app.state.bbs = bbs

    async def verify_bearer(secret: str) -> Identity | None:
        record = await bbs.tokens.verify(secret)
        return None if record is None else token_identity(record.role, record.name, record.id)

    add_auth(app, DIEGO_POLICY, verify_token=verify_bearer, insecure=insecure, service="bbs-diego")
    # Counted with the BBS's own requests (its /metrics), each by its route; the request id as everywhere.
    add_http_metrics(app, bbs.metrics.http)
    add_request_id(app)
    return app
