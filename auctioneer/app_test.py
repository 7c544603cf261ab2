"""The whole auctioneer in-process, over real HTTP, against fake reps and a fake BBS."""

import contextlib
from collections import Counter

import httpx
import pytest

from auctioneer.app import create_app
from auctioneer.settings import AuctioneerSettings
from common.accepted_work import lrps_of
from common.models import TaskStartRequest
from common.procutil import free_port
from placement.diagnosis import NO_CELLS
from tests.auctioneer.fakes import WAIT_S, desired, fake_reps, serving, start_request, task
from tests.fake_bbs import fake_bbs
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def cluster(**settings):
    async with fake_reps() as reps, fake_bbs(reps) as bbs:
        app = create_app(AuctioneerSettings(bbs_url=bbs.url, _env_file=None, **settings))
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            service = app.state.service
            # A start request before the election is handed back (503): the BBS would retry it.
            await eventually(lambda: service.leadership.leader, WAIT_S, "the auctioneer leading")
            yield reps, bbs, client, service


def body(*requests) -> list:
    return [r.model_dump(mode="json") for r in requests]


async def idle(service, auctions: int) -> None:
    def idle_after_enough() -> bool:
        batcher = service.batcher
        return service.metrics.auctions >= auctions and not batcher.pending and not batcher.auction_running

    await eventually(idle_after_enough, WAIT_S, f"{auctions} auctions and an idle loop",
                     service.metrics.stats)


async def test_bad_input_is_a_422_and_nothing_is_queued():
    async with cluster() as (reps, bbs, client, service):
        bad = [{"desired": {"process_guid": "bad guid!", "created_at": "2024-01-01T00:00:00Z",
                            "modification_tag": {"epoch": "e"}}, "indices": [0]}]
        response = await client.post("/v1/lrps", json=bad)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][:3] == ["body", 0, "desired"]
        assert (await client.post("/v1/lrps", json=[{"indices": []}])).status_code == 422
        odd = [
            {
                "desired": {
                    **bad[0]["desired"],
                    "process_guid": "odd",
                    "objective": "this is not (an expression",
                },
                "indices": [0],
            }
        ]
        response = await client.post("/v1/lrps", json=odd)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", 0, "desired", "objective"]
        assert (await client.post("/v1/tasks", json=[{"task": {"task_guid": "t"}}])).status_code == 422
        assert (await client.post("/v1/tasks", json={"not": "a list"})).status_code == 422
        assert service.batcher.pending == 0 and service.metrics.auctions == 0
        assert (await client.get("/ping")).json() == {"ok": True, "insecure": True}


@pytest.mark.parametrize("thread_threshold", [500, 0])
async def test_a_batch_is_placed_with_one_post_per_winning_cell(thread_threshold):
    async with cluster(thread_threshold=thread_threshold) as (reps, bbs, client, service):
        for i in range(3):
            reps.add(f"cell-{i}", zone=f"z{i}")
        web, api = desired("web", 30, memory_mb=128), desired("api", 6, memory_mb=256)
        response = await client.post("/v1/lrps", json=body(start_request(web), start_request(api)))
        assert response.status_code == 202 and response.json() == {"accepted": 2}
        response = await client.post("/v1/tasks", json=body(TaskStartRequest(task=task("t1"))))
        assert response.status_code == 202 and response.json() == {"accepted": 1}

        await eventually(
            lambda: reps.lrps_received == 36 and reps.tasks_received == 1,
            WAIT_S, "36 LRPs and 1 task at the reps", lambda: f"{reps.lrps_received}, {reps.tasks_received}",
        )
        await idle(service, 1)
        stats = (await client.get("/v1/stats")).json()
        assert (stats["lrps_placed"], stats["tasks_placed"], stats["lrps_failed"], stats["tasks_failed"]) == (
            36,
            1,
            0,
            0,
        )
        # Both posts may arrive before the first auction or split over two; either way at most one
        # state fetch and one work POST per cell per auction, and two BBS requests: its cells, its report.
        auctions = stats["auctions"]
        assert stats["requests_made"] == {"bbs": 2 * auctions, "rep_state": 3 * auctions,
                                          "rep_work": reps.work_post_count}
        assert reps.work_post_count <= 3 * auctions
        spread = Counter()
        for cell_id, posts in reps.work_posts.items():
            for work in posts:
                spread[cell_id] += sum(1 for d, _ in work.instances(cell_id) if d.process_guid == "web")
                assert work.fencing_token == 1  # the first term of the fake BBS's lease
        assert sorted(spread.values()) == [10, 10, 10]  # Diego spreads a process across cells
        # Each auction's report names no failure, and what each cell accepted: exactly what it was sent.
        await eventually(lambda: len(bbs.failure_reports) == auctions, WAIT_S, f"{auctions} reports",
                         lambda: len(bbs.failure_reports))
        assert not any(r.lrps or r.tasks for r in bbs.failure_reports)
        accepted = {(cell_id, key) for r in bbs.failure_reports for cell_id, work in r.accepted.items()
                    for key in lrps_of(work.lrps)}
        sent = {(cell_id, (d.process_guid, index)) for cell_id, posts in reps.work_posts.items()
                for work in posts for d, index in work.instances(cell_id)}
        assert accepted == sent and len(sent) == 36
        assert [(c, w.tasks) for r in bbs.failure_reports for c, w in r.accepted.items() if w.tasks] == [
            (cell_id, "t1") for cell_id, posts in reps.work_posts.items() for work in posts
            if work.cells[cell_id].tasks]

        metrics = (await client.get("/metrics")).text
        assert "vendue_auctioneer_auctions_total" in metrics
        assert 'vendue_auctioneer_requests_total{target="rep_state"}' in metrics
        assert "vendue_auctioneer_state_fetch_seconds_bucket" in metrics


