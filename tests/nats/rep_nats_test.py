"""`vendue rep --sim --cells 3 --transport nats` as a real process, against a real nats-server and the
recording fake BBS of tests/rep: state as one scatter-gather, work/stop/cancel by request/reply,
heartbeats on NATS as well as HTTP, and /ping not ready while NATS is unreachable."""

from __future__ import annotations

import asyncio
import json

import httpx
import nats
import pytest

from common.models import CellPresence, CellState, WorkResult
from common.procutil import free_port
from common.transport.nats_server import NatsServer
from common.transport.subjects import CELL_ID_HEADER, CELLS_HEARTBEAT, CELLS_STATE, cell_subject
from tests.rep.rep_process_test import FakeBBS, desired, eventually, work_body

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CELLS = ["cell-0", "cell-1", "cell-2"]


async def ping_ready(url: str, timeout_s: float = 30.0) -> None:
    """Poll GET {url}/ping until 200; fail naming the last answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            response = await client.get(f"{url}/ping")
            if response.status_code == 200:
                return
            assert loop.time() < deadline, f"expected {url}/ping 200 within {timeout_s} s; saw {response.status_code} {response.text}"
            await asyncio.sleep(0.05)



async def collect_replies(nc) -> tuple[str, list]:
    """An inbox subscribed on `nc`, and the list every message to it is appended to."""
    inbox, replies = nc.new_inbox(), []

    async def on_reply(msg) -> None:
        replies.append(msg)

    await nc.subscribe(inbox, cb=on_reply)
    return inbox, replies

async def test_a_sim_rep_serves_its_cells_over_nats(nats_server, fake_bbs: FakeBBS, start_rep) -> None:
    nc = await nats.connect(nats_server.url)
    beats: list[CellPresence] = []

    async def on_beat(msg) -> None:
        beats.append(CellPresence.model_validate_json(msg.data))

    await nc.subscribe(CELLS_HEARTBEAT, cb=on_beat)
    try:
        rep = await start_rep(
            "--sim", "--cells", "3", "--bbs-url", fake_bbs.url, "--presence-ttl", "0.6",
            "--transport", "nats", "--nats-url", nats_server.url, "--memory-mb", "1024",
        )  # fmt: skip
        await ping_ready(rep.url)

        # Heartbeats arrive on NATS and over HTTP.
        await eventually(lambda: {b.cell_id for b in beats} == set(CELLS), "NATS heartbeats of every cell",
                         lambda: sorted({b.cell_id for b in beats}))
        await eventually(lambda: {b.cell_id for b in fake_bbs.heartbeats} == set(CELLS),
                         "HTTP heartbeats of every cell", lambda: len(fake_bbs.heartbeats))

        # One state request, one reply per hosted cell, each naming its cell in a header.
        inbox, replies = await collect_replies(nc)
        await nc.publish(CELLS_STATE, b"", reply=inbox)
        await eventually(lambda: len(replies) == 3, "3 state replies", lambda: len(replies))
        states = {m.headers[CELL_ID_HEADER]: CellState.model_validate_json(m.data) for m in replies}
        assert set(states) == set(CELLS) and all(s.cell_id == c for c, s in states.items())
        assert states["cell-1"].rep_url == f"{rep.url}/cells/cell-1"

        # Work by request/reply: one more than fits is rejected at once.
        app = desired("app", memory_mb=400)
        body = json.dumps(work_body((app, 0), (app, 1), (app, 2))).encode()
        reply = await nc.request(cell_subject("cell-1", "work"), body, timeout=10)
        result = WorkResult.model_validate_json(reply.data)
        assert [lrp.index for lrp in result.rejected_lrps] == [2] and "memory" in result.reason

        # Stop one of them; stopping an unknown instance says not found.
        await nc.publish(CELLS_STATE, b"", reply=inbox)
        await eventually(lambda: len(replies) == 6, "3 more state replies", lambda: len(replies))
        # The NATS bid is the summary form (per-process counts); the instances themselves are in the
        # full state over HTTP.
        counts = {CellState.model_validate_json(m.data).cell_id: CellState.model_validate_json(m.data).lrp_counts
                  for m in replies[3:]}
        assert counts == {"cell-0": {}, "cell-1": {"app": 2}, "cell-2": {}}, counts
        async with httpx.AsyncClient(timeout=10) as client:
            held = CellState.model_validate_json((await client.get(f"{rep.url}/cells/cell-1/state")).content).lrps
        assert sorted(lrp.index for lrp in held) == [0, 1]
        stop = {"process_guid": "app", "instance_guid": held[0].instance_guid}
        reply = await nc.request(cell_subject("cell-1", "stop"), json.dumps(stop).encode(), timeout=10)
        assert json.loads(reply.data) == {"found": True}
        reply = await nc.request(cell_subject("cell-1", "stop"), json.dumps({**stop, "instance_guid": "x"}).encode(),
                                 timeout=10)
        assert json.loads(reply.data) == {"found": False}
        reply = await nc.request(cell_subject("cell-0", "cancel"), b'{"task_guid": "nope"}', timeout=10)
        assert json.loads(reply.data) == {"found": False}
        reply = await nc.request(cell_subject("cell-0", "work"), b"garbage", timeout=10)
        assert "invalid body" in json.loads(reply.data)["error"]
        await eventually(
            lambda: any(r.instance_guid == held[0].instance_guid for _, body in fake_bbs.lifecycles for r in body.removed),
            "the stopped instance reported removed over HTTP", lambda: fake_bbs.lifecycles[-3:],
        )
    finally:
        await nc.close()


async def test_a_rep_started_before_nats_is_not_ready_then_serves_once_nats_is_up(
    tmp_path, fake_bbs: FakeBBS, start_rep
) -> None:
    server = NatsServer(port=free_port(), log_path=tmp_path / "nats.log")
    rep = await start_rep(
        "--sim", "--cells", "2", "--bbs-url", fake_bbs.url, "--transport", "nats", "--nats-url", server.url,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"{rep.url}/ping")
            assert response.status_code == 503 and response.json()["ready"] is False, response.text
            await eventually(lambda: "NATS unreachable" in rep.stderr.read_text(), "a clear log line",
                             lambda: rep.stderr.read_text()[-500:])
            server.start()
            await ping_ready(rep.url)
        assert rep.proc.poll() is None
        nc = await nats.connect(server.url)
        try:
            inbox, replies = await collect_replies(nc)
            await nc.publish(CELLS_STATE, b"", reply=inbox)
            await eventually(lambda: len(replies) == 2, "2 state replies", lambda: len(replies))
        finally:
            await nc.close()
    finally:
        server.stop()
