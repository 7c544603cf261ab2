"""Test doubles of the auctioneer's peers, served over real HTTP (uvicorn on port 0 in the test's loop).

`FakeReps` serves any number of rep processes, each hosting any number of cells behind the one rep API
(GET /state, POST /work at its root URL, {url}/reps/<rep_id>), and records every state fetch and work
POST; the BBS double is tests/fake_bbs.py. `serving` serves HTTPS when given a server TLS context, and
`caller_of` says who called (the client certificate's identity).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from auctioneer.server import Server, bind, config_for, url_of
from common.auth import TLS_SCOPE_KEY
from common.models import (
    CellPresence,
    CellState,
    DesiredLRP,
    HostCellStates,
    HostWork,
    HostWorkResult,
    LRPStartRequest,
    LRPWork,
    ModificationTag,
    ResourcesModel,
    Task,
    WorkResult,
)
from common.tls import identity_from_der

STARTUP_SECONDS = 20.0
WAIT_S = 10.0  # the bound of the auctioneer tests' waits (tests/support/polling.py's eventually)


@contextlib.asynccontextmanager
async def serving(
    app: FastAPI, ssl_context: ssl.SSLContext | None = None, port: int = 0
) -> AsyncIterator[str]:
    """Serve `app` on loopback (a free port, or `port`) for the block (HTTPS with `ssl_context`); yields its
    base URL."""
    sock = bind("127.0.0.1", port)
    server = Server(config_for(app, graceful_timeout=2, ssl_context=ssl_context), handle_signals=False)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        ready = asyncio.create_task(server.ready.wait())
        done, _ = await asyncio.wait(
            {ready, task}, timeout=STARTUP_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            raise RuntimeError(f"test server did not start within {STARTUP_SECONDS} s")
        yield url_of(sock, tls=ssl_context is not None)
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, 10)
        except TimeoutError:
            task.cancel()
        sock.close()


# --- builders ---------------------------------------------------------------------------------------


def desired(process_guid: str = "app", instances: int = 1, **fields) -> DesiredLRP:
    return DesiredLRP(
        process_guid=process_guid, instances=instances, created_at=datetime.now(UTC),
        modification_tag=ModificationTag(epoch="e1"), **fields,
    )


def start_request(d: DesiredLRP, indices: list[int] | None = None) -> LRPStartRequest:
    return LRPStartRequest(desired=d, indices=indices if indices is not None else list(range(d.instances)))


def task(task_guid: str = "t1", **fields) -> Task:
    now = datetime.now(UTC)
    return Task(task_guid=task_guid, command=["true"], created_at=now, updated_at=now, **fields)


def cell_state(cell_id: str, zone: str = "z1", memory_mb: int = 8192, disk_mb: int = 32768,
               containers: int = 250, **fields) -> CellState:
    total = ResourcesModel(memory_mb=memory_mb, disk_mb=disk_mb, containers=containers)
    available = fields.pop("available", total)
    return CellState(cell_id=cell_id, zone=zone, total=total, available=available, **fields)


# --- the rep double -----------------------------------------------------------------------------------


@dataclass
class FakeCell:
    state: CellState
    rep_id: str  # the process hosting it
    rep_url: str  # its root URL, which the cell's presence names
    work_mode: str = "ok"  # "ok", or "reject": its rep rejects all its work with `reason`
    reason: str = "insufficient resources: memory"


@dataclass
class FakeRep:
    """One rep process: how it answers. `state_mode`: "ok", "error" (500), "hang" (never answers until the
    test ends), "invalid" (not a HostCellStates); `work_mode`: "ok", "error", "hang", "fenced" (409: a
    newer auctioneer's token reached it)."""

    state_mode: str = "ok"
    work_mode: str = "ok"
    left_out: set[str] = field(
        default_factory=set
    )  # cells it leaves out of its answers (not hosted after all)


REP_MODES = {"state_mode": ("ok", "error", "hang", "invalid"), "work_mode": ("ok", "error", "hang", "fenced")}


@dataclass
class FakeReps:
    cells: dict[str, FakeCell] = field(default_factory=dict)
    reps: dict[str, FakeRep] = field(default_factory=dict)
    state_calls: Counter = field(default_factory=Counter)  # rep_id -> GET /state requests
    work_posts: dict[str, list[HostWork]] = field(default_factory=dict)  # rep_id -> the work it was sent
    url: str = ""
    held: int = 0  # requests a "hang" mode holds right now (they end when the test releases them)
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    def rep_url(self, rep_id: str) -> str:
        return f"{self.url}/reps/{rep_id}"

    def add(self, cell_id: str, zone: str = "z1", *, rep: str | None = None, **fields) -> FakeCell:
        """A cell hosted by the process `rep` (default: a process of its own, named as the cell). A
        `state_mode` or a `work_mode` other than "reject" is how its process answers."""
        rep_id = rep or cell_id
        process = self.reps.setdefault(rep_id, FakeRep())
        for mode, values in REP_MODES.items():
            if fields.get(mode) in values:
                setattr(process, mode, fields.pop(mode))
        modes = {k: fields.pop(k) for k in ("work_mode", "reason") if k in fields}
        cell = FakeCell(cell_state(cell_id, zone, **fields), rep_id, self.rep_url(rep_id), **modes)
        self.cells[cell_id] = cell
        return cell

    def presences(self) -> list[CellPresence]:
        return [
            CellPresence.model_validate({**c.state.model_dump(), "rep_id": c.rep_id, "rep_url": c.rep_url})
            for c in self.cells.values()
        ]

    @property
    def lrps_received(self) -> int:
        return sum(len(w.instances(c)) for posts in self.work_posts.values() for w in posts for c in w.cells)

    @property
    def tasks_received(self) -> int:
        return sum(
            len(part.tasks) for posts in self.work_posts.values() for w in posts for part in w.cells.values()
        )

    @property
    def work_post_count(self) -> int:
        return sum(len(posts) for posts in self.work_posts.values())

    def release(self) -> None:
        """Let hanging handlers finish, so the servers can stop."""
        self._release.set()

    async def _hang(self) -> None:
        """Hold the request until the test releases it, counted in `held` meanwhile."""
        self.held += 1
        try:
            await self._release.wait()
        finally:
            self.held -= 1

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/reps/{rep_id}/state")
        async def state(rep_id: str, cells: str = "") -> Response:
            self.state_calls[rep_id] += 1
            rep = self.reps[rep_id]
            if rep.state_mode == "hang":
                await self._hang()
            if rep.state_mode == "error":
                return JSONResponse({"detail": "boom"}, status_code=500)
            if rep.state_mode == "invalid":
                return JSONResponse({"cells": [{"cell_id": "half"}]})
            named = set(cells.split(",")) if cells else None
            states = [c.state for cid, c in self.cells.items()
                      if c.rep_id == rep_id and cid not in rep.left_out and (named is None or cid in named)]
            return Response(HostCellStates(cells=states).model_dump_json(), media_type="application/json")

        @app.post("/reps/{rep_id}/work")
        async def work(rep_id: str, request: Request) -> Response:
            body = HostWork.model_validate_json(await request.body())
            self.work_posts.setdefault(rep_id, []).append(body)
            rep = self.reps[rep_id]
            if rep.work_mode == "hang":
                await self._hang()
            if rep.work_mode == "error":
                return JSONResponse({"detail": "boom"}, status_code=500)
            if rep.work_mode == "fenced":
                return JSONResponse(
                    {"detail": f"stale fencing token {body.fencing_token} < 99"}, status_code=409
                )
            results = {}
            for cell_id, part in body.cells.items():
                cell = self.cells.get(cell_id)
                if cell is None or cell.rep_id != rep_id or cell_id in rep.left_out:
                    continue
                if cell.work_mode == "reject":
                    lrps = [LRPWork(desired=d, index=i) for d, i in body.instances(cell_id)]
                    results[cell_id] = WorkResult(
                        rejected_lrps=lrps, rejected_tasks=part.tasks, reason=cell.reason
                    )
                else:
                    results[cell_id] = WorkResult()
            return Response(HostWorkResult(cells=results).model_dump_json(), media_type="application/json")

        return app


class Servable(Protocol):
    url: str

    def app(self) -> FastAPI: ...

    def release(self) -> None: ...


Fake = TypeVar("Fake", bound=Servable)


@contextlib.asynccontextmanager
async def served(fake: Fake) -> AsyncIterator[Fake]:
    """Serve a fake (its `url` set) for the block; its hanging handlers are released at the end."""
    async with serving(fake.app()) as url:
        fake.url = url
        try:
            yield fake
        finally:
            fake.release()


def fake_reps() -> contextlib.AbstractAsyncContextManager[FakeReps]:
    return served(FakeReps())


def caller_of(request: Request) -> str:
    """Who called, by the client certificate of the connection: "auctioneer 'a1'", or "anonymous"."""
    der = request.scope.get(TLS_SCOPE_KEY)
    identity = identity_from_der(der) if der else None
    return identity.describe() if identity is not None else "anonymous"
