"""The rep host in-process: heartbeats, lifecycle transport and evacuation, against the fake BBS over HTTP
(tests/fake_bbs.py)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from common.models import CellLifecycle, DesiredLRP, ModificationTag, WorkResult
from common.models.rep_api import CellCordon, CordonCells
from tests.fake_bbs import FakeBBS, fake_bbs
from tests.support.polling import eventually

from .cell import CellConfig, RepCell
from .host import HostLifecycleSender, RepHost
from .sim_executor import SimExecutor

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 10.0


@pytest.fixture
async def setup() -> AsyncIterator[tuple[RepHost, FakeBBS]]:
    async with fake_bbs() as bbs, httpx.AsyncClient(timeout=5) as client:
        host = host_of_three_cells(bbs, client)
        await host.start()
        try:
            # A cell takes work only once the BBS has seen its boot (its first heartbeat).
            await eventually(lambda: not any(c.awaiting_registration for c in host.cells.values()),
                             DEADLINE_S, "every cell registered",
                             lambda: [c.cell_id for c in host.cells.values() if c.awaiting_registration])
            yield host, bbs
        finally:
            await host.close()


def host_of_three_cells(bbs: FakeBBS, client: httpx.AsyncClient) -> RepHost:
    sim = SimExecutor(start_delay_s=0.01)
    shared = HostLifecycleSender(client, bbs.url)  # as rep/main.py builds a host of many cells
    cells = [
        RepCell(
            CellConfig(
                cell_id=f"cell-{i}",
                zone="z0",
                rep_url="http://rep",
                host="127.0.0.1",
                memory_mb=4096,
                disk_mb=65536,
                containers=250,
                stacks=("cflinuxfs4",),
            ),
            sim,
            shared.for_cell(f"cell-{i}"),
        )
        for i in range(3)
    ]
    return RepHost(cells, [sim], client, bbs.url, presence_ttl_s=0.3, evacuation_timeout_s=DEADLINE_S)


def give(cell: RepCell, *indices: int) -> WorkResult:
    """Instances of one app, as a cell's part of a HostWork."""
    desired = DesiredLRP(process_guid="app", created_at=NOW, modification_tag=ModificationTag(epoch="e"))
    return cell.take([(desired, i) for i in indices], [], 0)


