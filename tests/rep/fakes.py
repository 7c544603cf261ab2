"""Test doubles and helpers for `vendue rep` as a real process: a small recording fake BBS (served by
uvicorn on a free loopback port inside the test's event loop, over HTTPS when given a TLS context; it
records every heartbeat and lifecycle request and accepts everything, answers the "auctioneer" lease with
`lease_token` and verifies the bearer tokens in `tokens`), and a fixture starting rep processes that are
always stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from common.auth import TLS_SCOPE_KEY, uvicorn_tls_options
from common.models import (
    CellLifecycle,
    CellPresence,
    CellPresences,
    DesiredLRP,
    HostLifecycle,
    HostWork,
    ModificationTag,
    TokenVerify,
)
from common.procutil import child_preexec, terminate_then_kill
from common.tls import identity_from_der

STARTUP_S = 60.0  # imports alone take seconds on a busy 2-core machine without bytecode caches
DEADLINE_S = 30.0
NOW = datetime(2024, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]

HTTP_SERVER = """
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@dataclass
class FakeBBS:
    url: str = ""
    heartbeats: list[CellPresence] = field(default_factory=list)
    lifecycles: list[tuple[str, CellLifecycle]] = field(default_factory=list)
    routes: list[str] = field(default_factory=list)  # the route of every request, in order
    lease_token: int | None = 1  # the "auctioneer" lease's fencing token; None: nobody holds it (404)
    lease_lookups: int = 0
    tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # bearer token -> (role, name)
    callers: list[str] = field(default_factory=list)  # over TLS: who called, by client certificate

    def lifecycle_of(self, cell_id: str) -> list[CellLifecycle]:
        return [body for cid, body in self.lifecycles if cid == cell_id]

    def beats_of(self, cell_id: str) -> list[CellPresence]:
        return [p for p in self.heartbeats if p.cell_id == cell_id]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def record_caller(request: Request, call_next):
            der = request.scope.get(TLS_SCOPE_KEY)
            identity = identity_from_der(der) if der else None
            self.callers.append(identity.describe() if identity is not None else "anonymous")
            return await call_next(request)

        @app.put("/v1/cells", status_code=204)
        async def heartbeats(request: Request) -> Response:
            self.routes.append("PUT /v1/cells")
            self.heartbeats.extend(CellPresences.model_validate_json(await request.body()).cells)
            return Response(status_code=204)

        @app.post("/v1/lifecycle")
        async def host_lifecycle(request: Request) -> dict[str, Any]:
            self.routes.append("POST /v1/lifecycle")
            body = HostLifecycle.model_validate_json(await request.body())
            self.lifecycles.extend(body.cells.items())
            return {"cells": {cell_id: {"refused": [], "refused_tasks": []} for cell_id in body.cells}}

        @app.get("/v1/leases/{name}")
        async def lease(name: str) -> Response:
            self.lease_lookups += 1
            if name != "auctioneer" or self.lease_token is None:
                return JSONResponse({"detail": f"nobody holds the lease {name!r}"}, status_code=404)
            return JSONResponse({"held": True, "owner": "a1", "url": "", "token": self.lease_token,
                                 "expires_at": time.time() + 15})

        @app.post("/v1/tokens/verify")
        async def verify_token(body: TokenVerify) -> Response:
            if body.token not in self.tokens:  # as the real BBS answers (bbs/api.py)
                return JSONResponse({"detail": "no valid token: unknown, expired or revoked"}, status_code=404)
            role, name = self.tokens[body.token]
            return JSONResponse({"role": role, "name": name})

        return app


@contextlib.asynccontextmanager
async def serving_fake_bbs(ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[FakeBBS]:
    """A FakeBBS on a free loopback port for the block (HTTPS with `ssl_context`: common.tls.server_context)."""
    bbs = FakeBBS()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    bbs.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(bbs.app(), log_config=None, access_log=False, lifespan="off",
                                           **uvicorn_tls_options(ssl_context)))
    server.capture_signals = _no_signal_capture  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or serving.done(), "the fake BBS to start", lambda: serving)
        assert server.started, f"the fake BBS did not start: {serving}"
        yield bbs
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=DEADLINE_S)
        sock.close()


