"""`vendue rep` as a real process against a small recording fake BBS (a test double of the peer).

The fake BBS is a FastAPI app served by uvicorn on a free port inside the test's event loop; it
records every heartbeat and lifecycle request and accepts everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response

from common.models import (
    CellLifecycle,
    CellPresence,
    CellPresences,
    CellState,
    DesiredLRP,
    HostLifecycle,
    ModificationTag,
    Work,
)
from common.procutil import child_preexec, pid_alive, terminate_then_kill

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

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

    def lifecycle_of(self, cell_id: str) -> list[CellLifecycle]:
        return [body for cid, body in self.lifecycles if cid == cell_id]

    def beats_of(self, cell_id: str) -> list[CellPresence]:
        return [p for p in self.heartbeats if p.cell_id == cell_id]


@pytest.fixture
async def fake_bbs() -> AsyncIterator[FakeBBS]:
    bbs = FakeBBS()
    app = FastAPI()

    @app.put("/v1/cells/{cell_id}", status_code=204)
    async def heartbeat(cell_id: str, request: Request) -> Response:
        bbs.routes.append("PUT /v1/cells/{cell_id}")
        bbs.heartbeats.append(CellPresence.model_validate_json(await request.body()))
        return Response(status_code=204)

    @app.put("/v1/cells", status_code=204)
    async def heartbeats(request: Request) -> Response:
        bbs.routes.append("PUT /v1/cells")
        bbs.heartbeats.extend(CellPresences.model_validate_json(await request.body()).cells)
        return Response(status_code=204)

    @app.post("/v1/cells/{cell_id}/lifecycle")
    async def lifecycle(cell_id: str, request: Request) -> dict[str, list[Any]]:
        bbs.routes.append("POST /v1/cells/{cell_id}/lifecycle")
        bbs.lifecycles.append((cell_id, CellLifecycle.model_validate_json(await request.body())))
        return {"refused": [], "refused_tasks": []}

    @app.post("/v1/lifecycle")
    async def host_lifecycle(request: Request) -> dict[str, Any]:
        bbs.routes.append("POST /v1/lifecycle")
        body = HostLifecycle.model_validate_json(await request.body())
        bbs.lifecycles.extend(body.cells.items())
        return {"cells": {cell_id: {"refused": [], "refused_tasks": []} for cell_id in body.cells}}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    bbs.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
    server.capture_signals = _no_signal_capture  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started, "the fake BBS to start", lambda: serving.done())
    yield bbs
    server.should_exit = True
    await asyncio.wait_for(serving, timeout=DEADLINE_S)
    sock.close()


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
        import json

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


async def post_work(client: httpx.AsyncClient, cell_url: str, body: dict[str, Any]) -> httpx.Response:
    """POST work to a cell, again while it answers that the BBS has not yet accepted its first heartbeat
    (it rejects everything until then, reserving nothing; the ready file does not wait for that)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while True:
        answer = await client.post(f"{cell_url}/work", json=body)
        if answer.status_code != 200 or answer.json().get("reason") != NOT_REGISTERED:
            return answer
        if loop.time() > deadline:
            raise AssertionError(f"expected {cell_url} to register with the BBS within {DEADLINE_S}s; "
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


def work_body(*lrps: tuple[DesiredLRP, int], tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return Work.model_validate(
        {"lrps": [{"desired": d, "index": i} for d, i in lrps], "tasks": tasks or []}
    ).model_dump(mode="json")


async def test_sim_rep_hosts_three_cells_heartbeats_and_reports_in_batches(
    fake_bbs: FakeBBS, start_rep
) -> None:
    rep = await start_rep(
        "--sim", "--cells", "3", "--zones", "2", "--bbs-url", fake_bbs.url,
        "--presence-ttl", "0.6", "--sim-start-delay", "0.3", "--evacuation-timeout", "1",
        "--memory-mb", "1024", "--tag", "blue",
    )  # fmt: skip
    cell_ids = ["cell-0", "cell-1", "cell-2"]

    # Heartbeats: every cell, repeatedly, with its own rep URL and zone.
    await eventually(
        lambda: all(len(fake_bbs.beats_of(c)) >= 2 for c in cell_ids),
        "two heartbeats per cell",
        lambda: [p.cell_id for p in fake_bbs.heartbeats],
    )
    presences = {c: fake_bbs.beats_of(c)[-1] for c in cell_ids}
    assert [presences[c].zone for c in cell_ids] == ["z0", "z1", "z0"]
    assert all(presences[c].rep_url == f"{rep.url}/cells/{c}" for c in cell_ids)
    assert presences["cell-0"].placement_tags == ["blue"] and not presences["cell-0"].evacuating

    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        listed = (await client.get(f"{rep.url}/cells")).json()["items"]
        assert [c["cell_id"] for c in listed] == cell_ids
        for c in cell_ids:
            state = CellState.model_validate((await client.get(f"{presences[c].rep_url}/state")).json())
            assert (state.cell_id, state.rep_url, state.evacuating) == (c, presences[c].rep_url, False)
            assert state.available == state.total and state.total.memory_mb == 1024
        assert (await client.get(f"{rep.url}/cells/cell-9/state")).status_code == 404

        # Work for one cell: one more than fits is rejected at once.
        cell_url = presences["cell-1"].rep_url
        app = desired("app", memory_mb=300)
        task = {"task_guid": "t1", "command": ["x"], "memory_mb": 10, "disk_mb": 10, "created_at": NOW.isoformat(),
                "updated_at": NOW.isoformat()}  # fmt: skip
        answer = await client.post(
            f"{cell_url}/work", json=work_body(*[(app, i) for i in range(4)], tasks=[task])
        )
        assert answer.status_code == 200
        assert [w["index"] for w in answer.json()["rejected_lrps"]] == [3]
        assert answer.json()["rejected_tasks"] == []
        duplicate = await client.post(f"{cell_url}/work", json=work_body((desired("app", memory_mb=1), 0)))
        assert [w["index"] for w in duplicate.json()["rejected_lrps"]] == [0]

        await eventually(
            lambda: (
                sum(len(b.running) for b in fake_bbs.lifecycle_of("cell-1")) == 3
                and any(b.tasks_completed for b in fake_bbs.lifecycle_of("cell-1"))
            ),
            "3 running reports and a task completion from cell-1",
            lambda: fake_bbs.lifecycle_of("cell-1"),
        )
        batches = fake_bbs.lifecycle_of("cell-1")
        claim_batches = [b for b in batches if b.claimed]
        running_batches = [b for b in batches if b.running]
        assert len(claim_batches) == 1 and [r.index for r in claim_batches[0].claimed] == [0, 1, 2]
        assert claim_batches[0].tasks_started == ["t1"]
        assert len(running_batches) == 1 and sorted(r.index for r in running_batches[0].running) == [0, 1, 2]
        assert len(batches) == 2, f"one POST for the claims, one for the starts; saw {batches}"
        assert fake_bbs.lifecycle_of("cell-0") == [] and fake_bbs.lifecycle_of("cell-2") == []
        # A process hosting several cells talks to the BBS per process, not per cell.
        assert set(fake_bbs.routes) == {"PUT /v1/cells", "POST /v1/lifecycle"}, set(fake_bbs.routes)
        assert all(r.ports and r.host == "127.0.0.1" for r in running_batches[0].running)

        state = CellState.model_validate((await client.get(f"{cell_url}/state")).json())
        assert sorted((i.index, i.state) for i in state.lrps) == [
            (0, "running"),
            (1, "running"),
            (2, "running"),
        ]
        assert state.available.memory_mb == 1024 - 3 * 300

        # Bad input: 422 naming the field, nothing reserved.
        bad = await client.post(
            f"{cell_url}/work", content=b"not json", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 422
        bad_index = await client.post(f"{cell_url}/work", json={"lrps": [{"desired": {}, "index": "x"}]})
        assert bad_index.status_code == 422 and ["body", "lrps", 0, "index"] in [
            e["loc"] for e in bad_index.json()["detail"]
        ]

        # Stop one instance: it is reported removed.
        victim = next(i for i in state.lrps if i.index == 1)
        stop = await client.post(f"{cell_url}/v1/lrps/app/instances/{victim.instance_guid}/stop")
        assert stop.status_code == 202
        await eventually(
            lambda: any(
                r.instance_guid == victim.instance_guid
                for b in fake_bbs.lifecycle_of("cell-1")
                for r in b.removed
            ),
            "a removed report for the stopped instance",
            lambda: fake_bbs.lifecycle_of("cell-1")[-1],
        )

    # SIGTERM drains: heartbeats say evacuating; after the evacuation timeout what is left is removed.
    rep.proc.send_signal(signal.SIGTERM)
    await eventually(
        lambda: any(p.evacuating for p in fake_bbs.beats_of("cell-1")),
        "an evacuating heartbeat",
        lambda: fake_bbs.heartbeats[-3:],
    )
    assert await asyncio.to_thread(rep.proc.wait, DEADLINE_S) == 0
    removed = sorted(r.index for b in fake_bbs.lifecycle_of("cell-1") for r in b.removed)
    assert removed == [0, 1, 2], f"every instance reported removed; saw {removed}"


def serves(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_kill_9_of_a_process_rep_leaves_no_child_behind(fake_bbs: FakeBBS, start_rep) -> None:
    rep = await start_rep("--cell-id", "proc-cell", "--bbs-url", fake_bbs.url, "--memory-mb", "4096")
    app = desired("web", command=[sys.executable, "-c", HTTP_SERVER], memory_mb=512)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        answer = await post_work(client, rep.url, work_body((app, 0), (app, 1)))
        assert answer.json()["rejected_lrps"] == [], answer.json()
        await eventually(
            lambda: sum(len(b.running) for b in fake_bbs.lifecycle_of("proc-cell")) == 2,
            "2 running reports",
            lambda: (fake_bbs.lifecycle_of("proc-cell"), rep.stderr.read_text()[-1500:]),
        )
        state = CellState.model_validate((await client.get(f"{rep.url}/state")).json())
    ports = [r.ports[0].host_port for b in fake_bbs.lifecycle_of("proc-cell") for r in b.running]
    pids = [i.pid for i in state.lrps]
    assert all(serves(p) for p in ports)
    assert all(pid is not None and pid_alive(pid) for pid in pids)

    os.kill(rep.proc.pid, signal.SIGKILL)
    rep.proc.wait(timeout=DEADLINE_S)

    await eventually(
        lambda: not any(pid_alive(pid) for pid in pids if pid is not None),
        "every instance process gone after kill -9 of the rep",
        lambda: [pid for pid in pids if pid is not None and pid_alive(pid)],
    )
    assert not any(serves(p) for p in ports), "no instance keeps listening"


async def test_sigint_stops_the_children_of_a_process_rep_and_reports_them(
    fake_bbs: FakeBBS, start_rep
) -> None:
    rep = await start_rep("--cell-id", "proc-cell", "--bbs-url", fake_bbs.url, "--stop-grace", "2")
    app = desired("web", command=[sys.executable, "-c", HTTP_SERVER], memory_mb=512)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        answer = await post_work(client, rep.url, work_body((app, 0)))
        assert answer.json()["rejected_lrps"] == [], answer.json()
        await eventually(
            lambda: any(b.running for b in fake_bbs.lifecycle_of("proc-cell")),
            "a running report",
            lambda: (fake_bbs.lifecycle_of("proc-cell"), rep.stderr.read_text()[-1500:]),
        )
        pid = CellState.model_validate((await client.get(f"{rep.url}/state")).json()).lrps[0].pid
    assert pid is not None

    rep.proc.send_signal(signal.SIGINT)

    assert await asyncio.to_thread(rep.proc.wait, DEADLINE_S) == 0
    assert not pid_alive(pid)
    assert [r.index for b in fake_bbs.lifecycle_of("proc-cell") for r in b.removed] == [0]
