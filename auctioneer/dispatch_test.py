import pytest

from auctioneer import dispatch
from auctioneer.batcher import Batch, PendingLRP, PendingTask
from auctioneer.cells import RepAddress
from auctioneer.clients import RepClients
from auctioneer.dispatch import (
    FENCING_TOKEN,
    BodyWriter,
    CellWork,
    Dispatcher,
    Rejection,
    group_work,
    split_rejections,
)
from auctioneer.metrics import Metrics
from common.models import HostWork
from placement.diagnosis import NO_CELLS
from placement.types import AuctionResult, Failure, LRPAssignment, TaskAssignment
from tests.auctioneer.fakes import FakeReps, desired, fake_reps, task

pytestmark = pytest.mark.timeout(60)


def batch_of(*items) -> Batch:
    batch = Batch()
    for item in items:
        (batch.add_lrp if isinstance(item, PendingLRP) else batch.add_task)(item)
    return batch


def test_group_work_makes_one_work_per_winning_cell_however_many_instances():
    web, api = desired("web", 40), desired("api", 10)
    batch = batch_of(*(PendingLRP(web, i) for i in range(40)), *(PendingLRP(api, i) for i in range(10)),
                     PendingTask(task("t1")))
    result = AuctionResult(
        lrp_assignments=[LRPAssignment("web", i, f"c{i % 2}") for i in range(40)]
        + [LRPAssignment("api", i, "c2") for i in range(10)],
        task_assignments=[TaskAssignment("t1", "c0")],
    )
    h, v = RepAddress("http://h", "h"), RepAddress("http://v", "v")
    reps = {"c0": h, "c1": h, "c2": v, "c3": v}

    works = group_work(result, batch, reps)

    assert [(w.cell_id, w.rep, len(w.lrps), len(w.tasks)) for w in works] == [
        ("c0", h, 20, 1), ("c1", h, 20, 0), ("c2", v, 10, 0),
    ]
    assert works[0].lrps[0] is batch.lrps[("web", 0)]


def test_rejections_are_carried_until_the_last_attempt_then_fail_with_the_reason():
    web = desired("web", 2)
    rejections = [
        Rejection(PendingLRP(web, 0, attempts=0), "c0", "insufficient resources: memory", False),
        Rejection(PendingLRP(web, 1, attempts=2), "c0", "insufficient resources: memory", False),
        Rejection(PendingTask(task("t1"), attempts=1), "c1", "work not delivered: ConnectError", True),
        Rejection(PendingTask(task("t2"), attempts=2), "c1", "work not delivered: ConnectError", True),
    ]
    carried, failures = split_rejections(rejections, max_attempts=3)

    assert {k: v.attempts for k, v in carried.lrps.items()} == {("web", 0): 1}
    assert {k: v.attempts for k, v in carried.tasks.items()} == {"t1": 2}
    assert failures == [
        Failure(
            "insufficient resources: memory",
            "cell c0: insufficient resources: memory (after 3 attempts)",
            process_guid="web",
            index=1,
        ),
        Failure(NO_CELLS, "cell c1: work not delivered: ConnectError (after 3 attempts)", task_guid="t2"),
    ]


def test_one_attempt_means_no_carry():
    carried, failures = split_rejections([Rejection(PendingTask(task("t1")), "c", "full", False)], 1)
    assert not carried and [f.error for f in failures] == ["full"]


def rep(reps: FakeReps, rep_id: str) -> RepAddress:
    return RepAddress(reps.rep_url(rep_id), rep_id)