async def test_heartbeats_every_cell_each_period(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    await eventually(lambda: len(bbs.heartbeats) >= 6,
                     DEADLINE_S, "two rounds of heartbeats", lambda: bbs.heartbeats)
    first_round = {p.cell_id for p in bbs.heartbeats[:3]}
    assert first_round == {"cell-0", "cell-1", "cell-2"}, "one heartbeat per cell per round"
    puts = {r for r in bbs.routes() if r.startswith("PUT")}
    assert puts == {"PUT /v1/cells"}, f"the cells of a process heartbeat in one PUT; saw {puts}"


async def test_heartbeats_carry_what_each_cell_has_left_and_holds(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    give(host.cells["cell-1"], 0, 1)
    seen = len(bbs.heartbeats)
    await eventually(
        lambda: any(p.cell_id == "cell-1" for p in bbs.heartbeats[seen:]),
        DEADLINE_S, "a heartbeat of cell-1",
        lambda: bbs.heartbeats[seen:],
    )
    last = [p for p in bbs.heartbeats if p.cell_id == "cell-1"][-1]
    assert last.available == host.cells["cell-1"].available() and last.instances == 2, last
    assert last.available.containers == 248 and 0 <= last.starting <= 2


async def test_a_cell_the_bbs_answers_cordoned_refuses_work_until_uncordoned(
    setup: tuple[RepHost, FakeBBS],
) -> None:
    host, bbs = setup
    cell = host.cells["cell-2"]
    bbs.cordoned = {"cell-2"}
    await eventually(lambda: cell.cordoned,
                     DEADLINE_S, "cell-2 cordoned by a heartbeat's answer", lambda: cell.cordoned)
    refused = give(cell, 0)
    assert (len(refused.rejected_lrps), refused.reason) == (1, "cell is cordoned")
    assert give(host.cells["cell-0"], 0).rejected_lrps == [], "the other cells take work"
    bbs.cordoned = set()
    await eventually(lambda: not cell.cordoned, DEADLINE_S, "cell-2 uncordoned", lambda: cell.cordoned)
    assert give(cell, 0).rejected_lrps == []


async def test_a_heartbeat_answer_older_than_a_cordon_push_does_not_undo_it(
    setup: tuple[RepHost, FakeBBS],
) -> None:
    host, bbs = setup
    cell = host.cells["cell-2"]
    first, second = asyncio.Event(), asyncio.Event()
    bbs.heartbeat_gate = first
    try:
        await eventually(lambda: bbs.heartbeats_held == 1, DEADLINE_S, "a heartbeat answered, not yet sent",
                         lambda: bbs.heartbeats_held)
        # The BBS stores the cordon, then pushes it; the answer made before reaches the rep after the push.
        bbs.cordoned.add("cell-2")
        pushed = host.cordon(CordonCells(cells=[CellCordon(cell_id="cell-2", cordoned=True)]))
        assert pushed.found == ["cell-2"]
        bbs.heartbeat_gate = second
        first.set()
        # The next heartbeat reached the BBS: the rep has taken the old answer in, and holds the push.
        await eventually(lambda: bbs.heartbeats_held == 2, DEADLINE_S, "the next heartbeat",
                         lambda: bbs.heartbeats_held)
        assert cell.cordoned, "an answer to a heartbeat sent before the push un-cordoned the cell"
        assert give(cell, 0).reason == "cell is cordoned"
    finally:
        bbs.heartbeat_gate = None
        first.set()
        second.set()


async def test_cells_reporting_in_the_same_round_share_one_request(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    for cell_id in ("cell-0", "cell-1", "cell-2"):
        give(host.cells[cell_id], 0)
    await eventually(
        lambda: sum(len(b.running) for _, b in bbs.lifecycles) == 3,
        DEADLINE_S, "three running reports",
        lambda: bbs.lifecycles,
    )
    posts = {r: bbs.calls(r) for r in bbs.routes() if r.startswith("POST")}
    claims = [cid for cid, b in bbs.lifecycles if b.claimed]
    assert sorted(claims) == ["cell-0", "cell-1", "cell-2"], bbs.lifecycles
    # The three claims were queued in the same tick, each with the running report the simulator promises:
    # one request carries all six, and the instances start once it is answered.
    assert posts == {"POST /v1/lifecycle": 1}, posts
    assert [(len(b.claimed), len(b.running)) for _, b in bbs.lifecycles] == [(1, 1)] * 3, bbs.lifecycles


async def test_reports_reach_the_bbs_after_an_outage(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    bbs.unavailable = True
    give(host.cells["cell-0"], 0, 1)
    outbox = host.cells["cell-0"].outbox
    await eventually(
        lambda: outbox.failed_requests >= 2,
        DEADLINE_S, "failed attempts while down", lambda: outbox.failed_requests
    )
    assert bbs.lifecycles == [] and outbox.pending >= 2, "claims (and maybe running reports) kept"
    bbs.unavailable = False
    await eventually(
        lambda: sum(len(b.running) for _, b in bbs.lifecycles) == 2,
        DEADLINE_S, "both running reports after the outage",
        lambda: bbs.lifecycles,
    )
    claimed = [r.index for _, b in bbs.lifecycles for r in b.claimed]
    assert claimed == [0, 1]


async def test_evacuation_waits_until_the_bbs_stopped_every_instance(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    cell = host.cells["cell-1"]
    give(cell, 0, 1)
    await eventually(
        lambda: all(i.state == "running" for i in cell.detail().lrps),
        DEADLINE_S, "running instances", cell.detail
    )

    host.on_signal(signal.SIGTERM)

    await eventually(
        lambda: any(p.evacuating and p.cell_id == "cell-1" for p in bbs.heartbeats),
        DEADLINE_S, "an evacuating heartbeat",
        lambda: bbs.heartbeats[-3:],
    )
    assert give(cell, 5).reason == "cell is evacuating"
    await asyncio.sleep(0.1)  # a window in which nothing may happen: it holds instances, so it waits
    assert not cell.retired, "still holding instances: keeps waiting for the BBS"

    for instance in cell.detail().lrps:  # the BBS stops each one once its replacement runs
        await cell.stop_lrp(instance.instance_guid)

    await asyncio.wait_for(host.wait_shutdown(), timeout=DEADLINE_S)
    assert all(c.retired for c in host.cells.values())
    removed = [r.index for cid, b in bbs.lifecycles if cid == "cell-1" for r in b.removed]
    assert sorted(removed) == [0, 1]


async def test_lifecycle_body_is_the_contract(setup: tuple[RepHost, FakeBBS]) -> None:
    host, bbs = setup
    give(host.cells["cell-2"], 4)
    await eventually(lambda: bool(bbs.lifecycles), DEADLINE_S, "a lifecycle request", lambda: None)
    cell_id, body = bbs.lifecycles[0]
    assert cell_id == "cell-2"
    assert set(json.loads(body.model_dump_json())) == set(CellLifecycle.model_fields)


async def test_a_rep_started_before_its_bbs_registers_soon_after_the_bbs_answers() -> None:
    """Every process of a cluster starts at once, so the first heartbeat may find no BBS: the next try
    comes within a fraction of a second (backing off), not a whole heartbeat interval (TTL/3) later."""
    async with fake_bbs() as bbs, httpx.AsyncClient(timeout=5) as client:
        bbs.unavailable = True
        sim = SimExecutor(start_delay_s=0.01)
        config = CellConfig(cell_id="early", zone="z0", rep_url="http://rep", host="127.0.0.1",
                            memory_mb=4096, disk_mb=65536, containers=250, stacks=("cflinuxfs4",))
        cell = RepCell(config, sim, HostLifecycleSender(client, bbs.url).for_cell("early"))
        # Heartbeats every 20 minutes: within the test, every round after the first is a registration retry.
        host = RepHost([cell], [sim], client, bbs.url, presence_ttl_s=3600.0)
        await host.start()
        try:
            await eventually(lambda: host._failed_rounds >= 2,
                             DEADLINE_S, "two failed rounds while the BBS is down",
                             lambda: host._failed_rounds)
            assert cell.awaiting_registration
            assert give(cell, 0).reason == "cell not yet registered with the BBS"
            bbs.unavailable = False
            await eventually(lambda: not cell.awaiting_registration, DEADLINE_S,
                             "the cell registered by a retry", lambda: bbs.heartbeats)
            assert [p.cell_id for p in bbs.heartbeats] == ["early"], bbs.heartbeats
            # The cell is marked registered inside the round; the delays are reset when the round ends.
            await eventually(lambda: host._retry_delays.failures == 0, DEADLINE_S,
                             "a success starts the jittered delays again",
                             lambda: host._retry_delays.failures)
            # Registered: back to one heartbeat per interval (no retry storm).
            await asyncio.sleep(0.5)
            assert len(bbs.heartbeats) == 1, (
                f"expected no further heartbeat within the 20 min interval, saw {bbs.heartbeats}"
            )
        finally:
            await host.close()


async def test_a_failed_heartbeat_of_a_registered_cell_is_tried_again_soon() -> None:
    """A rep back from a stall has little of its TTL left, and its first heartbeat may fail (a connection the
    BBS closed meanwhile): the next try comes within a fraction of a second, not an interval (20 min)
    later."""
    async with fake_bbs() as bbs, httpx.AsyncClient(timeout=5) as client:
        host = one_cell_host(bbs, client, presence_ttl_s=3600.0)
        await host.start()
        try:
            await eventually(lambda: len(bbs.heartbeats) == 1, DEADLINE_S, "the first heartbeat",
                             lambda: bbs.heartbeats)
            bbs.unavailable = True
            host._beat_now.set()  # a round now, as after a stall: it fails
            await eventually(lambda: host._failed_rounds >= 1, DEADLINE_S, "a failed round",
                             lambda: host._failed_rounds)
            bbs.unavailable = False
            await eventually(lambda: len(bbs.heartbeats) == 2, DEADLINE_S, "a heartbeat again, soon",
                             lambda: bbs.heartbeats)
            await eventually(lambda: host._failed_rounds == 0, DEADLINE_S, "rounds succeed again",
                             lambda: host._failed_rounds)
        finally:
            await host.close()


class AnswersAuctions:
    """The gate rep/main.py gives the host: closed until opened; counts how often it was asked."""

    def __init__(self) -> None:
        self.open, self.asked = False, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.open


def one_cell_host(bbs: FakeBBS, client: httpx.AsyncClient, presence_ttl_s: float) -> RepHost:
    sim = SimExecutor(start_delay_s=0.01)
    config = CellConfig(cell_id="new", zone="z0", rep_url="http://rep", host="127.0.0.1",
                        memory_mb=4096, disk_mb=65536, containers=250, stacks=("cflinuxfs4",))
    cell = RepCell(config, sim, HostLifecycleSender(client, bbs.url).for_cell("new"))
    return RepHost([cell], [sim], client, bbs.url, presence_ttl_s=presence_ttl_s)


async def test_the_first_heartbeat_waits_until_the_rep_answers_auctions() -> None:
    """A cell is present from its first heartbeat, and auctions then ask it for its state: not before its
    servers (HTTP, NATS) can answer."""
    async with fake_bbs() as bbs, httpx.AsyncClient(timeout=5) as client:
        host, gate = one_cell_host(bbs, client, presence_ttl_s=3600.0), AnswersAuctions()
        await host.start(gate)
        try:
            await eventually(lambda: gate.asked >= 5, DEADLINE_S, "the gate asked again and again",
                             lambda: gate.asked)
            assert bbs.heartbeats == [], (
                f"expected no heartbeat while the rep cannot answer: {bbs.heartbeats}"
            )
            gate.open = True
            await eventually(lambda: [p.cell_id for p in bbs.heartbeats] == ["new"], DEADLINE_S,
                             "the first heartbeat once the rep answers", lambda: bbs.heartbeats)
        finally:
            await host.close()


async def test_a_rep_that_cannot_answer_auctions_still_heartbeats_after_an_interval() -> None:
    """Its NATS server away: the cells stay present (their instances are not rescheduled), and the
    auctioneer drops them from auctions as for any cell that does not answer."""
    async with fake_bbs() as bbs, httpx.AsyncClient(timeout=5) as client:
        host, gate = one_cell_host(bbs, client, presence_ttl_s=0.6), AnswersAuctions()  # interval 0.2 s
        await host.start(gate)
        try:
            await eventually(lambda: len(bbs.heartbeats) >= 2, DEADLINE_S, "heartbeats with the gate closed",
                             lambda: bbs.heartbeats)
            assert gate.asked > 1, f"expected the first heartbeat to wait on the gate; asked {gate.asked}"
        finally:
            await host.close()


async def test_after_a_silence_of_a_ttl_running_instances_are_reported_again_and_replaced_ones_stopped(
    setup: tuple[RepHost, FakeBBS],
) -> None:
    host, bbs = setup
    cell = host.cells["cell-0"]
    give(cell, 0, 1)

    def running_reports() -> list[str]:
        return [r.instance_guid for cell_id, body in bbs.lifecycles if cell_id == "cell-0"
                for r in body.running]

    await eventually(lambda: len(running_reports()) == 2, DEADLINE_S, "two running reports", running_reports)
    beats = len(bbs.heartbeats)
    await eventually(lambda: len(bbs.heartbeats) >= beats + 6, DEADLINE_S, "two more rounds of heartbeats",
                     lambda: bbs.heartbeats)
    assert len(running_reports()) == 2, "heartbeats on time: no instance reported again"

    replaced, kept = running_reports()
    bbs.replaced.add(replaced)  # what the BBS did while it heard nothing from the cell
    bbs.unavailable = True
    await eventually(lambda: host._failed_rounds >= 4,
                     DEADLINE_S, "heartbeats failing for over a TTL (0.3 s)",
                     lambda: host._failed_rounds)
    bbs.unavailable = False
    await eventually(lambda: not cell.has_instance(replaced), DEADLINE_S, "the replaced instance stopped",
                     lambda: running_reports())
    assert cell.has_instance(kept), "the instance the BBS still counts as the cell's was stopped"
    assert sorted(running_reports()[2:4]) == sorted([replaced, kept]), running_reports()
