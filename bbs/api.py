"""The BBS's HTTP API (FastAPI): its routes are listed, with who may call each, in docs/wire-protocol.md
(generated from this app: tests/docs/routes.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar, get_args

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect

from common.auth import add_auth, require_cells, token_identity
from common.http_metrics import add_http_metrics, mark_refusal
from common.interrupt import Interrupted, unless
from common.limits import add_limits
from common.models import (
    GUID_PATTERN,
    INT32_MAX,
    ActualLRPSummary,
    ActualState,
    AuctionReport,
    CellPresences,
    DesiredLRP,
    DesiredLRPCreate,
    DesiredLRPUpdate,
    EventType,
    HeartbeatAnswer,
    HostLifecycle,
    HostLifecycleResult,
    Lease,
    LeaseRequest,
    PlacementExplanation,
    PlacementFailures,
    Presence,
    RebalancePlan,
    RebalanceRequest,
    RebalanceStatus,
    Task,
    TaskCreate,
    TaskState,
    TokenCreate,
    TokenCreated,
    TokenIdentity,
    TokenVerify,
)
from common.request_id import add_request_id
from common.tls import Identity

from .dashboard import SESSION_COOKIE, add_dashboard
from .events import EventFilter
from .lifecycle_wire import HOST_REPORT, HostReport
from .policy import POLICY, require_lease_holder
from .quotas import QuotaExceeded, callback_problem
from .redact import env_for_caller
from .service import BBS, CellMode, Conflict, Fenced, NotFound
from .sse_gzip import accepts_gzip

GuidPath = Annotated[str, Path(pattern=GUID_PATTERN)]
# A filter names a guid: anything else matches nothing, and a NUL would reach the database (a 500 on
# PostgreSQL).
GuidQuery = Annotated[str | None, Query(pattern=GUID_PATTERN)]
Body = TypeVar("Body", bound=BaseModel)
Result = TypeVar("Result")
CLIENT_GONE = 499  # nginx's "client closed request": logged and counted, never seen by the client
# The reps' and the auctioneer's batches (common/limits.py): at 250 cells a rep process and 250,000 instances,
# a lifecycle round is up to ~18 MB and a failed auction's report ~36 MB, under the bulk body cap; an
# auction's explanations (10,000 at most) ~10 MB.
BULK_ROUTES = {("POST", "/v1/lifecycle"), ("PUT", "/v1/cells"), ("POST", "/v1/placement_failures"),
               ("POST", "/v1/auctions")}


async def unless_client_gone(request: Request, work: Awaitable[Result]) -> Result:
    """`work`, cancelled if the client disconnects first (ClientDisconnect). A rep whose report timed
    out sends it again; under load, the BBS must not also apply the copy nobody waits for: a
    cancelled report leaves its group commit before its batch starts."""

    async def client_gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        return await unless(work, client_gone())
    except Interrupted:
        raise ClientDisconnect() from None


def json_body(model: type[Body] | TypeAdapter[Any]) -> Any:
    """The request body as `model` (a model, or a TypeAdapter of plain data), validated straight from
    its bytes by pydantic's JSON parser: for the reps' reports (10,000 instances in one body) that is
    several times faster than FastAPI's json.loads-then-validate. Errors are FastAPI's 422, each
    located under "body" as usual, without the input: for a body that is not JSON that is the raw bytes,
    which need not be UTF-8 (and could be megabytes)."""
    validate = model.validate_json if isinstance(model, TypeAdapter) else model.model_validate_json

    async def parse(request: Request) -> Any:
        try:
            return validate(await request.body())
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            raise RequestValidationError(
                [{**error, "loc": ("body", *error["loc"])} for error in errors]
            ) from None

    return Depends(parse)


def documented_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route whose body json_body validates: the schema FastAPI cannot see, so that
    clients and the API fuzzer (tests/security/test_schemathesis.py) know it. Self-contained: its
    definitions are written in place (the models are not recursive)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        return [inline(value) for value in node] if isinstance(node, list) else node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


def cell_mode_route(bbs: BBS, mode: CellMode) -> Callable[[str], Awaitable[dict[str, Any]]]:
    async def set_cell_mode(cell_id: GuidPath) -> dict[str, Any]:
        return await bbs.set_cell_mode(cell_id, mode)

    return set_cell_mode


def items(rows: list[dict[str, Any]]) -> Response:
    """{"items": [...]} encoded directly: the rows are JSON data already, and FastAPI's generic
    encoder would spend seconds walking a 10,000-instance list."""
    return Response(json.dumps({"items": rows}, separators=(",", ":")), media_type="application/json")


def create_app(bbs: BBS, *, insecure: bool | None = None) -> FastAPI:
    """The BBS's API, every route behind the authorization table of bbs/policy.py. `insecure=True`:
    authorization off, every caller an admin named "insecure" (what `--insecure`, or no TLS files on a
    loopback address, serves; in-process tests too). None: as the settings say."""
    if insecure is None:
        insecure = bbs.settings.serving_files(bbs.settings.listen) is None
    # No /redoc and no OAuth2 redirect page: every route has a row in the table, and these would only add
    # rows.
    app = FastAPI(title="Vendue BBS", version="1", redoc_url=None, swagger_ui_oauth2_redirect_url=None)

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

    @app.exception_handler(QuotaExceeded)
    async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=429)

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True, "ready": await unready_reason(bbs) is None, "insecure": insecure}

    @app.get("/livez")
    async def livez() -> dict[str, bool]:
        """Serving at all (a process supervisor restarts it otherwise)."""
        return {"ok": True}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """503 with the reason while the database or NATS is not there (a load balancer skips it)."""
        reason = await unready_reason(bbs)
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(bbs.metrics.render(), media_type="text/plain; version=0.0.4")

    # --- desired LRPs -------------------------------------------------------------------------

    @app.post("/v1/desired_lrps", status_code=201, response_model=DesiredLRP)
    async def desire_lrp(body: DesiredLRPCreate) -> dict[str, Any]:
        return await bbs.desire_lrp(body)

    @app.get("/v1/desired_lrps")
    async def list_desired(request: Request, domain: GuidQuery = None) -> Response:
        return items(env_for_caller(request, await bbs.list_desired(domain)))

    @app.get("/v1/desired_lrps/{process_guid}", response_model=DesiredLRP)
    async def get_desired(request: Request, process_guid: GuidPath) -> dict[str, Any]:
        return env_for_caller(request, [await bbs.get_desired(process_guid)])[0]

    @app.patch("/v1/desired_lrps/{process_guid}", response_model=DesiredLRP)
    async def update_desired(process_guid: GuidPath, body: DesiredLRPUpdate) -> dict[str, Any]:
        return await bbs.update_desired(process_guid, body)

    @app.delete("/v1/desired_lrps/{process_guid}", status_code=204)
    async def remove_desired(process_guid: GuidPath) -> Response:
        await bbs.remove_desired(process_guid)
        return Response(status_code=204)

    # --- actual LRPs and the reps' reports ------------------------------------------------------

    @app.get("/v1/actual_lrps")
    async def list_actuals(
        process_guid: GuidQuery = None,
        cell_id: GuidQuery = None,
        state: ActualState | None = None,
        presence: Presence | None = None,
    ) -> Response:
        rows = await bbs.list_actuals(
            process_guid=process_guid,
            cell_id=cell_id,
            state=state.value if state else None,
            presence=presence.value if presence else None,
        )
        return items(rows)

    @app.get("/v1/actual_lrps/summary", response_model=ActualLRPSummary)
    async def summarize_actuals(process_guid: GuidQuery = None) -> dict[str, Any]:
        return await bbs.summarize_actuals(process_guid)

    @app.post(
        "/v1/lifecycle", response_model=HostLifecycleResult, openapi_extra=documented_body(HostLifecycle)
    )
    async def host_lifecycle(
        request: Request, body: Annotated[HostReport, json_body(HOST_REPORT)]
    ) -> dict[str, Any]:
        cells = body["cells"]
        require_cells(request, cells)

        async def every_cell() -> list[dict[str, Any]]:
            # Each cell's report joins the same group commit as other reps' reports: one transaction for all.
            # In a coroutine (a task once started), not a bare gather: a cancelled gather future ends with
            # a CancelledError *exception* rather than cancelled, and a client gone would be a 500.
            return await asyncio.gather(*(bbs.lifecycle(cid, report) for cid, report in cells.items()))

        results = await unless_client_gone(request, every_cell())
        return {"cells": dict(zip(cells, results, strict=True))}

    @app.post("/v1/placement_failures", status_code=204)
    async def placement_failures(body: PlacementFailures) -> Response:
        await bbs.placement_failures(body)
        return Response(status_code=204)

    @app.post("/v1/auctions", status_code=204, openapi_extra=documented_body(AuctionReport))
    async def auction_report(body: Annotated[AuctionReport, json_body(AuctionReport)]) -> Response:
        await bbs.record_auction(body)
        return Response(status_code=204)

    @app.get("/v1/actual_lrps/{process_guid}/{index}/placement", response_model=PlacementExplanation)
    async def placement(process_guid: GuidPath, index: Annotated[int, Path(ge=0, le=INT32_MAX)]) -> Response:
        return Response(await bbs.placement(process_guid, index), media_type="application/json")

    # --- tasks ----------------------------------------------------------------------------------

    @app.post("/v1/tasks", status_code=201, response_model=Task)
    async def desire_task(body: TaskCreate) -> dict[str, Any]:
        if (problem := callback_problem(bbs.settings, body.completion_callback_url)) is not None:
            raise RequestValidationError(
                [
                    {
                        "type": "value_error",
                        "loc": ("body", "completion_callback_url"),
                        "msg": f"refused callback URL: {problem} (allow it: --callback-allow)",
                        "input": body.completion_callback_url,
                    }
                ]
            )
        return await bbs.desire_task(body)

    @app.get("/v1/tasks")
    async def list_tasks(
        request: Request, state: TaskState | None = None, domain: GuidQuery = None
    ) -> Response:
        return items(env_for_caller(request, await bbs.list_tasks(state.value if state else None, domain)))

    @app.get("/v1/tasks/{task_guid}", response_model=Task)
    async def get_task(request: Request, task_guid: GuidPath) -> dict[str, Any]:
        return env_for_caller(request, [await bbs.get_task(task_guid)])[0]

    @app.post("/v1/tasks/{task_guid}/cancel", response_model=Task)
    async def cancel_task(task_guid: GuidPath) -> dict[str, Any]:
        return await bbs.cancel_task(task_guid)

    @app.delete("/v1/tasks/{task_guid}", status_code=204)
    async def delete_task(task_guid: GuidPath) -> Response:
        await bbs.delete_task(task_guid)
        return Response(status_code=204)

    # --- cells and events -----------------------------------------------------------------------

    @app.put("/v1/cells", response_model=HeartbeatAnswer, openapi_extra=documented_body(CellPresences))
    async def heartbeats(
        request: Request, body: Annotated[CellPresences, json_body(CellPresences)]
    ) -> dict[str, list[str]]:
        """The heartbeats; the answer names the cells among them the operator cordoned (or drains): their rep
        refuses work for them, should an auction that started before place some."""
        require_cells(request, (presence.cell_id for presence in body.cells))
        cordoned = await asyncio.gather(*(bbs.heartbeat(p.cell_id, p) for p in body.cells))
        return {"cordoned": [p.cell_id for p, yes in zip(body.cells, cordoned, strict=True) if yes]}

    @app.get("/v1/cells")
    async def list_cells(all: bool = False) -> Response:  # noqa: A002 (the query parameter's name)
        return items(await bbs.list_cells(expired=all))

    # An operator's cordon, uncordon and drain (bbs/service.py set_cell_mode): the cell state after.
    for mode in get_args(CellMode):
        app.post(f"/v1/cells/{{cell_id}}/{mode}", name=f"{mode}_cell")(cell_mode_route(bbs, mode))

    # --- rebalancing (bbs/rebalancer.py) --------------------------------------------------------

    @app.post("/v1/rebalance", response_model=RebalancePlan)
    async def rebalance(body: RebalanceRequest) -> dict[str, Any]:
        if body.app is not None:
            async with bbs.store.read() as tx:
                if await tx.get_desired(body.app) is None:
                    raise NotFound(f"no app {body.app!r}")
        planned = await bbs.rebalancer.plan(body.app, body.max_moves)
        if not body.dry_run:
            bbs.rebalancer.enqueue(planned)
        return {"dry_run": body.dry_run, "moves": [p.move.to_wire() for p in planned]}

    @app.get("/v1/rebalance", response_model=RebalanceStatus)
    async def rebalance_status() -> dict[str, Any]:
        return bbs.rebalancer.status()

    @app.delete("/v1/cells/{cell_id}", status_code=204)
    async def remove_cell(cell_id: GuidPath) -> Response:
        await bbs.remove_cell(cell_id)
        return Response(status_code=204)

    # --- leases (the auctioneer has no database: it is elected through any BBS replica) ----------

    @app.post("/v1/leases/{name}", response_model=Lease)
    async def acquire_lease(request: Request, name: GuidPath, body: LeaseRequest) -> dict[str, Any]:
        require_lease_holder(request, name)
        held, lease = await bbs.take_lease(name, body.owner, url=body.url, ttl=body.ttl_s)
        return {"held": held, "owner": lease.owner, "url": lease.url, "token": lease.token,
                "expires_at": lease.expires_at}

    @app.delete("/v1/leases/{name}", status_code=204)
    async def release_lease(request: Request, name: GuidPath,
                            owner: Annotated[str, Query(pattern=r"^[^\x00]{1,128}$")],
                            token: Annotated[int, Query(ge=0, le=INT32_MAX)]) -> Response:
        """Give the lease up on a graceful stop, so a standby takes it at once: only its holder may, and
        only for its own term (owner and fencing token); released twice is still 204."""
        require_lease_holder(request, name)
        released = await bbs.release_lease(name, owner, token)
        if released is None:
            raise NotFound(f"nobody ever took the lease {name!r}")
        if not released:
            raise Conflict(f"the lease {name!r} is not held by {owner!r} under token {token}")
        return Response(status_code=204)

    @app.get("/v1/leases/{name}", response_model=Lease)
    async def get_lease(name: GuidPath) -> dict[str, Any]:
        lease = await bbs.held_lease(name)  # unexpired by the database's clock, not this replica's
        if lease is None:
            raise NotFound(f"nobody holds the lease {name!r}")
        return {"held": True, "owner": lease.owner, "url": lease.url, "token": lease.token,
                "expires_at": lease.expires_at}

    @app.get("/v1/events")
    async def events(
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

    # --- bearer tokens (people and scripts; the secret is shown once, only its hash is kept) ----------

    @app.post("/v1/tokens", status_code=201, response_model=TokenCreated)
    async def create_token(body: TokenCreate) -> dict[str, Any]:
        return await bbs.create_token(body)

    @app.get("/v1/tokens")
    async def list_tokens() -> Response:
        return items(await bbs.list_tokens())

    @app.post("/v1/tokens/verify", response_model=TokenIdentity)
    async def verify_token(body: TokenVerify) -> dict[str, Any]:
        record = await bbs.verify_token(body.token)
        if record is None:
            raise NotFound("no valid token: unknown, expired or revoked")
        return {"role": record.role, "name": record.name, "id": record.id}

    @app.delete("/v1/tokens/{token_id}", status_code=204)
    async def revoke_token(token_id: Annotated[str, Path(pattern=r"^[0-9A-Za-z_-]{1,32}$")]) -> Response:
        await bbs.revoke_token(token_id)
        return Response(status_code=204)

    async def verify_bearer(secret: str) -> Identity | None:
        """The middleware's token check: the database itself, no cache (a revoked token fails at once)."""
        record = await bbs.verify_token(secret)
        return None if record is None else token_identity(record.role, record.name, record.id)

    add_dashboard(app, bbs)
    add_auth(app, POLICY, verify_token=verify_bearer, insecure=insecure, service="bbs",
             session_cookie=SESSION_COOKIE)
    add_limits(app, bbs.settings, bulk=BULK_ROUTES)
    add_http_metrics(app, bbs.metrics.http)
    add_request_id(app)
    return app


async def unready_reason(bbs: BBS) -> str | None:
    """Why this BBS cannot serve now (None: it can)."""
    if not await bbs.store.ping():
        return "the database does not answer"
    if not bbs.transport_ready():
        return "not connected to NATS"
    return None