async def test_dispatch_posts_once_per_rep_concurrently_and_maps_rejections_back():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("ok")
        reps.add("full", work_mode="reject", reason="insufficient resources: disk")
        reps.add("broken", work_mode="error")
        web = desired("web", 30)
        works = [
            CellWork(
                "ok", rep(reps, "ok"), [PendingLRP(web, i) for i in range(10)], [PendingTask(task("t1"))]
            ),
            CellWork("full", rep(reps, "full"), [PendingLRP(web, i) for i in range(10, 20)]),
            CellWork("broken", rep(reps, "broken"), [PendingLRP(web, i) for i in range(20, 30)]),
        ]
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)

        assert {r: len(posts) for r, posts in reps.work_posts.items()} == {"ok": 1, "full": 1, "broken": 1}
        assert metrics.requests_made["rep_work"] == 3
        assert (outcome.lrps_placed, outcome.tasks_placed) == (10, 1)
        by_cell = {}
        for r in outcome.rejections:
            by_cell.setdefault(r.cell_id, []).append(r)
        assert sorted(r.item.index for r in by_cell["full"]) == list(range(10, 20))
        assert {(r.reason, r.unreachable) for r in by_cell["full"]} == {
            ("insufficient resources: disk", False)
        }
        assert sorted(r.item.index for r in by_cell["broken"]) == list(range(20, 30))
        assert {(r.reason, r.unreachable) for r in by_cell["broken"]} == {("work answered 500", True)}


def test_the_body_is_the_wire_host_work_with_each_desired_lrp_once():
    web, api = desired("web", 4, env={"A": "1"}), desired("api", 2)
    u = RepAddress("u", "u")
    works = [
        CellWork(
            "c0", u, [PendingLRP(web, 0), PendingLRP(api, 1), PendingLRP(web, 2)], [PendingTask(task("t1"))]
        ),
        CellWork("c1", u, [PendingLRP(web, 1), PendingLRP(api, 0)]),
        CellWork("c2", u, [], [PendingTask(task("t2"))]),
    ]
    body = BodyWriter(fencing_token=9).body(works)
    parsed = HostWork.model_validate_json(body)

    assert body.count(b'"process_guid":"web"') == 1 and body.count(b'"process_guid":"api"') == 1
    assert parsed.fencing_token == 9 and list(parsed.cells) == ["c0", "c1", "c2"]
    # Each cell's part: its instances grouped by desired LRP (in the order each first appears), its tasks.
    expected = {"c0": [("web", 0), ("web", 2), ("api", 1)], "c1": [("web", 1), ("api", 0)], "c2": []}
    for work in works:
        assert [(d.process_guid, i) for d, i in parsed.instances(work.cell_id)] == expected[work.cell_id]
        assert [t.task_guid for t in parsed.cells[work.cell_id].tasks] == [
            t.task.task_guid for t in work.tasks
        ]
    assert parsed.desired[0].model_dump() == web.model_dump(), "each desired LRP in full"
    assert BodyWriter().body([]) == b'{"desired":[],"cells":{},"fencing_token":0}'
    assert HostWork.model_validate_json(BodyWriter().body(works[2:])).fencing_token == FENCING_TOKEN


