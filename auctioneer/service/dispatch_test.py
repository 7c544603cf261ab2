import pytest

from auctioneer.engine.diagnosis import NO_CELLS
from auctioneer.engine.types import AuctionResult, Failure, LRPAssignment, TaskAssignment
from auctioneer.service import dispatch
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
from common.models import HostWork, LRPWork, Work
from tests.auctioneer.fake_hosts import fake_host
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


def test_host_body_is_the_wire_host_work_with_each_desired_lrp_once():
    web, api = desired("web", 4, env={"A": "1"}), desired("api", 2)
    works = [
        CellWork("c0", "u0", [PendingLRP(web, 0), PendingLRP(api, 1), PendingLRP(web, 2)], [PendingTask(task("t1"))]),
        CellWork("c1", "u1", [PendingLRP(web, 1), PendingLRP(api, 0)]),
        CellWork("c2", "u2", [], [PendingTask(task("t2"))]),
    ]
    writer = BodyWriter(fencing_token=9)
    body = writer.host_body(works)
    parsed = HostWork.model_validate_json(body)

    assert body.count(b'"process_guid":"web"') == 1 and body.count(b'"process_guid":"api"') == 1
    assert parsed.fencing_token == 9 and list(parsed.cells) == ["c0", "c1", "c2"]
    for work in works:  # each cell's part lists what its own Work body would
        own = Work.model_validate_json(writer.body(work))
        assert [(d.model_dump(), i) for d, i in parsed.instances(work.cell_id)] == [
            (lrp.desired.model_dump(), lrp.index) for lrp in own.all_lrps()]
        assert [t.task_guid for t in parsed.cells[work.cell_id].tasks] == [t.task_guid for t in own.tasks]
        assert own.fencing_token == 9


async def test_cells_of_one_rep_process_get_their_work_in_one_post_and_rejections_map_back_to_each_cell():
    async with fake_reps() as reps, fake_host() as good, fake_host() as broken, RepClients() as client:
        reps.add("alone")
        good.add("g-ok")
        good.add("g-full", work_mode="reject", reason="insufficient resources: disk")
        good.add("g-gone")
        good.left_out.add("g-gone")  # no longer hosted there: left out of the answer
        broken.add("b-0")
        broken.add("b-1")
        broken.work_mode = "error"
        client.host_of = {cid: good.url for cid in good.cells} | {cid: broken.url for cid in broken.cells}
        web, api = desired("web", 40), desired("api", 10)
        works = [
            CellWork("alone", reps.rep_url("alone"), [PendingLRP(web, i) for i in range(0, 5)]),
            CellWork("g-ok", "unused", [PendingLRP(web, i) for i in range(5, 10)] + [PendingLRP(api, 0)],
                     [PendingTask(task("t1"))]),
            CellWork("g-full", "unused", [PendingLRP(web, i) for i in range(10, 15)] + [PendingLRP(api, 1)]),
            CellWork("g-gone", "unused", [PendingLRP(web, 15)]),
            CellWork("b-0", "unused", [PendingLRP(web, 16)]),
            CellWork("b-1", "unused", [PendingLRP(api, 2)], [PendingTask(task("t2"))]),
        ]
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)

        assert len(good.work_posts) == 1 and len(broken.work_posts) == 1
        assert list(good.work_posts[0].cells) == ["g-ok", "g-full", "g-gone"]
        assert sorted(d.process_guid for d in good.work_posts[0].desired) == ["api", "web"], "each desired once"
        assert {cell: len(posts) for cell, posts in reps.work_posts.items()} == {"alone": 1}
        assert metrics.requests_made["rep_work"] == 3
        assert (outcome.lrps_placed, outcome.tasks_placed) == (5 + 6, 1)
        by_cell: dict[str, set] = {}
        for r in outcome.rejections:
            by_cell.setdefault(r.cell_id, set()).add((getattr(r.item, "key", None), r.reason, r.unreachable))
        assert by_cell == {
            "g-full": {(("web", i), "insufficient resources: disk", False) for i in range(10, 15)}
            | {(("api", 1), "insufficient resources: disk", False)},
            "g-gone": {(("web", 15), "work not delivered: cell not on its host", True)},
            "b-0": {(("web", 16), "work answered 500", True)},
            "b-1": {(("api", 2), "work answered 500", True), ("t2", "work answered 500", True)},
        }
        carried, failures = split_rejections(outcome.rejections, max_attempts=3)
        assert len(carried) == 10 and not failures, "undelivered and rejected work is carried into the next batch"


async def test_a_host_that_does_not_answer_in_time_has_all_its_cells_work_rejected_as_unreachable():
    async with fake_host() as slow, RepClients() as client:
        slow.add("s0")
        slow.add("s1")
        slow.work_mode = "hang"
        client.host_of = {"s0": slow.url, "s1": slow.url}
        works = [CellWork("s0", "x", [PendingLRP(desired("web"), 0)]), CellWork("s1", "x", [PendingLRP(desired("w"), 0)])]
        outcome = await Dispatcher(client, Metrics(), timeout=0.3).send(works)
        assert sorted((r.cell_id, r.reason, r.unreachable) for r in outcome.rejections) == [
            ("s0", "work not delivered: TimeoutError", True), ("s1", "work not delivered: TimeoutError", True)]
        assert outcome.lrps_placed == 0


async def test_a_hosts_big_work_is_split_over_several_posts_of_whole_cells(monkeypatch):
    monkeypatch.setattr(dispatch, "HOST_WORK_MAX_ITEMS", 5)
    async with fake_host() as host, RepClients() as client:
        for cid in ("h0", "h1", "h2"):
            host.add(cid)
        client.host_of = dict.fromkeys(host.cells, host.url)
        web = desired("web", 12)
        works = [CellWork("h0", "x", [PendingLRP(web, i) for i in range(0, 3)]),
                 CellWork("h1", "x", [PendingLRP(web, i) for i in range(3, 5)]),
                 CellWork("h2", "x", [PendingLRP(web, i) for i in range(5, 12)])]  # more than the cap: alone
        metrics = Metrics()
        outcome = await Dispatcher(client, metrics, timeout=5).send(works)
        assert [list(post.cells) for post in host.work_posts] == [["h0", "h1"], ["h2"]]
        assert metrics.requests_made["rep_work"] == 2 and outcome.lrps_placed == 12 and not outcome.rejections
