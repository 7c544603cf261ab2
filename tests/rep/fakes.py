"""Test doubles and helpers for `vendue rep` as a real process: the fake BBS (tests/fake_bbs.py) as a
fixture, its lease held under token 1, and a fixture starting rep processes that are always stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.models import CellDetail, DesiredLRP, HostCellDetails, HostWork, ModificationTag
from common.procutil import child_preexec, terminate_then_kill
from rep.isolation import sweep_rep
from tests.fake_bbs import FakeBBS
from tests.fake_bbs import fake_bbs as serving_fake_bbs
from tests.support.polling import eventually, expect

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


@pytest.fixture
async def fake_bbs() -> AsyncIterator[FakeBBS]:
    """The fake BBS over HTTP, the "auctioneer" lease held under token 1 (work_body's)."""
    async with serving_fake_bbs() as bbs:
        bbs.hold_lease(1)
        yield bbs


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
            STARTUP_S, "the rep's ready file",
            lambda: stderr.read_text()[-2000:],
        )
        assert proc.poll() is None, f"the rep exited early: {stderr.read_text()[-2000:]}"
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        return RepProcess(proc, info["url"], stderr)

    yield start
    for proc in started:
        await asyncio.to_thread(stop_rep, proc)
    sweep_rep(tmp_path / "data")  # what an isolating rep killed along the way left (rep/isolation.py)


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

    async def accepted_or_refused() -> httpx.Response:
        answer = await client.post(f"{rep_url}/work", json=body)
        registering = answer.status_code == 200 and any(
            r.get("reason") == NOT_REGISTERED for r in answer.json().get("cells", {}).values()
        )
        return expect(not registering and answer, f"it still answers {answer.json()}")

    return await eventually(accepted_or_refused, DEADLINE_S, f"{rep_url} to register with the BBS")


async def cell_details(client: httpx.AsyncClient, rep_url: str, *cell_ids: str) -> list[CellDetail]:
    """The cells of a rep process in detail (GET /state?lrps=full): those named, or every one it hosts."""
    params = {"lrps": "full", **({"cells": ",".join(cell_ids)} if cell_ids else {})}
    answer = await client.get(f"{rep_url}/state", params=params)
    assert answer.status_code == 200, answer.text
    return HostCellDetails.model_validate_json(answer.content).cells


def desired(guid: str, command: list[str] | None = None, memory_mb: int = 256) -> DesiredLRP:
    return DesiredLRP(
        process_guid=guid,
        command=command or [],
        memory_mb=memory_mb,
        created_at=NOW,
        modification_tag=ModificationTag(epoch="e"),
    )


def work_body(
    cell_id: str,
    *lrps: tuple[DesiredLRP, int],
    tasks: list[dict[str, Any]] | None = None,
    fencing_token: int = 1,
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
