"""The rep host in-process: heartbeats, lifecycle transport and evacuation, against a mock BBS transport."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import httpx
import pytest

from common.models import CellLifecycle, CellPresence, DesiredLRP, LRPWork, ModificationTag, Work

from .cell import Cell, CellConfig
from .host import RepHost, lifecycle_sender
from .sim_executor import SimExecutor

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 10.0
BBS = "http://bbs.test"


class MockBBS:
    def __init__(self) -> None:
        self.heartbeats: list[CellPresence] = []
        self.lifecycles: list[tuple[str, CellLifecycle]] = []
        self.down = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("BBS down", request=request)
        parts = request.url.path.strip("/").split("/")
        if request.method == "PUT" and parts[:2] == ["v1", "cells"]:
            self.heartbeats.append(CellPresence.model_validate_json(request.content))
            return httpx.Response(204)
        if request.method == "POST" and parts[-1] == "lifecycle":
            self.lifecycles.append((parts[2], CellLifecycle.model_validate_json(request.content)))
            return httpx.Response(200, json={"refused": [], "refused_tasks": []})
        return httpx.Response(404, json={"detail": "no route"})


async def eventually(condition: Callable[[], bool], what: str, seen: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"expected {what} within {DEADLINE_S}s; saw {seen()!r}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def setup() -> AsyncIterator[tuple[RepHost, MockBBS]]:
    bbs = MockBBS()
    client = httpx.AsyncClient(transport=httpx.MockTransport(bbs.handle), timeout=5)
    sim = SimExecutor(start_delay_s=0.01)
    cells = [
        Cell(
            CellConfig(
                cell_id=f"cell-{i}",
                zone="z0",
                rep_url=f"http://rep/cells/cell-{i}",
                host="127.0.0.1",
                memory_mb=4096,
                disk_mb=65536,
                containers=250,
                stacks=("cflinuxfs4",),
            ),
            sim,
            lifecycle_sender(client, BBS, f"cell-{i}"),
        )
        for i in range(3)
    ]
    host = RepHost(cells, [sim], client, BBS, presence_ttl_s=0.3, evacuation_timeout_s=DEADLINE_S)
    await host.start()
    # A cell takes work only once the BBS has seen its boot (its first heartbeat).
    await eventually(lambda: not any(c.awaiting_registration for c in cells), "every cell registered",
                     lambda: [c.cell_id for c in cells if c.awaiting_registration])
    yield host, bbs
    await host.close()
    await client.aclose()


def work(*indices: int) -> Work:
    desired = DesiredLRP(process_guid="app", created_at=NOW, modification_tag=ModificationTag(epoch="e"))
    return Work(lrps=[LRPWork(desired=desired, index=i) for i in indices])


async def test_heartbeats_every_cell_each_period(setup: tuple[RepHost, MockBBS]) -> None:
    host, bbs = setup
    await eventually(lambda: len(bbs.heartbeats) >= 6, "two rounds of heartbeats", lambda: bbs.heartbeats)
    first_round = {p.cell_id for p in bbs.heartbeats[:3]}
    assert first_round == {"cell-0", "cell-1", "cell-2"}, "one heartbeat per cell per round"


async def test_reports_reach_the_bbs_after_an_outage(setup: tuple[RepHost, MockBBS]) -> None:
    host, bbs = setup
    bbs.down = True
    host.cells["cell-0"].accept(work(0, 1))
    outbox = host.cells["cell-0"].outbox
    await eventually(
        lambda: outbox.failed_requests >= 2, "failed attempts while down", lambda: outbox.failed_requests
    )
    assert bbs.lifecycles == [] and outbox.pending >= 2, "claims (and maybe running reports) kept"
    bbs.down = False
    await eventually(
        lambda: sum(len(b.running) for _, b in bbs.lifecycles) == 2,
        "both running reports after the outage",
        lambda: bbs.lifecycles,
    )
    claimed = [r.index for _, b in bbs.lifecycles for r in b.claimed]
    assert claimed == [0, 1]


async def test_evacuation_waits_until_the_bbs_stopped_every_instance(setup: tuple[RepHost, MockBBS]) -> None:
    host, bbs = setup
    cell = host.cells["cell-1"]
    cell.accept(work(0, 1))
    await eventually(
        lambda: all(i.state == "running" for i in cell.state().lrps), "running instances", cell.state
    )

    host.on_signal(signal.SIGTERM)

    await eventually(
        lambda: any(p.evacuating and p.cell_id == "cell-1" for p in bbs.heartbeats),
        "an evacuating heartbeat",
        lambda: bbs.heartbeats[-3:],
    )
    assert cell.accept(work(5)).reason == "cell is evacuating"
    await asyncio.sleep(0.1)  # a window in which nothing may happen: it holds instances, so it waits
    assert not cell.retired, "still holding instances: keeps waiting for the BBS"

    for instance in cell.state().lrps:  # the BBS stops each one once its replacement runs
        await cell.stop_lrp(instance.instance_guid)

    await asyncio.wait_for(host.wait_shutdown(), timeout=DEADLINE_S)
    assert all(c.retired for c in host.cells.values())
    removed = [r.index for cid, b in bbs.lifecycles if cid == "cell-1" for r in b.removed]
    assert sorted(removed) == [0, 1]


async def test_lifecycle_body_is_the_contract(setup: tuple[RepHost, MockBBS]) -> None:
    host, bbs = setup
    host.cells["cell-2"].accept(work(4))
    await eventually(lambda: bool(bbs.lifecycles), "a lifecycle request", lambda: None)
    cell_id, body = bbs.lifecycles[0]
    assert cell_id == "cell-2"
    assert set(json.loads(body.model_dump_json())) == set(CellLifecycle.model_fields)
