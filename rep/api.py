"""The rep's HTTP API (see common/models.py): the same routes for every cell a process hosts.

Each cell is served under `/cells/<cell_id>`; a process hosting exactly one cell also serves it at
the root. At the root of a multi-cell (sim) host: GET /ping, GET /cells (the hosted cells' rep URLs),
POST /evacuate (evacuate every cell), and the host-level forms of a cell's two auction routes, which
the auctioneer uses for every cell whose presence names this process as its `host_url`:

- GET /state[?lrps=counts|full][&cells=a,b]: HostCellStates, the state of every live hosted cell (or
  of those named), in one answer instead of one request per cell;
- POST /work: HostWork, every cell's work in one body with each desired LRP written once; answers
  HostWorkResult, each cell's WorkResult exactly as its own POST {rep_url}/work would have. A cell the
  process does not host (or has retired) is left out of the answer, its work untouched.

At 250 cells per process this turns 500 requests per auction into 2, and validates each desired LRP
once per process instead of once per cell that wins one of its instances.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from common.models import HostCellStates, HostWork, HostWorkResult, Work

from .cell import Cell
from .host import RepHost
from .metrics import metrics_registry, render

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


def create_app(host: RepHost, not_ready: Callable[[], str] | None = None) -> FastAPI:
    """`not_ready()` says why the rep cannot take work yet ("" when it can): /ping then answers 503."""
    app = FastAPI(title="vendue rep", docs_url=None, redoc_url=None, openapi_url=None)

    def ping_answer() -> Response:
        why = not_ready() if not_ready is not None else ""
        if why:
            return JSONResponse({"ok": False, "ready": False, "reason": why}, status_code=503)
        return JSONResponse({"ok": True})

    async def the_cell(request: Request) -> Cell:  # async: a sync dependency would run in a thread
        cell_id = request.path_params.get("cell_id")
        cell = host.find(cell_id)
        if cell is None:
            raise HTTPException(status_code=404, detail=f"no cell {cell_id!r} here")
        return cell

    cell_routes = APIRouter()

    @cell_routes.get("/ping")
    async def ping(cell: Cell = Depends(the_cell)) -> Response:
        return ping_answer()

    @cell_routes.get("/state")
    async def state(lrps: Literal["full", "counts"] = "full", cell: Cell = Depends(the_cell)) -> Response:
        return Response(cell.state(counts=lrps == "counts").model_dump_json(), media_type=JSON)

    @cell_routes.post("/work")
    async def work(request: Request, cell: Cell = Depends(the_cell)) -> Response:
        body = _parse(Work, await request.body())
        return Response(cell.accept(body).model_dump_json(), media_type=JSON)

    @cell_routes.post("/v1/lrps/{process_guid}/instances/{instance_guid}/stop", status_code=202)
    async def stop_lrp(
        process_guid: str, instance_guid: str, cell: Cell = Depends(the_cell)
    ) -> dict[str, bool]:
        found = cell.has_instance(instance_guid)
        if found:
            cell.in_background(cell.stop_lrp(instance_guid))
        return {"found": found}

    @cell_routes.post("/v1/tasks/{task_guid}/cancel", status_code=202)
    async def cancel_task(task_guid: str, cell: Cell = Depends(the_cell)) -> dict[str, bool]:
        found = cell.has_task(task_guid)
        if found:
            cell.in_background(cell.cancel_task(task_guid))
        return {"found": found}

    @cell_routes.post("/evacuate", status_code=202)
    async def evacuate(cell: Cell = Depends(the_cell)) -> dict[str, bool]:
        host.evacuate([cell])
        return {"evacuating": True}

    registry = metrics_registry(host)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(cell_routes, prefix="/cells/{cell_id}")
    if host.single is not None:
        app.include_router(cell_routes)
    else:

        @app.get("/ping")
        async def host_ping() -> Response:
            return ping_answer()

        @app.get("/cells")
        async def host_cells() -> dict[str, list[dict[str, str]]]:
            return {
                "items": [
                    {"cell_id": c.cell_id, "rep_url": c.config.rep_url, "zone": c.config.zone}
                    for c in host.cells.values()
                    if not c.retired
                ]
            }

        @app.post("/evacuate", status_code=202)
        async def host_evacuate() -> dict[str, bool]:
            host.evacuate()
            return {"evacuating": True}

        @app.get("/state")
        async def host_state(lrps: Literal["full", "counts"] = "counts", cells: str = "") -> Response:
            wanted = [c for c in cells.split(",") if c] if cells else list(host.cells)
            states = [cell.state(counts=lrps == "counts") for cell in map(host.find, wanted) if cell is not None]
            return Response(HostCellStates.model_construct(cells=states).model_dump_json(), media_type=JSON)

        @app.post("/work")
        async def host_work(request: Request) -> Response:
            body = _parse(HostWork, await request.body())
            results = {}
            for cell_id, work in body.cells.items():
                cell = host.find(cell_id)
                if cell is not None:  # one not hosted here is left out of the answer: nothing of it taken
                    results[cell_id] = cell.take(body.instances(cell_id), work.tasks, body.fencing_token)
            return Response(HostWorkResult.model_construct(cells=results).model_dump_json(), media_type=JSON)

    return app


def _parse(model: type[M], body: bytes) -> M:
    """Validated straight from the JSON bytes (a big batch parses several times faster this way); a
    bad body is a 422 whose errors name the field, as FastAPI's own body validation."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_context=False)]
        ) from None
