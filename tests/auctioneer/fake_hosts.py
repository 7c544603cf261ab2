"""A double of a rep process hosting many cells (`vendue rep --sim`), at the host level: one
GET {host_url}/state for all its cells and one POST {host_url}/work for all their work (rep/api.py).
Served over real HTTP; records every request and answers as told."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from common.models import CellPresence, HostCellStates, HostWork, HostWorkResult, LRPWork, WorkResult

from .fakes import FakeCell, cell_state, served


@dataclass
class FakeHost:
    cells: dict[str, FakeCell] = field(default_factory=dict)
    # How the host answers: "ok", "error" (500), "hang" (not until the test ends), "invalid" (not a HostCellStates).
    state_mode: str = "ok"
    work_mode: str = "ok"
    left_out: set[str] = field(default_factory=set)  # cells it leaves out of its answers (not hosted after all)
    state_calls: int = 0
    work_posts: list[HostWork] = field(default_factory=list)
    url: str = ""
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, cell_id: str, zone: str = "z1", **fields) -> FakeCell:
        modes = {k: fields.pop(k) for k in ("work_mode", "reason") if k in fields}
        cell = FakeCell(cell_state(cell_id, f"{self.url}/cells/{cell_id}", zone, **fields), **modes)
        self.cells[cell_id] = cell
        return cell

    def presences(self) -> list[CellPresence]:
        return [CellPresence.model_validate({**c.state.model_dump(), "host_url": self.url}) for c in self.cells.values()]

    def release(self) -> None:
        """Let hanging handlers finish, so the server can stop."""
        self._release.set()

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/state")
        async def state() -> Response:
            self.state_calls += 1
            if self.state_mode == "hang":
                await self._release.wait()
            if self.state_mode == "error":
                return JSONResponse({"detail": "boom"}, status_code=500)
            if self.state_mode == "invalid":
                return JSONResponse({"cells": [{"cell_id": "half"}]})
            states = [c.state for cid, c in self.cells.items() if cid not in self.left_out]
            return Response(HostCellStates(cells=states).model_dump_json(), media_type="application/json")

        @app.post("/work")
        async def work(request: Request) -> Response:
            body = HostWork.model_validate_json(await request.body())
            self.work_posts.append(body)
            if self.work_mode == "hang":
                await self._release.wait()
            if self.work_mode == "error":
                return JSONResponse({"detail": "boom"}, status_code=500)
            results = {}
            for cell_id, part in body.cells.items():
                if cell_id in self.left_out:
                    continue
                cell = self.cells[cell_id]
                if cell.work_mode == "reject":
                    lrps = [LRPWork(desired=d, index=i) for d, i in body.instances(cell_id)]
                    results[cell_id] = WorkResult(rejected_lrps=lrps, rejected_tasks=part.tasks, reason=cell.reason)
                else:
                    results[cell_id] = WorkResult()
            return Response(HostWorkResult(cells=results).model_dump_json(), media_type="application/json")

        return app


def fake_host() -> contextlib.AbstractAsyncContextManager[FakeHost]:
    return served(FakeHost())
