"""`vendue rep` as a real process against the recording fake BBS (tests/fake_bbs.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import httpx
import pytest

from common.models import CellDetail, HostCellStates
from common.procutil import app_python, pid_alive
from tests.fake_bbs import FakeBBS
from tests.rep.fakes import (
    DEADLINE_S,
    HTTP_SERVER,
    NOW,
    cell_details,
    desired,
    post_work,
    work_body,
)
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def cell_detail(client: httpx.AsyncClient, rep_url: str, cell_id: str) -> CellDetail:
    """One cell in detail, from its rep's GET /state?lrps=full."""
    details = await cell_details(client, rep_url, cell_id)
    assert [d.bid.cell_id for d in details] == [cell_id], details
    return details[0]


async def test_sim_rep_hosts_three_cells_heartbeats_and_reports_in_batches(
    fake_bbs: FakeBBS, start_rep
) -> None:
    rep = await start_rep(
        "--sim", "--cells", "3", "--zones", "2", "--bbs-url", fake_bbs.url,
        "--presence-ttl", "0.6", "--sim-start-delay", "0.3", "--evacuation-timeout", "1",
        "--memory-mb", "1024", "--tag", "blue", "--rep-id", "sim-a",
    )  # fmt: skip
    cell_ids = ["cell-0", "cell-1", "cell-2"]

    # Heartbeats: every cell, repeatedly, with its zone and its process's URL and name.
    await eventually(
        lambda: all(len(fake_bbs.beats_of(c)) >= 2 for c in cell_ids),
        DEADLINE_S, "two heartbeats per cell",
        lambda: [p.cell_id for p in fake_bbs.heartbeats],
    )
    presences = {c: fake_bbs.beats_of(c)[-1] for c in cell_ids}
    assert [presences[c].zone for c in cell_ids] == ["z0", "z1", "z0"]
    assert {(presences[c].rep_url, presences[c].rep_id) for c in cell_ids} == {(rep.url, "sim-a")}
    assert presences["cell-0"].placement_tags == ["blue"] and not presences["cell-0"].evacuating
    # No TLS files, on loopback: served, but loudly insecure.
    assert all(presences[c].insecure for c in cell_ids) and "INSECURE" in rep.stderr.read_text()

    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        listed = (await client.get(f"{rep.url}/cells")).json()["items"]
        assert [c["cell_id"] for c in listed] == cell_ids
        assert (await client.get(f"{rep.url}/ping")).json() == {"ok": True, "insecure": True}
        states = HostCellStates.model_validate_json((await client.get(f"{rep.url}/state")).content).cells
        assert [(s.cell_id, s.evacuating) for s in states] == [(c, False) for c in cell_ids]
        assert all(s.available == s.total and s.total.memory_mb == 1024 for s in states)
        details = await cell_details(client, rep.url)
        assert [(d.bid, d.rep_url, d.isolation) for d in details] == [(s, rep.url, "sim") for s in states]
        assert (await client.get(f"{rep.url}/cells/cell-1/state")).status_code == 404, "no per-cell routes"

        # Work for one cell: one more than fits is rejected at once.
        app = desired("app", memory_mb=300)
        task = {"task_guid": "t1", "command": ["x"], "memory_mb": 10, "disk_mb": 10,
                "created_at": NOW.isoformat(), "updated_at": NOW.isoformat()}
        answer = await post_work(
            client, rep.url, work_body("cell-1", *[(app, i) for i in range(4)], tasks=[task])
        )
        assert answer.status_code == 200
        result = answer.json()["cells"]["cell-1"]
        assert [w["index"] for w in result["rejected_lrps"]] == [3]
        assert result["rejected_tasks"] == []
        duplicate = await client.post(
            f"{rep.url}/work", json=work_body("cell-1", (desired("app", memory_mb=1), 0))
        )
        assert [w["index"] for w in duplicate.json()["cells"]["cell-1"]["rejected_lrps"]] == [0]

        await eventually(
            lambda: (
                sum(len(b.running) for b in fake_bbs.lifecycle_of("cell-1")) == 3
                and any(b.tasks_completed for b in fake_bbs.lifecycle_of("cell-1"))
            ),
            DEADLINE_S, "3 running reports and a task completion from cell-1",
            lambda: fake_bbs.lifecycle_of("cell-1"),
        )
        batches = fake_bbs.lifecycle_of("cell-1")
        claim_batches = [b for b in batches if b.claimed]
        running_batches = [b for b in batches if b.running]
        assert len(claim_batches) == 1 and [r.index for r in claim_batches[0].claimed] == [0, 1, 2]
        assert claim_batches[0].tasks_started == ["t1"]
        assert len(running_batches) == 1 and sorted(r.index for r in running_batches[0].running) == [0, 1, 2]
        # One POST for the claims, one for the starts; the task runs once its claim is accepted (the first
        # answer), so its completion may come in a third.
        assert len(batches) in (2, 3) and all(not b.tasks_completed for b in batches[:1]), (
            f"one POST for the claims, one for the starts (and the task's completion); saw {batches}")
        assert fake_bbs.lifecycle_of("cell-0") == [] and fake_bbs.lifecycle_of("cell-2") == []
        # A process hosting several cells talks to the BBS per process, not per cell.
        # (and the lease, to check the work's fencing token)
        routes = {"PUT /v1/cells", "POST /v1/lifecycle", "GET /v1/leases/auctioneer"}
        assert fake_bbs.routes() == routes, fake_bbs.routes()
        assert all(r.ports and r.host == "127.0.0.1" for r in running_batches[0].running)

        detail = await cell_detail(client, rep.url, "cell-1")
        assert sorted((i.index, i.state) for i in detail.lrps) == [
            (0, "running"),
            (1, "running"),
            (2, "running"),
        ]
        assert detail.bid.available.memory_mb == 1024 - 3 * 300

        # Bad input: 422 naming the field, nothing reserved.
        bad = await client.post(
            f"{rep.url}/work", content=b"not json", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 422
        bad_index = await client.post(f"{rep.url}/work", json={"cells": {"cell-1": {
            "lrp_groups": [{"desired": 0, "indices": ["x"]}]}}, "desired": []})
        assert bad_index.status_code == 422 and [
            "body",
            "cells",
            "cell-1",
            "lrp_groups",
            0,
            "indices",
            0,
        ] in [e["loc"] for e in bad_index.json()["detail"]], bad_index.text

        # Stop one instance: it is reported removed.
        victim = next(i for i in detail.lrps if i.index == 1)
        stops = [{"cell_id": "cell-1", "process_guid": "app", "instance_guid": victim.instance_guid},
                 {"cell_id": "cell-0", "process_guid": "app", "instance_guid": victim.instance_guid}]
        stop = await client.post(f"{rep.url}/stop", json={"instances": stops})
        assert stop.status_code == 202 and stop.json() == {"found": [victim.instance_guid]}
        await eventually(
            lambda: any(
                r.instance_guid == victim.instance_guid
                for b in fake_bbs.lifecycle_of("cell-1")
                for r in b.removed
            ),
            DEADLINE_S, "a removed report for the stopped instance",
            lambda: fake_bbs.lifecycle_of("cell-1")[-1],
        )

    # SIGTERM drains: heartbeats say evacuating; after the evacuation timeout what is left is removed.
    rep.proc.send_signal(signal.SIGTERM)
    await eventually(
        lambda: any(p.evacuating for p in fake_bbs.beats_of("cell-1")),
        DEADLINE_S, "an evacuating heartbeat",
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
    app = desired("web", command=[app_python(), "-c", HTTP_SERVER], memory_mb=512)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        answer = await post_work(client, rep.url, work_body("proc-cell", (app, 0), (app, 1)))
        assert answer.json()["cells"]["proc-cell"]["rejected_lrps"] == [], answer.json()
        await eventually(
            lambda: sum(len(b.running) for b in fake_bbs.lifecycle_of("proc-cell")) == 2,
            DEADLINE_S, "2 running reports",
            lambda: (fake_bbs.lifecycle_of("proc-cell"), rep.stderr.read_text()[-1500:]),
        )
        detail = await cell_detail(client, rep.url, "proc-cell")
    ports = [r.ports[0].host_port for b in fake_bbs.lifecycle_of("proc-cell") for r in b.running]
    pids = [i.pid for i in detail.lrps]
    assert all(serves(p) for p in ports)
    assert all(pid is not None and pid_alive(pid) for pid in pids)

    os.kill(rep.proc.pid, signal.SIGKILL)
    rep.proc.wait(timeout=DEADLINE_S)

    await eventually(
        lambda: not any(pid_alive(pid) for pid in pids if pid is not None),
        DEADLINE_S, "every instance process gone after kill -9 of the rep",
        lambda: [pid for pid in pids if pid is not None and pid_alive(pid)],
    )
    assert not any(serves(p) for p in ports), "no instance keeps listening"


async def test_sigint_stops_the_children_of_a_process_rep_and_reports_them(
    fake_bbs: FakeBBS, start_rep
) -> None:
    rep = await start_rep("--cell-id", "proc-cell", "--bbs-url", fake_bbs.url, "--stop-grace", "2")
    app = desired("web", command=[app_python(), "-c", HTTP_SERVER], memory_mb=512)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        answer = await post_work(client, rep.url, work_body("proc-cell", (app, 0)))
        assert answer.json()["cells"]["proc-cell"]["rejected_lrps"] == [], answer.json()
        await eventually(
            lambda: any(b.running for b in fake_bbs.lifecycle_of("proc-cell")),
            DEADLINE_S, "a running report",
            lambda: (fake_bbs.lifecycle_of("proc-cell"), rep.stderr.read_text()[-1500:]),
        )
        pid = (await cell_detail(client, rep.url, "proc-cell")).lrps[0].pid
    assert pid is not None

    rep.proc.send_signal(signal.SIGINT)

    assert await asyncio.to_thread(rep.proc.wait, DEADLINE_S) == 0
    assert not pid_alive(pid)
    assert [r.index for b in fake_bbs.lifecycle_of("proc-cell") for r in b.removed] == [0]
