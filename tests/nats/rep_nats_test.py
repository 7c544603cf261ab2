"""`vendue rep --sim --cells 3 --transport nats` as a real process, against a real nats-server and the
recording fake BBS (tests/fake_bbs.py): state as one scatter-gather (one reply for the process),
work/stop/cancel by request/reply on vendue.rep.<rep_id>.*, heartbeats over HTTP only, and /ping not ready
while NATS is unreachable."""

from __future__ import annotations

import json

import httpx
import nats
import pytest

from common.models import Found, HostCellDetails, HostCellStates, HostWorkResult
from common.procutil import free_port
from common.transport.nats_server import NatsServer
from common.transport.subjects import cells_state_subject, rep_subject
from tests.fake_bbs import FakeBBS
from tests.rep.fakes import DEADLINE_S, desired, work_body
from tests.support.polling import eventually, expect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CELLS = ["cell-0", "cell-1", "cell-2"]


async def ping_ready(url: str, timeout_s: float = 30.0) -> None:
    """Poll GET {url}/ping until 200; fail naming the last answer."""
    async with httpx.AsyncClient(timeout=5) as client:

        async def ready() -> bool:
            response = await client.get(f"{url}/ping")
            return expect(response.status_code == 200, f"{response.status_code} {response.text}")

        await eventually(ready, timeout_s, f"{url}/ping 200", interval=0.05)



async def collect_replies(nc) -> tuple[str, list]:
    """An inbox subscribed on `nc`, and the list every message to it is appended to."""
    inbox, replies = nc.new_inbox(), []

    async def on_reply(msg) -> None:
        replies.append(msg)

    await nc.subscribe(inbox, cb=on_reply)
    return inbox, replies

async def test_a_sim_rep_serves_its_cells_over_nats(nats_server, fake_bbs: FakeBBS, start_rep) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        rep = await start_rep(
            "--sim", "--cells", "3", "--bbs-url", fake_bbs.url, "--presence-ttl", "0.6", "--rep-id", "sim.a",
            "--transport", "nats", "--nats-url", nats_server.url, "--memory-mb", "1024",
        )  # fmt: skip
        await ping_ready(rep.url)
        await eventually(lambda: {b.cell_id for b in fake_bbs.heartbeats} == set(CELLS),
                         DEADLINE_S, "HTTP heartbeats of every cell", lambda: len(fake_bbs.heartbeats))
        assert {b.rep_id for b in fake_bbs.heartbeats} == {"sim.a"}

        # One state request on the process's own subject, one reply holding every cell.
        inbox, replies = await collect_replies(nc)
        assert cells_state_subject("sim.a") == "vendue.cells.state.sim_a"
        await nc.publish(cells_state_subject("sim.a"), b"", reply=inbox)
        await eventually(lambda: len(replies) == 1, DEADLINE_S, "1 state reply", lambda: len(replies))
        states = HostCellStates.model_validate_json(replies[0].data).cells
        assert [s.cell_id for s in states] == CELLS

        # Work by request/reply on the process's subject (a `.` in its id becomes `_`): one more than fits
        # is rejected at once.
        app = desired("app", memory_mb=400)
        body = json.dumps(work_body("cell-1", (app, 0), (app, 1), (app, 2))).encode()
        reply = await nc.request(rep_subject("sim.a", "work"), body, timeout=10)
        assert rep_subject("sim.a", "work") == "vendue.rep.sim_a.work"
        result = HostWorkResult.model_validate_json(reply.data).cells["cell-1"]
        assert [lrp.index for lrp in result.rejected_lrps] == [2] and "memory" in result.reason
        # Under a token the BBS's lease does not carry, everything is rejected, with the reason.
        forged = json.dumps(work_body("cell-2", (app, 5), fencing_token=9)).encode()
        refused = HostWorkResult.model_validate_json((await nc.request(rep_subject("sim.a", "work"), forged,
                                                                       timeout=10)).data).cells["cell-2"]
        assert [lrp.index for lrp in refused.rejected_lrps] == [5]
        assert refused.reason == "unknown fencing token 9 (the lease's is 1)"

        # The NATS reply carries the bids (instances per process guid); the instances themselves are in the
        # cells' detail, over HTTP.
        await nc.publish(cells_state_subject("sim.a"), b"", reply=inbox)
        await eventually(lambda: len(replies) == 2, DEADLINE_S, "another state reply", lambda: len(replies))
        counts = {s.cell_id: s.lrp_counts for s in HostCellStates.model_validate_json(replies[1].data).cells}
        assert counts == {"cell-0": {}, "cell-1": {"app": 2}, "cell-2": {}}, counts
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(f"{rep.url}/state", params={"lrps": "full", "cells": "cell-1"})
        held = HostCellDetails.model_validate_json(answer.content).cells[0].lrps
        assert sorted(lrp.index for lrp in held) == [0, 1]

        # Stop one of them (a batch; an unknown instance is not found); cancel; garbage is refused.
        stops = {
            "instances": [
                {"cell_id": "cell-1", "process_guid": "app", "instance_guid": held[0].instance_guid},
                {"cell_id": "cell-1", "process_guid": "app", "instance_guid": "x"},
            ]
        }
        reply = await nc.request(rep_subject("sim.a", "stop"), json.dumps(stops).encode(), timeout=10)
        assert Found.model_validate_json(reply.data).found == [held[0].instance_guid]
        cancels = {"tasks": [{"cell_id": "cell-0", "task_guid": "nope"}]}
        reply = await nc.request(rep_subject("sim.a", "cancel"), json.dumps(cancels).encode(), timeout=10)
        assert Found.model_validate_json(reply.data).found == []
        reply = await nc.request(rep_subject("sim.a", "work"), b"garbage", timeout=10)
        assert "invalid body" in json.loads(reply.data)["error"]
        await eventually(
            lambda: any(
                r.instance_guid == held[0].instance_guid
                for _, body in fake_bbs.lifecycles
                for r in body.removed
            ),
            DEADLINE_S, "the stopped instance reported removed over HTTP",
            lambda: fake_bbs.lifecycles[-3:],
        )
    finally:
        await nc.close()


async def test_a_rep_started_before_nats_is_not_ready_then_serves_once_nats_is_up(
    tmp_path, fake_bbs: FakeBBS, start_rep
) -> None:
    server = NatsServer(port=free_port(), log_path=tmp_path / "nats.log")
    rep = await start_rep(
        "--sim", "--cells", "2", "--bbs-url", fake_bbs.url, "--transport", "nats", "--nats-url", server.url,
        "--rep-id", "sim-b",
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"{rep.url}/ping")
            assert response.status_code == 503 and response.json()["ready"] is False, response.text
            readyz = await client.get(f"{rep.url}/readyz")
            assert readyz.status_code == 503 and readyz.json()["reason"] == "NATS not connected", readyz.text
            assert (await client.get(f"{rep.url}/livez")).status_code == 200, "alive while not ready"
            await eventually(lambda: "NATS unreachable" in rep.stderr.read_text(),
                             DEADLINE_S, "a clear log line",
                             lambda: rep.stderr.read_text()[-500:])
            server.start()
            await ping_ready(rep.url)
        assert rep.proc.poll() is None
        nc = await nats.connect(server.url)
        try:
            inbox, replies = await collect_replies(nc)
            await nc.publish(cells_state_subject("sim-b"), b"", reply=inbox)
            await eventually(lambda: len(replies) == 1, DEADLINE_S, "1 state reply", lambda: len(replies))
            assert len(HostCellStates.model_validate_json(replies[0].data).cells) == 2
        finally:
            await nc.close()
    finally:
        server.stop()
