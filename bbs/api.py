"""The BBS's HTTP API (FastAPI): one router per resource (bbs/routes/), every route behind the authorization
table of bbs/policy.py; the routes are listed, with who may call each, in docs/wire-protocol.md (generated
from this app: tests/docs/routes.py)."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.requests import ClientDisconnect

from common.auth import add_auth, token_identity
from common.http_metrics import add_http_metrics, mark_refusal
from common.limits import add_limits
from common.request_id import add_request_id
from common.tls import Identity
from common.validation import add_validation_handler

from .core import BBS
from .dashboard import SESSION_COOKIE, add_dashboard
from .errors import Conflict, Fenced, NotFound
from .policy import POLICY
from .quotas import QuotaExceeded
from .routes import (
    actual_lrps,
    app_events,
    auctions,
    blobs,
    cells,
    desired_lrps,
    events,
    health,
    leases,
    logs,
    rebalancing,
    rollouts,
    tasks,
    tokens,
    usage,
)
from .routes import (
    exec as exec_route,
)
from .store.database import database_unavailable

log = logging.getLogger("bbs.api")
CLIENT_GONE = 499  # nginx's "client closed request": logged and counted, never seen by the client
# The reps' and the auctioneer's batches (common/limits.py): at 250 cells a rep process and 250,000 instances,
# a lifecycle round is up to ~18 MB and a failed auction's report ~36 MB, under the bulk body cap; an
# auction's explanations (10,000 at most) ~10 MB.
BULK_ROUTES = {("POST", "/v1/lifecycle"), ("PUT", "/v1/cells"), ("POST", "/v1/placement_failures"),
               ("POST", "/v1/auctions")}
# A request the database could not take (down, restarting, the connection lost mid-request: the pool checks
# the next one before use) is answered 503 with this Retry-After, as a momentary state; every client of
# the BBS retries those. Said in the log at most once every DATABASE_LOG_EVERY_S, not once a request.
DATABASE_RETRY_AFTER_S = 1
DATABASE_LOG_EVERY_S = 10.0
# In the order the API lists them (its OpenAPI document, docs/wire-protocol.md).
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    desired_lrps.router,
    rollouts.router,
    app_events.router,
    actual_lrps.router,
    usage.router,
    auctions.router,
    tasks.router,
    logs.router,
    exec_route.router,
    cells.router,
    rebalancing.router,
    cells.removal,
    leases.router,
    events.router,
    tokens.router,
    blobs.router,
)
# Bodies the route streams and bounds itself (--blob-max-bytes), timed from their latest part.
STREAMED_ROUTES = (("PUT", "/v1/blobs/"),)


def create_app(bbs: BBS, *, insecure: bool | None = None) -> FastAPI:
    """The BBS's API. `insecure=True`: authorization off, every caller an admin named "insecure" (what
    `--insecure`, or no TLS files on a loopback address, serves; in-process tests too). None: as the
    settings say."""
    if insecure is None:
        insecure = bbs.settings.serving_files(bbs.settings.listen) is None
    # No /redoc and no OAuth2 redirect page: every route has a row in the table, and these would only add
    # rows.
    app = FastAPI(title="Vendue BBS", version="1", redoc_url=None, swagger_ui_oauth2_redirect_url=None)
    app.state.bbs, app.state.insecure = bbs, insecure  # what the routes' dependencies read (routes/wire.py)
    add_validation_handler(app)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(_: Request, exc: ClientDisconnect) -> Response:
        return Response(status_code=CLIENT_GONE)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict) -> JSONResponse:
        if isinstance(exc, Fenced):
            mark_refusal(request.scope, "fenced")
        return JSONResponse({"detail": str(exc)}, status_code=409)

    database_logged_at = [float("-inf")]

    async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
        if not database_unavailable(exc):
            raise exc  # a statement the database refused (a constraint, a bug): not the database's absence
        now = time.monotonic()
        if now - database_logged_at[0] >= DATABASE_LOG_EVERY_S:
            database_logged_at[0] = now
            log.warning("the database is unavailable; answering 503", extra={"data": {
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}})
        return JSONResponse({"detail": "the database is unavailable; try again"}, status_code=503,
                            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})

    # The driver's own errors when no connection can be made at all (refused, reset) reach us unwrapped.
    for unavailable in (DBAPIError, ConnectionError):
        app.add_exception_handler(unavailable, _database_unavailable)

    @app.exception_handler(QuotaExceeded)
    async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=429)

    for router in ROUTERS:
        # The routes themselves, not include_router's lazy wrapper: the authorization middleware
        # (common/auth.py) and the route table of docs/wire-protocol.md read app.router.routes.
        app.router.routes.extend(router.routes)

    async def verify_bearer(secret: str) -> Identity | None:
        """The middleware's token check: the database itself, no cache (a revoked token fails at once)."""
        record = await bbs.tokens.verify(secret)
        return None if record is None else token_identity(record.role, record.name, record.id)

    add_dashboard(app, bbs)
    add_auth(app, POLICY, verify_token=verify_bearer, insecure=insecure, service="bbs",
             session_cookie=SESSION_COOKIE)
    add_limits(app, bbs.settings, bulk=BULK_ROUTES, streamed=STREAMED_ROUTES)
    add_http_metrics(app, bbs.metrics.http)
    add_request_id(app)
    return app