@pytest.fixture
async def fake_bbs() -> AsyncIterator[FakeBBS]:
    async with serving_fake_bbs() as bbs:
        yield bbs


class _NoSignals:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _no_signal_capture() -> _NoSignals:
    return _NoSignals()


async def eventually(
    condition: Callable[[], bool], what: str, seen: Callable[[], object], timeout_s: float = DEADLINE_S
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"expected {what} within {timeout_s}s; saw {seen()!r}")
        await asyncio.sleep(0.02)


@dataclass
class RepProcess:
    proc: subprocess.Popen[bytes]
    url: str
    stderr: Path


@pytest.fixture
async def start_rep(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[subprocess.Popen[bytes]] = []

    async def start(*args: str) -> RepProcess:
        ready = tmp_path / f"ready-{len(started)}.json"
        stderr = tmp_path / f"rep-{len(started)}.log"
        cmd = [sys.executable, "-c", "from deploy.cli import main; main()", "rep", "--port", "0"]
        cmd += ["--ready-file", str(ready), "--data-dir", str(tmp_path / "data"), *args]
        with open(stderr, "wb") as err:
            proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=child_preexec()
            )
        started.append(proc)
        await eventually(
            lambda: (ready.exists() and ready.read_text().strip() != "") or proc.poll() is not None,
            "the rep's ready file",
            lambda: stderr.read_text()[-2000:],
            timeout_s=STARTUP_S,
        )
        assert proc.poll() is None, f"the rep exited early: {stderr.read_text()[-2000:]}"
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        return RepProcess(proc, info["url"], stderr)

    yield start
    for proc in started:
        await asyncio.to_thread(stop_rep, proc)


def stop_rep(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGINT: the rep stops what it runs, reports it and exits. (SIGTERM would evacuate: wait for a BBS
    to stop its instances, which the fake one never does, until SIGKILL.) SIGTERM, SIGKILL after the grace."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    terminate_then_kill(proc, grace_s)


NOT_REGISTERED = "cell not yet registered with the BBS"


async def post_work(client: httpx.AsyncClient, rep_url: str, body: dict[str, Any]) -> httpx.Response:
    """POST work to a rep, again while a cell of it answers that the BBS has not yet accepted its first
    heartbeat (it rejects everything until then, reserving nothing; the ready file does not wait for that)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while True:
        answer = await client.post(f"{rep_url}/work", json=body)
        if answer.status_code != 200 or all(
            r.get("reason") != NOT_REGISTERED for r in answer.json().get("cells", {}).values()
        ):
            return answer
        if loop.time() > deadline:
            raise AssertionError(f"expected {rep_url} to register with the BBS within {DEADLINE_S}s; "
                                 f"it still answers {answer.json()}")
        await asyncio.sleep(0.02)


def desired(guid: str, command: list[str] | None = None, memory_mb: int = 256) -> DesiredLRP:
    return DesiredLRP(
        process_guid=guid,
        command=command or [],
        memory_mb=memory_mb,
        created_at=NOW,
        modification_tag=ModificationTag(epoch="e"),
    )


def work_body(
    cell_id: str, *lrps: tuple[DesiredLRP, int], tasks: list[dict[str, Any]] | None = None, fencing_token: int = 1
) -> dict[str, Any]:
    """A HostWork body giving one cell these instances and tasks, under `fencing_token` (the fake BBS's
    lease carries 1)."""
    apps: list[DesiredLRP] = []
    groups: dict[str, list[int]] = {}
    for d, index in lrps:
        if d.process_guid not in groups:
            apps.append(d)
            groups[d.process_guid] = []
        groups[d.process_guid].append(index)
    part = {"lrp_groups": [{"desired": n, "indices": groups[d.process_guid]} for n, d in enumerate(apps)],
            "tasks": tasks or []}
    return HostWork.model_validate(
        {"desired": apps, "cells": {cell_id: part}, "fencing_token": fencing_token}
    ).model_dump(mode="json")
