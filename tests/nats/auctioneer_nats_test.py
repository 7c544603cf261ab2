"""The auctioneer in-process with `transport="nats"`, against a real nats-server, NATS fake reps and an
HTTP fake BBS: auction requests in over NATS, one state scatter-gather, work by request/reply."""

from __future__ import annotations

import contextlib
import json
from collections import Counter

import httpx
import nats
import pytest

from auctioneer.app import create_app
from auctioneer.settings import AuctioneerSettings
from common.models import TaskStartRequest
from common.procutil import free_port
from common.tls import TLSFiles, init_ca, issue, server_context
from common.transport.nats_connection import NatsConnection
from common.transport.nats_server import NatsServer, certificate_identities, issue_server_certificate
from common.transport.subjects import AUCTIONEER_LRPS, AUCTIONEER_TASKS
from tests.auctioneer.fakes import WAIT_S, desired, serving, start_request, task
from tests.fake_bbs import fake_bbs
from tests.nats.fakes import nats_fake_reps
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def auctioneer(nats_url: str, **settings):
    async with nats_fake_reps(nats_url) as reps, fake_bbs(reps) as bbs:  # type: ignore[arg-type]
        app = create_app(AuctioneerSettings(
            bbs_url=bbs.url, transport="nats", nats_url=nats_url, _env_file=None, **settings
        ))
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            service = app.state.service
            await service.nats.wait_connected(10)
            await eventually(lambda: service.intake.is_open, WAIT_S, "the NATS intake subscribed")
            yield reps, bbs, client, service


async def idle(service, auctions: int) -> None:
    def idle_after_enough() -> bool:
        batcher = service.batcher
        return service.metrics.auctions >= auctions and not batcher.pending and not batcher.auction_running

    await eventually(idle_after_enough, WAIT_S, f"{auctions} auctions and an idle loop",
                     service.metrics.stats)


def body(*requests) -> bytes:
    return json.dumps([r.model_dump(mode="json") for r in requests]).encode()


async def test_requests_over_nats_cost_one_state_request_per_rep_and_one_work_request_per_winning_rep(
    nats_server,
):
    async with auctioneer(nats_server.url) as (reps, bbs, client, service):
        for i in range(3):
            await reps.add(f"cell-{i}", zone=f"z{i}")
        await reps.add("sim-0", zone="z3", rep="sim")  # two cells of one process
        await reps.add("sim-1", zone="z4", rep="sim")
        nc = await nats.connect(nats_server.url)
        try:
            reply = await nc.request(
                AUCTIONEER_LRPS, body(start_request(desired("web", 30, memory_mb=64))), timeout=5
            )
            assert json.loads(reply.data) == {"accepted": 1}
            await eventually(lambda: reps.lrps_received == 30, WAIT_S, "30 LRPs at the reps",
                             lambda: reps.lrps_received)
            await idle(service, 1)
            reply = await nc.request(AUCTIONEER_TASKS, body(TaskStartRequest(task=task("t1"))), timeout=5)
            assert json.loads(reply.data) == {"accepted": 1}
            await idle(service, 2)
        finally:
            await nc.close()

        stats = (await client.get("/v1/stats")).json()
        assert (stats["lrps_placed"], stats["tasks_placed"], stats["lrps_failed"]) == (30, 1, 0), stats
        assert stats["transport"] == "nats" and stats["bad_replies"] == 0
        # Per auction: one state request and reply per rep process, one work request and reply per winning
        # process.
        assert reps.state_requests == 2 * 4 and reps.state_replies == {
            "cell-0": 2,
            "cell-1": 2,
            "cell-2": 2,
            "sim": 2,
        }
        works = sum(len(w) for w in reps.work.values())
        assert stats["messages"] == {
            "state_request": 8,
            "state_reply": 8,
            "work_request": works,
            "work_reply": works,
        }
        assert stats["last_auction_messages"] == 4 + 4 + 2  # the task went to one process
        assert stats["requests_made"]["rep_state"] == 0 and stats["requests_made"]["rep_work"] == 0
        placed = Counter(
            c for works in reps.work.values() for w in works for c in w.cells for _ in w.instances(c)
        )
        assert sorted(placed.values()) == [6, 6, 6, 6, 6], placed  # Diego spreads the process over the cells
        assert set(reps.work["sim"][0].cells) == {"sim-0", "sim-1"}, "both cells' work in one request"
        assert (await client.get("/ping")).json() == {"ok": True, "ready": True, "insecure": True}


async def test_a_garbage_state_reply_skips_its_cell_is_counted_and_does_not_wait_for_the_deadline(
    nats_server,
):
    # The gather's deadline is five minutes away (the most it may be): an auction over within the wait's
    # bound ended its gather when every cell had answered, the garbage ones included.
    async with auctioneer(nats_server.url, cell_state_timeout=300) as (reps, bbs, client, service):
        await reps.add("good", zone="z1")
        await reps.add("garbage", zone="z2", state_mode="garbage")
        await reps.add("invalid", zone="z3", state_mode="invalid")
        service.batcher.add_lrps([start_request(desired("web", 4, memory_mb=64))])
        await idle(service, 1)
        metrics = (await client.get("/metrics")).text
        assert 'vendue_auctioneer_cells_dropped_total{reason="invalid_state"} 2.0' in metrics, metrics
        assert 'reason="timeout"' not in metrics, "dropped as unreadable, none as unanswered"
        stats = (await client.get("/v1/stats")).json()
        assert stats["bad_replies"] == 2, stats
        assert set(reps.work) == {"good"} and reps.lrps_received == 4
        assert stats["cells_dropped"] == 2 and stats["lrps_placed"] == 4


