"""The rep's HTTP API: one API for the N >= 1 cells of the process, at its root (its routes, with who
may call each, are listed in docs/wire-protocol.md; the bodies are in common/models/).

Every route concerns the process; the bodies and the query name the cells they concern:

- GET /state[?lrps=counts|full][&cells=a,b]: every live cell (or those named that live here): counts, the
  default, answers HostCellStates, their bids (what the auctioneer fetches); full answers HostCellDetails,
  each bid with the rep's own view of the cell (its URL, isolation, fencing tokens, every instance);
- POST /work: HostWork, every cell's work in one body with each desired LRP written once; answers
  HostWorkResult, each cell's WorkResult. A cell the process does not host (or has retired) is left out
  of the answer, its work untouched;
- POST /stop (StopInstances), POST /cancel (CancelTasks), POST /cordon (CordonCells): batches from the BBS;
  answer Found;
- POST /evacuate (EvacuateCells, optional: none named evacuates every cell), GET /cells, GET /metrics;
- GET /logs: an app's instances' (or a task's) output on this process's cells, recent records and, with
  follow=1, what they print from then on, as JSON lines (rep/instance_logs.py; the BBS only);
- GET /instances/{instance_guid}/exec?cell=CELL: a WebSocket running a command in an instance (the BBS
  only; rep/exec_relay.py, docs/exec.md);
- GET /ping, /readyz (503 with the reason while the rep cannot take work, e.g. NATS down), /livez.

At 250 cells per process an auction costs the process 2 requests, not 500, and each desired LRP is
validated once per process instead of once per cell that wins one of its instances. NATS carries the
same bodies (rep/nats_bus.py); both call the same RepHost methods.

Security (docs/security.md): served over HTTPS with the rep's certificate (rep/main.py), every request
checked against the table in rep/policy.py before it runs (common/auth.py; bearer tokens are checked by
the BBS). Work is taken only under the auctioneer lease's current fencing token (rep/fencing.py): 409
for the whole POST otherwise. `insecure` (no TLS: `--insecure`, or loopback without TLS files) turns
authorization off, and /ping says so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Query, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from common import diego_state
from common.auth import VerifyToken, add_auth
from common.http_metrics import HTTPMetrics, add_http_metrics, mark_refusal
from common.limits import RequestLimitOptions, add_limits
from common.models import GUID_PATTERN, CancelTasks, CordonCells, EvacuateCells, HostWork, StopInstances
from common.request_id import add_request_id
from common.streaming import BoundedStreamingResponse, with_heartbeats
from common.validation import add_validation_handler

from . import diego_state as rep_diego_state
from .exec_relay import ExecSlots, serve_exec
from .fencing import Fencing, Refused
from .host import RepHost
from .instance_logs import LogBook, LogQuery, history
from .log_records import STDERR, STDOUT
from .log_stream import DROPPED, FOLLOWER_MAX_BYTES, Follower, end_line, record_line
from .metrics import metrics_registry, render
from .policy import POLICY

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)
MAX_RECENT = 100_000  # records a log request may ask for
MAX_CELLS_QUERY = 100_000  # characters of `?cells=`: 10,000 cell ids of ten characters
# The batches from the auctioneer and the BBS (common/limits.py): work of 10,000 instances is up to ~5.4 MB.
BULK_ROUTES = {("POST", "/work"), ("POST", "/stop"), ("POST", "/cancel")}


def create_app(
    host: RepHost,
    fencing: Fencing,
    *,
    insecure: bool,
    verify_token: VerifyToken | None = None,
    not_ready: Callable[[], str] | None = None,
    limits: RequestLimitOptions | None = None,
) -> FastAPI:
    """`verify_token`: whom a bearer token stands for (the BBS says: common.auth.bbs_token_verifier).
    `not_ready()` says why the rep cannot take work yet ("" when it can): /ping and /readyz then answer
    503. `limits`: body caps, timeout, concurrency (common/limits.py; default: the defaults)."""
    app = FastAPI(title="vendue rep", docs_url=None, redoc_url=None, openapi_url=None)
    add_validation_handler(app)

    def readiness() -> Response:
        why = not_ready() if not_ready is not None else ""
        if why:
            answer = {"ok": False, "ready": False, "insecure": insecure, "reason": why}
            return JSONResponse(answer, status_code=503)
        return JSONResponse({"ok": True, "insecure": insecure})

    @app.get("/ping")
    async def ping() -> Response:
        return readiness()

    @app.get("/readyz")
    async def readyz() -> Response:
        return readiness()

    @app.get("/livez")
    async def livez() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/state")
    async def state(
        lrps: Literal["full", "counts"] = "counts", cells: str = Query("", max_length=MAX_CELLS_QUERY)
    ) -> Response:
        named = [c for c in cells.split(",") if c] if cells else None
        answer = host.states(named) if lrps == "counts" else host.details(named)
        return Response(answer.model_dump_json(), media_type=JSON)

    @app.get(diego_state.PATH)
    async def diego_cell_state(cell_id: str) -> Response:
        """Diego's view of one cell (rep/diego_state.py), for Cloud Foundry's tools (cfdot cell-states)."""
        found = host.details([cell_id]).cells
        if not found:
            return JSONResponse({"detail": f"cell {cell_id!r} is not hosted here"}, status_code=404)
        return JSONResponse(rep_diego_state.diego_cell_state(found[0]))

    @app.post("/work")
    async def work(request: Request) -> Response:
        body = _parse(HostWork, await request.body())
        try:
            await fencing.admit(body.fencing_token)
        except Refused as refused:  # nothing of it taken: the auctioneer carries it to its next auction
            if refused.status == 409:  # a stale or unknown token; a 503 (not checkable now) counts as such
                mark_refusal(request.scope, "fenced")
            return JSONResponse({"detail": refused.reason}, status_code=refused.status)
        return Response(host.take(body).model_dump_json(), media_type=JSON)

    @app.post("/stop", status_code=202)
    async def stop(request: Request) -> Response:
        body = _parse(StopInstances, await request.body())
        return Response(host.stop(body).model_dump_json(), status_code=202, media_type=JSON)

    @app.post("/cancel", status_code=202)
    async def cancel(request: Request) -> Response:
        body = _parse(CancelTasks, await request.body())
        return Response(host.cancel(body).model_dump_json(), status_code=202, media_type=JSON)

    @app.post("/cordon")
    async def cordon(request: Request) -> Response:
        body = _parse(CordonCells, await request.body())
        return Response(host.cordon(body).model_dump_json(), media_type=JSON)

    @app.post("/evacuate", status_code=202)
    async def evacuate(request: Request) -> dict[str, list[str]]:
        raw = await request.body()
        named = _parse(EvacuateCells, raw).cells if raw.strip() else None
        cells = host.live(named)
        host.evacuate(cells)
        return {"evacuating": [c.cell_id for c in cells]}

    @app.get("/cells")
    async def list_cells() -> dict[str, list[dict[str, str]]]:
        return {"items": [{"cell_id": c.cell_id, "rep_url": c.config.rep_url, "zone": c.config.zone}
                          for c in host.live()]}

    @app.get("/logs")
    async def logs(
        process_guid: str = Query("", pattern=f"^$|{GUID_PATTERN}"),
        index: int | None = Query(None, ge=0),
        task_guid: str = Query("", pattern=f"^$|{GUID_PATTERN}"),
        recent: int = Query(100, ge=0, le=MAX_RECENT),
        since_ns: int = Query(0, ge=0),
        stream: Literal["stdout", "stderr"] | None = None,
        follow: bool = False,
    ) -> Response:
        if bool(process_guid) == bool(task_guid):
            raise RequestValidationError([{"type": "value_error", "loc": ("query", "process_guid"),
                                           "msg": "name exactly one of process_guid and task_guid"}])
        query = LogQuery(process_guid=process_guid, index=index, task_guid=task_guid, recent=recent,
                         since_ns=since_ns, stream=None if stream is None else
                         (STDOUT if stream == "stdout" else STDERR))
        books = [e.logs for e in host.executors if e.logs is not None]
        sources = [s for book in books for s in book.sources(query)]
        if task_guid and not sources:
            return JSONResponse({"detail": f"task {task_guid!r} has no output on this rep"}, status_code=404)
        follower = None
        if follow and not (task_guid and all(s.output is None for s in sources)):
            follower = Follower(query.matches, FOLLOWER_MAX_BYTES, ends_with=task_guid)
            for book in books:
                book.attach(follower)
        lines = _log_lines(query, sources, books, follower)
        return BoundedStreamingResponse(with_heartbeats(lines) if follower is not None else lines,
                                        media_type="application/x-ndjson")

    @app.get("/usage")
    async def usage(cells: str = Query("", max_length=MAX_CELLS_QUERY)) -> Response:
        """The latest memory, CPU and disk figures of every instance of the named cells (all: none named),
        as the executors sampled them (rep/usage.py): one answer per rep, never a request per instance."""
        named = [c for c in cells.split(",") if c] if cells else None
        items = [u.as_json(cell.cell_id) for cell in host.live(named) for u in cell.executor.usage()]
        return JSONResponse({"items": items})

    registry = metrics_registry(host)

    exec_slots = ExecSlots()

    @app.websocket("/instances/{instance_guid}/exec")
    async def exec_in_instance(websocket: WebSocket, instance_guid: str, cell: str) -> None:
        await serve_exec(websocket, host, exec_slots, instance_guid, cell)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

    add_auth(app, POLICY, verify_token=verify_token, insecure=insecure, service="rep")
    add_limits(app, limits or RequestLimitOptions(), bulk=BULK_ROUTES)
    add_http_metrics(app, HTTPMetrics(registry))
    add_request_id(app)
    return app


async def _log_lines(query: LogQuery, sources: list[Any], books: list[LogBook],
                     follower: Follower | None) -> AsyncIterator[bytes]:
    """The history, then (following) what the follower hears that the history did not hold; a follower
    dropped for falling behind ends with a line that says so."""
    try:
        entries, seen = history(sources, query)
        for first in range(0, len(entries), 1000):
            yield b"".join(record_line(origin, record) for origin, record in entries[first : first + 1000])
        if follower is None:
            return
        async for batches in follower.batches():
            lines = [record_line(origin, r) for origin, records in batches
                     for r in records if r.ns > seen.get(origin.guid, 0) and query.keeps(r)]
            if lines:
                yield b"".join(lines)
        if follower.dropped:
            yield end_line(DROPPED)
    finally:
        if follower is not None:
            for book in books:
                book.detach(follower)


def _parse(model: type[M], body: bytes) -> M:
    """Validated straight from the JSON bytes (a big batch parses several times faster this way); a
    bad body is a 422 whose errors name the field, as FastAPI's own body validation, without the input
    (for a body that is not JSON, the raw bytes: not necessarily UTF-8, and up to the bulk body cap)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