async def test_with_no_cells_everything_fails_in_one_report():
    async with cluster() as (reps, bbs, client, service):
        await client.post("/v1/lrps", json=body(start_request(desired("web", 4))))
        await client.post("/v1/tasks", json=body(TaskStartRequest(task=task("t1"))))
        await eventually(
            lambda: sum(len(r.lrps) + len(r.tasks) for r in bbs.failure_reports) == 5,
            WAIT_S, "5 failures reported", lambda: bbs.failure_reports,
        )
        await idle(service, 1)
        assert len(bbs.failure_reports) == service.metrics.auctions
        errors = {f.error for r in bbs.failure_reports for f in (*r.lrps, *r.tasks)}
        assert errors == {NO_CELLS}
        assert reps.work_post_count == 0


async def test_what_no_cell_fits_is_reported_with_diegos_error_and_the_breakdown():
    async with cluster() as (reps, bbs, client, service):
        reps.add("small", memory_mb=1024)
        reps.add("evacuating", evacuating=True)
        await client.post("/v1/lrps", json=body(
            start_request(desired("big", 1, memory_mb=4096)),
            start_request(desired("fits", 1, memory_mb=512)),
        ))
        await eventually(lambda: len(bbs.failure_reports) == 1, WAIT_S, "one report",
                         lambda: bbs.failure_reports)
        failures = {f.process_guid: f for f in bbs.failure_reports[0].lrps}
        assert set(failures) == {"big"}
        assert failures["big"].error == "insufficient resources: memory"
        assert (
            failures["big"].detail.startswith("0/1 cells fit")
            and "1 cells left out: 1 evacuating" in failures["big"].detail
        )
        await eventually(lambda: reps.lrps_received == 1, WAIT_S, "'fits' placed", lambda: reps.work_posts)


async def test_rejected_work_is_retried_up_to_max_attempts_then_reported_with_the_reps_reason():
    async with cluster(max_attempts=3) as (reps, bbs, client, service):
        reps.add("grumpy", work_mode="reject", reason="insufficient resources: disk")
        await client.post("/v1/lrps", json=body(start_request(desired("web", 2))))
        await eventually(lambda: any(r.lrps for r in bbs.failure_reports), WAIT_S, "a report of failures",
                         lambda: bbs.failure_reports)
        await idle(service, 3)
        assert [len(w.instances("grumpy")) for w in reps.work_posts["grumpy"]] == [2, 2, 2]
        assert len(bbs.failure_reports) == 3  # one report per auction; the last fails what ran out of tries
        [failed] = [r for r in bbs.failure_reports if r.lrps]
        # What the rep refused is never explained as placed there; what ran out of tries, by its failure.
        assert not any(e.placed for r in bbs.failure_reports for e in r.explanations)
        assert [(e.index, e.placed, e.error) for e in failed.explanations] == [
            (0, False, "insufficient resources: disk"), (1, False, "insufficient resources: disk")]
        assert [(f.index, f.error) for f in failed.lrps] == [
            (0, "insufficient resources: disk"), (1, "insufficient resources: disk"),
        ]
        stats = service.metrics.stats()
        assert (stats["auctions"], stats["lrps_carried"], stats["lrps_failed"]) == (3, 4, 2)