async def test_a_cell_that_does_not_answer_drops_out_at_the_state_timeout(nats_server):
    async with auctioneer(nats_server.url, cell_state_timeout=0.5) as (reps, bbs, client, service):
        await reps.add("quiet", zone="z1", state_mode="silent")
        await reps.add("talks", zone="z2")
        service.batcher.add_lrps([start_request(desired("web", 2, memory_mb=64))])
        await idle(service, 1)
        assert set(reps.work) == {"talks"} and reps.lrps_received == 2
        assert service.metrics.cells_dropped == 1 and service.metrics.bad_replies == 0


async def test_a_rep_reporting_another_process_s_cell_is_not_believed_and_is_counted(nats_server):
    """A compromised rep answers for a stopped process's cell too: that state is dropped and counted, the
    stopped cell drops out at the timeout, and no work goes to it."""
    async with auctioneer(nats_server.url, cell_state_timeout=0.5) as (reps, bbs, client, service):
        await reps.add("liar", zone="z1", state_mode="forge")
        await reps.add("stopped", zone="z2", state_mode="silent")
        service.batcher.add_lrps([start_request(desired("web", 4, memory_mb=64))])
        await idle(service, 1)
        assert set(reps.work) == {"liar"} and reps.lrps_received == 4, reps.work
        metrics = (await client.get("/metrics")).text
        assert "vendue_auctioneer_forged_states_total 1.0" in metrics, metrics
        assert 'vendue_auctioneer_cells_dropped_total{reason="timeout"} 1.0' in metrics, metrics


async def test_a_garbage_work_reply_is_counted_and_taken_as_delivered(nats_server):
    async with auctioneer(nats_server.url) as (reps, bbs, client, service):
        await reps.add("c1", work_mode="garbage")
        service.batcher.add_lrps([start_request(desired("web", 3, memory_mb=64))])
        await idle(service, 1)
        stats = service.metrics.stats()
        assert (stats["bad_replies"], stats["lrps_placed"], stats["lrps_carried"]) == (1, 3, 0), stats


async def test_an_unreadable_auction_request_is_refused_counted_and_the_auctioneer_keeps_going(nats_server):
    async with auctioneer(nats_server.url) as (reps, bbs, client, service):
        await reps.add("c1")
        nc = await nats.connect(nats_server.url)
        try:
            reply = await nc.request(AUCTIONEER_LRPS, b'{"not": "a list"', timeout=5)
            assert "invalid lrps request" in json.loads(reply.data)["error"]
            reply = await nc.request(AUCTIONEER_LRPS, body(start_request(desired("web", 1))), timeout=5)
            assert json.loads(reply.data) == {"accepted": 1}
        finally:
            await nc.close()
        await eventually(lambda: reps.lrps_received == 1, WAIT_S, "1 LRP placed", lambda: reps.lrps_received)
        assert service.metrics.bad_replies == 1


async def test_nats_unreachable_at_start_is_not_ready_then_ready_once_the_server_appears(tmp_path, caplog):
    port = free_port()
    server = NatsServer(port=port, log_path=tmp_path / "nats.log")
    async with fake_bbs() as bbs:
        app = create_app(AuctioneerSettings(
            bbs_url=bbs.url, transport="nats", nats_url=server.url, _env_file=None,
        ))
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.get("/ping")
            assert response.status_code == 503 and response.json()["ready"] is False, response.text
            assert response.json()["nats"]["url"] == server.url
            service = app.state.service
            await eventually(lambda: service.nats.failed_attempts >= 1, WAIT_S, "a failed attempt",
                             lambda: service.nats.status())
            assert any(r.getMessage() == "NATS unreachable; retrying with backoff" for r in caplog.records)
            try:
                server.start()
                await service.nats.wait_connected(15)
                assert (await client.get("/ping")).json() == {"ok": True, "ready": True, "insecure": True}
            finally:
                server.stop()


async def test_over_tls_the_auctioneer_takes_start_requests_from_the_bbs_with_its_certificate(tmp_path):
    """The auctioneer presents its certificate to NATS (no anonymous user exists), subscribes to the start
    requests, answers the BBS's, and auctions them (no cells: reported to the BBS under its term)."""
    pki = tmp_path / "pki"
    init_ca(pki)
    issue_server_certificate(pki)
    for role in ("auctioneer", "bbs"):
        issue(pki, role=role, name=role)
    server = NatsServer(tls=TLSFiles.in_dir(pki, "nats"), users=certificate_identities(pki),
                        log_path=tmp_path / "nats-server.log").start()
    files = TLSFiles.in_dir(pki, "auctioneer")
    try:
        async with fake_bbs(ssl_context=server_context(TLSFiles.in_dir(pki, "bbs"))) as bbs:
            app = create_app(
                AuctioneerSettings(
                    bbs_url=bbs.url,
                    transport="nats",
                    nats_url=server.url,
                    tls_cert=files.cert,
                    tls_key=files.key,
                    tls_ca=files.ca,
                    _env_file=None,
                )
            )
            async with serving(app, server_context(files)):
                service = app.state.service
                await service.nats.wait_connected(10)
                await eventually(lambda: service.intake.is_open, WAIT_S, "the NATS intake subscribed")
                as_bbs = NatsConnection(server.url, name="bbs", tls=TLSFiles.in_dir(pki, "bbs"))
                as_bbs.start()
                try:
                    await as_bbs.wait_connected(10)
                    reply = await as_bbs.client.request(
                        AUCTIONEER_LRPS, body(start_request(desired("web", 1))), timeout=5
                    )
                    assert json.loads(reply.data) == {"accepted": 1}
                finally:
                    await as_bbs.close()
                await eventually(lambda: bbs.failure_reports, WAIT_S, "a failure report",
                                 lambda: bbs.failure_posts)
                assert bbs.failure_reports[0].fencing_token == 1
    finally:
        server.stop()
