import pytest

from auctioneer.engine.diagnosis import NO_CELLS
from auctioneer.engine.types import AuctionResult, Failure, LRPAssignment, TaskAssignment
from auctioneer.service.batcher import Batch, PendingLRP, PendingTask
from auctioneer.service.clients import RepClients
from auctioneer.service.dispatch import (
    FENCING_TOKEN,
    BodyWriter,
    CellWork,
    Dispatcher,
    Rejection,
    group_work,
    split_rejections,
)
from auctioneer.service.metrics import Metrics
from common.models import LRPWork, Work
from tests.auctioneer.fakes import desired, fake_reps, task

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
    urls = {"c0": "http://h/cells/c0", "c1": "http://h/cells/c1", "c2": "http://h/cells/c2", "c3": "x"}

    works = group_work(result, batch, urls)

    assert [(w.cell_id, w.rep_url, len(w.lrps), len(w.tasks)) for w in works] == [
        ("c0", "http://h/cells/c0", 20, 1), ("c1", "http://h/cells/c1", 20, 0), ("c2", "http://h/cells/c2", 10, 0),
    ]
    assert works[0].lrps[0] is batch.lrps[("web", 0)]


def test_work_body_is_the_wire_work():
    web = desired("web", 3, env={"A": "1"})
    api = desired("api", 2)
    work = CellWork("c0", "u", [PendingLRP(web, 0), PendingLRP(api, 1), PendingLRP(web, 2)],
                    [PendingTask(task("t1"))])
    body = BodyWriter().body(work)
    parsed = Work.model_validate_json(body)
    # Each desired LRP once, with its indices.
    assert [(g.desired.process_guid, g.indices) for g in parsed.lrp_groups] == [("web", [0, 2]), ("api", [1])]
    assert body.count(b'"process_guid":"web"') == 1
    expected = [LRPWork(desired=web, index=0), LRPWork(desired=web, index=2), LRPWork(desired=api, index=1)]
    assert [w.model_dump() for w in parsed.all_lrps()] == [w.model_dump() for w in expected]
    assert parsed.fencing_token == FENCING_TOKEN
    assert [t.task_guid for t in parsed.tasks] == ["t1"]


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
        Failure("insufficient resources: memory", "cell c0: insufficient resources: memory (after 3 attempts)",
                process_guid="web", index=1),
        Failure(NO_CELLS, "cell c1: work not delivered: ConnectError (after 3 attempts)", task_guid="t2"),
    ]


def test_one_attempt_means_no_carry():
    carried, failures = split_rejections([Rejection(PendingTask(task("t1")), "c", "full", False)], 1)
    assert not carried and [f.error for f in failures] == ["full"]


async def test_dispatch_posts_once_per_cell_concurrently_and_maps_rejections_back():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("ok")
        reps.add("full", work_mode="reject", reason="insufficient resources: disk")
        reps.add("broken", work_mode="error")
        web = desired("web", 30)
        works = [
            CellWork("ok", reps.rep_url("ok"), [PendingLRP(web, i) for i in range(10)], [PendingTask(task("t1"))]),
            CellWork("full", reps.rep_url("full"), [PendingLRP(web, i) for i in range(10, 20)]),
            CellWork("broken", reps.rep_url("broken"), [PendingLRP(web, i) for i in range(20, 30)]),
        ]
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)

        assert {cell: len(posts) for cell, posts in reps.work_posts.items()} == {"ok": 1, "full": 1, "broken": 1}
        assert metrics.requests_made["rep_work"] == 3
        assert (outcome.lrps_placed, outcome.tasks_placed) == (10, 1)
        by_cell = {}
        for r in outcome.rejections:
            by_cell.setdefault(r.cell_id, []).append(r)
        assert sorted(r.item.index for r in by_cell["full"]) == list(range(10, 20))
        assert {(r.reason, r.unreachable) for r in by_cell["full"]} == {("insufficient resources: disk", False)}
        assert sorted(r.item.index for r in by_cell["broken"]) == list(range(20, 30))
        assert {(r.reason, r.unreachable) for r in by_cell["broken"]} == {("work answered 500", True)}


async def test_a_rep_that_does_not_answer_in_time_has_all_its_work_rejected_as_unreachable():
    async with fake_reps() as reps, RepClients() as client:
        reps.add("slow", work_mode="hang")
        work = CellWork("slow", reps.rep_url("slow"), [PendingLRP(desired("web"), 0)])
        outcome = await Dispatcher(client, Metrics(), timeout=0.3).send([work])
        assert [(r.cell_id, r.unreachable) for r in outcome.rejections] == [("slow", True)]
        assert outcome.rejections[0].reason.startswith("work not delivered")