async def test_cells_of_one_rep_process_get_their_work_in_one_post_and_rejections_map_back_to_each_cell():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("alone")
        reps.add("g-ok", rep="good")
        reps.add("g-full", rep="good", work_mode="reject", reason="insufficient resources: disk")
        reps.add("g-gone", rep="good")
        reps.reps["good"].left_out.add("g-gone")  # no longer hosted there: left out of the answer
        reps.add("b-0", rep="broken", work_mode="error")
        reps.add("b-1", rep="broken")
        good, broken = rep(reps, "good"), rep(reps, "broken")
        web, api = desired("web", 40), desired("api", 10)
        works = [
            CellWork("alone", rep(reps, "alone"), [PendingLRP(web, i) for i in range(0, 5)]),
            CellWork("g-ok", good, [PendingLRP(web, i) for i in range(5, 10)] + [PendingLRP(api, 0)],
                     [PendingTask(task("t1"))]),
            CellWork("b-0", broken, [PendingLRP(web, 16)]),
            CellWork("g-full", good, [PendingLRP(web, i) for i in range(10, 15)] + [PendingLRP(api, 1)]),
            CellWork("g-gone", good, [PendingLRP(web, 15)]),
            CellWork("b-1", broken, [PendingLRP(api, 2)], [PendingTask(task("t2"))]),
        ]
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)

        assert {r: len(posts) for r, posts in reps.work_posts.items()} == {"alone": 1, "good": 1, "broken": 1}
        assert list(reps.work_posts["good"][0].cells) == ["g-ok", "g-full", "g-gone"]
        assert sorted(d.process_guid for d in reps.work_posts["good"][0].desired) == ["api", "web"], (
            "each desired once"
        )
        assert metrics.requests_made["rep_work"] == 3
        assert (outcome.lrps_placed, outcome.tasks_placed) == (5 + 6, 1)
        by_cell: dict[str, set] = {}
        for r in outcome.rejections:
            by_cell.setdefault(r.cell_id, set()).add((getattr(r.item, "key", None), r.reason, r.unreachable))
        assert by_cell == {
            "g-full": {(("web", i), "insufficient resources: disk", False) for i in range(10, 15)}
            | {(("api", 1), "insufficient resources: disk", False)},
            "g-gone": {(("web", 15), "work not delivered: cell not on its rep", True)},
            "b-0": {(("web", 16), "work answered 500", True)},
            "b-1": {(("api", 2), "work answered 500", True), ("t2", "work answered 500", True)},
        }
        carried, failures = split_rejections(outcome.rejections, max_attempts=3)
        assert len(carried) == 10 and not failures, (
            "undelivered and rejected work is carried into the next batch"
        )


async def test_a_rep_that_does_not_answer_in_time_has_all_its_cells_work_rejected_as_unreachable():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("s0", rep="slow", work_mode="hang")
        reps.add("s1", rep="slow")
        slow = rep(reps, "slow")
        works = [
            CellWork("s0", slow, [PendingLRP(desired("web"), 0)]),
            CellWork("s1", slow, [PendingLRP(desired("w"), 0)]),
        ]
        outcome = await Dispatcher(client, Metrics(), timeout=0.3).send(works)
        assert sorted((r.cell_id, r.reason, r.unreachable) for r in outcome.rejections) == [
            ("s0", "work not delivered: TimeoutError", True),
            ("s1", "work not delivered: TimeoutError", True),
        ]
        assert outcome.lrps_placed == 0


async def test_a_reps_big_work_is_split_over_several_posts_of_whole_cells(monkeypatch):
    monkeypatch.setattr(dispatch, "HOST_WORK_MAX_ITEMS", 5)
    async with fake_reps() as reps, RepClients() as client:
        for cid in ("h0", "h1", "h2"):
            reps.add(cid, rep="h")
        h = rep(reps, "h")
        web = desired("web", 12)
        works = [CellWork("h0", h, [PendingLRP(web, i) for i in range(0, 3)]),
                 CellWork("h1", h, [PendingLRP(web, i) for i in range(3, 5)]),
                 CellWork("h2", h, [PendingLRP(web, i) for i in range(5, 12)])]  # more than the cap: alone
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)
        assert [list(post.cells) for post in reps.work_posts["h"]] == [["h0", "h1"], ["h2"]]
        assert metrics.requests_made["rep_work"] == 2 and outcome.lrps_placed == 12 and not outcome.rejections


async def test_work_a_rep_refuses_for_its_fencing_token_is_rejected_with_the_reason_not_lost():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("f0", rep="fenced", work_mode="fenced")
        reps.add("f1", rep="fenced")
        fenced = rep(reps, "fenced")
        works = [CellWork("f0", fenced, [PendingLRP(desired("web"), 0)]),
                 CellWork("f1", fenced, [], [PendingTask(task("t1"))])]
        outcome = await Dispatcher(client, Metrics(), timeout=5, fencing_token=lambda: 7).send(works)
        assert sorted((r.cell_id, r.reason, r.unreachable) for r in outcome.rejections) == [
            ("f0", "stale fencing token 7 < 99", False), ("f1", "stale fencing token 7 < 99", False)]
        assert (outcome.lrps_placed, outcome.tasks_placed) == (0, 0)