@pytest.mark.parametrize("bbs_answer", ["no lease API", "unreachable"])
async def test_without_a_lease_it_stands_by_auctions_nothing_and_is_not_ready(bbs_answer):
    async with fake_reps() as reps, fake_bbs(reps) as bbs:
        reps.add("cell-0")
        bbs.lease_api = False
        bbs_url = bbs.url if bbs_answer == "no lease API" else f"http://127.0.0.1:{free_port()}"
        app = create_app(AuctioneerSettings(bbs_url=bbs_url, lease_ttl=0.6, _env_file=None))
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            service = app.state.service
            response = await client.post("/v1/lrps", json=body(start_request(desired("web", 2))))
            # Handed back, not kept: no leader is known to forward to, and this one may never lead.
            assert response.status_code == 503 and "no leader is known" in response.json()["detail"], (
                response.text
            )
            assert response.headers["retry-after"] == "1"
            seen = service.leadership.attempts
            await eventually(
                lambda: service.leadership.attempts >= seen + 2,
                WAIT_S, "two more lease attempts after the post", lambda: service.leadership.attempts - seen,
            )
            stats = (await client.get("/v1/stats")).json()
            assert (stats["leader"], stats["fencing_token"], stats["auctions"], stats["pending"]) == (
                False,
                0,
                0,
                0,
            )
            assert stats["handed_back"] == 1
            assert reps.work_post_count == 0 and sum(reps.state_calls.values()) == 0
            ready = await client.get("/readyz")
            expected = "404" if bbs_answer == "no lease API" else "no BBS reachable"
            assert ready.status_code == 503 and expected in ready.json()["reason"], ready.text
            assert (await client.get("/livez")).status_code == 200


async def test_a_standby_forwards_to_the_leader_and_hands_back_what_it_cannot_forward():
    """a1 leads, a2 stands by: a2 forwards a start request to a1. Once a1 is gone (it released the lease),
    a2 cannot forward: it answers 503 (the BBS asks the lease again and retries) rather than keep the
    request, and takes the free lease at once; the retry is then a2's to auction."""
    async with fake_reps() as reps, fake_bbs(reps) as bbs:
        reps.add("cell-0")
        ports = {name: free_port() for name in ("a1", "a2")}
        apps = {
            name: create_app(AuctioneerSettings(bbs_url=bbs.url, port=port, lease_ttl=60.0, _env_file=None))
            for name, port in ports.items()
        }
        first, second = (apps[name].state.service for name in ("a1", "a2"))
        a1 = contextlib.AsyncExitStack()
        async with a1:
            a1_url = await a1.enter_async_context(serving(apps["a1"], port=ports["a1"]))
            await eventually(lambda: first.leadership.leader, WAIT_S, "a1 leading")
            async with serving(apps["a2"], port=ports["a2"]) as a2_url, \
                    httpx.AsyncClient(base_url=a2_url, timeout=10) as client:
                await eventually(
                    lambda: second.leadership.holder_url == a1_url,
                    WAIT_S, "a2 knowing a1 leads", lambda: second.leadership.holder_url,
                )
                response = await client.post("/v1/lrps", json=body(start_request(desired("web", 1))))
                assert response.status_code == 202 and second.forwarder.forwarded == 1, response.text
                await idle(first, 1)
                assert reps.lrps_received == 1 and second.batcher.pending == 0

                await a1.aclose()  # a graceful stop: a1 releases the lease
                response = await client.post("/v1/lrps", json=body(start_request(desired("api", 1))))
                assert response.status_code == 503 and a1_url in response.json()["detail"], response.text
                assert (second.forwarder.handed_back, second.batcher.pending) == (1, 0)
                # Woken by the failed forward, a2 takes the released lease long before its next attempt.
                await eventually(lambda: second.leadership.leader, 5.0, "a2 leading")
                response = await client.post("/v1/lrps", json=body(start_request(desired("api", 1))))
                assert response.status_code == 202, response.text
                await idle(second, 1)
                assert reps.lrps_received == 2


async def test_each_auction_report_explains_where_each_instance_went_and_why_others_went_nowhere():
    async with cluster() as (reps, bbs, client, service):
        for i in range(3):
            reps.add(f"cell-{i}", zone="z1", memory_mb=1024)
        await client.post("/v1/lrps", json=body(start_request(desired("web", 2, memory_mb=128)),
                                                start_request(desired("big", 1, memory_mb=4096))))
        await eventually(
            lambda: any(r.explanations for r in bbs.failure_reports),
            WAIT_S, "a report with explanations", lambda: bbs.failure_reports,
        )
        [report] = [r for r in bbs.failure_reports if r.explanations]
        assert (report.lrps_placed, report.lrps_failed) == (2, 1)
        assert report.duration_s >= report.fetch_states_s > 0
        why = {(e.process_guid, e.index): e for e in report.explanations}
        sent = {
            (d.process_guid, index): cell_id
            for cell_id, posts in reps.work_posts.items()
            for work in posts
            for d, index in work.instances(cell_id)
        }
        for key in (("web", 0), ("web", 1)):
            assert why[key].placed and why[key].cell_id == sent[key]
            assert [c.cell_id for c in why[key].candidates if c.chosen] == [sent[key]]
            assert len(why[key].candidates) == 3, "every cell of the pool: the winner and two runners-up"
            scores = [c.components["score"] for c in why[key].candidates]
            assert scores == sorted(scores) and why[key].candidates[0].chosen
        assert not why["big", 0].placed
        assert why["big", 0].error == "insufficient resources: memory"
        assert why["big", 0].detail.startswith("0/3 cells fit: 3 insufficient memory")
