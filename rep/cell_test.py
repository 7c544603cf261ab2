"""Reservation, rejection and bookkeeping of one cell (with a recording executor, no network)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from common.models import (
    CellDetail,
    CellOffers,
    CellState,
    DesiredLRP,
    InstanceRef,
    LifecycleResult,
    ModificationTag,
    PortMapping,
    Task,
    TaskCompletion,
    WorkResult,
)
from tests.support.recording_executor import RecordingExecutor
from tests.support.rep_host import answer_outbox

from .cell import CellConfig, RepCell
from .executor import LRPContainer
from .reports import HostPort, Port, Reports

NOW = datetime(2024, 1, 1, tzinfo=UTC)


async def never_sent(batch: Reports) -> LifecycleResult:
    raise AssertionError("these tests read the outbox, they do not flush it")


def desired(
    guid: str = "app", memory_mb: int = 256, disk_mb: int = 1024, stack: str = "cflinuxfs4"
) -> DesiredLRP:
    return DesiredLRP(
        process_guid=guid,
        memory_mb=memory_mb,
        disk_mb=disk_mb,
        stack=stack,
        created_at=NOW,
        modification_tag=ModificationTag(epoch="e"),
    )


def task(guid: str = "t1", memory_mb: int = 128, disk_mb: int = 1024) -> Task:
    return Task(
        task_guid=guid, command=["true"], memory_mb=memory_mb, disk_mb=disk_mb, created_at=NOW, updated_at=NOW
    )


def make_cell(
    memory_mb: int = 1024, disk_mb: int = 8192, containers: int = 10, report_host_metrics: bool = False
) -> tuple[RepCell, RecordingExecutor]:
    executor = RecordingExecutor()
    guids = (f"g{i}" for i in itertools.count())
    config = CellConfig(
        cell_id="cell-a",
        zone="z1",
        rep_url="http://rep",
        host="10.0.0.5",
        memory_mb=memory_mb,
        disk_mb=disk_mb,
        containers=containers,
        stacks=("cflinuxfs4",),
        placement_tags=("gpu",),
        report_host_metrics=report_host_metrics,
    )
    return RepCell(config, executor, never_sent, new_guid=lambda: next(guids)), executor


def take(
    cell: RepCell,
    lrps: Sequence[tuple[DesiredLRP, int]] = (),
    tasks: Sequence[Task] = (),
    fencing_token: int = 0,
) -> WorkResult:
    """A cell's part of a HostWork, as the rep hands it over."""
    return cell.take(list(lrps), list(tasks), fencing_token)


def pending(cell: RepCell) -> Reports:
    return cell.outbox._pending


async def test_reserves_what_fits_and_rejects_the_rest_at_once() -> None:
    cell, executor = make_cell(memory_mb=1000)
    result = take(cell, [(desired(memory_mb=400), i) for i in range(3)])

    assert [w.index for w in result.rejected_lrps] == [2]
    assert result.reason == "insufficient resources: memory"
    assert executor.started == [], "nothing starts before the BBS accepted its claim"
    detail = cell.detail()
    assert detail.bid.available.memory_mb == 200
    assert detail.bid.available.containers == 8
    assert detail.bid.starting_containers == 2
    assert [(i.index, i.state) for i in detail.lrps] == [(0, "reserved"), (1, "reserved")]
    assert [r.index for r in pending(cell).claimed] == [0, 1], "each accepted instance is claimed"
    assert pending(cell).running == [], "no running report promised by an executor that cannot"
    assert cell.outbox._hurry.is_set(), "the starts wait on the claims: sent without lingering"
    answer_outbox(cell)
    assert [c.index for c in executor.started] == [0, 1]
    assert [(i.index, i.state) for i in cell.detail().lrps] == [(0, "starting"), (1, "starting")]
    assert cell.detail().bid.starting_containers == 2


async def test_the_last_start_in_flight_reports_running_without_lingering() -> None:
    """Its running report has no company to wait for: a lone start slower than the linger (a container, any
    real app) would be reported that much later."""
    cell, executor = make_cell(memory_mb=1000)
    take(cell, [(desired(memory_mb=100), i) for i in range(2)])
    answer_outbox(cell)
    cell.outbox._hurry.clear()
    first, second = executor.started
    cell.lrp_running(first.instance_guid, [])
    assert not cell.outbox._hurry.is_set(), "another start is in flight: the report may wait for its company"
    cell.lrp_running(second.instance_guid, [])
    assert cell.outbox._hurry.is_set(), "the last start in flight: its report goes at once"
    assert [r.index for r in pending(cell).running] == [0, 1]


@pytest.mark.parametrize("host_metrics", [False, True], ids=["no offers", "host offers"])
async def test_the_bid_and_the_detail_are_what_validating_them_would_give_with_every_field_given(
    host_metrics: bool,
) -> None:
    cell, executor = make_cell(memory_mb=4000, report_host_metrics=host_metrics)
    take(cell, [(desired("web", memory_mb=100), i) for i in range(3)], fencing_token=3)
    answer_outbox(cell)
    take(cell, tasks=[task("t1")], fencing_token=4)
    cell.lrp_running(executor.started[0].instance_guid, [])

    detail = cell.detail()
    assert (detail.bid.offers is not None) is host_metrics
    built: list[tuple[BaseModel, type[BaseModel]]] = [(detail, CellDetail), (detail.bid, CellState),
                                                      (cell.state(), CellState)]
    if detail.bid.offers is not None:
        built.append((detail.bid.offers, CellOffers))
    for model, kind in built:
        assert model.model_fields_set == set(kind.model_fields), f"{kind.__name__}: a field left to default"
        dumped = model.model_dump_json()
        assert kind.model_validate_json(dumped) == kind.model_validate(model.model_dump())
        assert kind.model_validate_json(dumped).model_dump_json() == dumped
    assert detail.accepted_fencing_tokens == [3, 4] and detail.fencing_token == 4


async def test_the_bid_counts_instances_per_process() -> None:
    cell, executor = make_cell(memory_mb=4000)
    take(cell, [(desired("web", memory_mb=100), i) for i in range(3)] + [(desired("api", memory_mb=100), 0)])
    answer_outbox(cell)
    held = {i.index: i.instance_guid for i in cell.detail().lrps if i.process_guid == "web"}
    gate = asyncio.Event()
    executor.stop_lrp = lambda guid: gate.wait()  # type: ignore[method-assign]  # the stop takes a while
    stopping = asyncio.create_task(cell.stop_lrp(held[2]))
    await asyncio.sleep(0)  # the stop has begun: the instance is "stopping" and still holds its resources

    bid, detail = cell.state(), cell.detail()
    gate.set()
    await asyncio.wait_for(stopping, 5)

    assert "lrps" not in bid.model_dump(), "a bid lists no instances"
    assert bid.lrp_counts == {"web": 2, "api": 1}
    assert bid.stopping_counts == {"web": 1}
    assert detail.bid == bid and len(detail.lrps) == 4


async def test_the_bid_follows_every_change_as_the_instance_list_does() -> None:
    """The counts are kept as instances come and go (not recounted per bid): after each change they
    equal what the detail's instance list says."""
    cell, executor = make_cell(memory_mb=4000)

    def agree(step: str) -> None:
        bid, held = cell.state(), cell.detail().lrps
        running, stopping = Counter(), Counter()
        for i in held:
            (stopping if i.state == "stopping" else running)[i.process_guid] += 1
        assert (bid.lrp_counts, bid.stopping_counts) == (dict(running), dict(stopping)), step
        assert bid.starting_containers == sum(1 for i in held if i.state in ("reserved", "starting")), step
        by_state = {state: n for state, n in cell.instance_states().items() if n}
        assert by_state == dict(Counter(i.state for i in held)), step

    web, api = desired("web", memory_mb=100), desired("api", memory_mb=100)
    take(cell, [(web, 0), (web, 1), (web, 2), (web, 3), (api, 0), (api, 1)])
    agree("accepted")
    answer_outbox(cell)
    agree("claims accepted")
    take(cell, [(api, 2)])
    agree("one more reserved")
    guid = {(c.process_guid, c.index): c.instance_guid for c in executor.started}
    cell.lrp_running(guid["web", 0], [])
    cell.lrp_running(guid["web", 0], [])  # a repeated report changes nothing
    cell.lrp_running(guid["api", 0], [])
    agree("two running")
    gate = asyncio.Event()
    executor.stop_lrp = lambda g: gate.wait()  # type: ignore[method-assign]
    stops = [asyncio.create_task(cell.stop_lrp(guid[k])) for k in (("web", 0), ("web", 1))]
    await asyncio.sleep(0)
    cell.lrp_running(guid["web", 1], [])  # a start that completes while stopping stays stopping
    cell.lrp_crashed(guid["web", 0], "boom")  # ignored: a stop in progress reports `removed` itself
    agree("two stopping")
    cell.lrp_crashed(guid["api", 0], "boom")
    cell.apply_lifecycle_result(Reports(), LifecycleResult(refused=[InstanceRef(
        process_guid="web", index=2, instance_guid=guid["web", 2])]))
    agree("a crash and a refusal")
    answer_outbox(cell, refused=("g6",))
    agree("a refused claim")
    gate.set()
    await asyncio.wait_for(asyncio.gather(*stops), 5)
    await cell.wait_background(1.0)
    agree("stopped")
    assert cell.state().lrp_counts == {"web": 1, "api": 1}
    await cell.stop_everything("done")
    agree("empty")
    assert cell.state().lrp_counts == {} and cell.state().starting_containers == 0


async def test_rejects_a_duplicate_of_an_instance_it_holds() -> None:
    cell, executor = make_cell()
    take(cell, [(desired(), 0)])

    result = take(cell, [(desired(), 0), (desired(), 1)])
    assert [w.index for w in result.rejected_lrps] == [0], "reserved"
    answer_outbox(cell)
    assert [w.index for w in take(cell, [(desired(), 1)]).rejected_lrps] == [1], "starting"

    assert "already" in result.reason
    assert len(executor.started) == 2


async def test_rejects_everything_while_evacuating() -> None:
    cell, executor = make_cell()
    cell.evacuating = True

    result = take(cell, [(desired(), 0)], tasks=[task()])

    assert len(result.rejected_lrps) == 1 and len(result.rejected_tasks) == 1
    assert result.reason == "cell is evacuating"
    assert executor.started == [] and executor.tasks == []
    assert cell.state().evacuating and cell.presence().evacuating


async def test_rejects_work_with_a_stale_fencing_token() -> None:
    cell, _ = make_cell()
    assert take(cell, fencing_token=5).rejected_lrps == []

    result = take(cell, [(desired(), 0)], fencing_token=4)

    assert len(result.rejected_lrps) == 1
    assert "stale fencing token 4 < 5" in result.reason
    assert cell.detail().fencing_token == 5


async def test_rejects_an_unsupported_stack_and_counts_disk_and_containers() -> None:
    cell, _ = make_cell(disk_mb=2048, containers=2)
    result = take(
        cell,
        [(desired(stack="windows"), 0), (desired(disk_mb=2000), 1), (desired(disk_mb=100), 2)],
        tasks=[task(memory_mb=1, disk_mb=10)],
    )
    assert [w.index for w in result.rejected_lrps] == [0, 2]
    assert [t.task_guid for t in result.rejected_tasks] == []
    assert "stack windows not supported" in result.reason
    assert "insufficient resources: disk" in result.reason

    full = take(cell, tasks=[task("t2")])
    assert full.reason == "insufficient resources: containers, disk"


async def test_running_report_uses_the_advertised_host() -> None:
    cell, _ = make_cell()
    take(cell, [(desired(), 3)])
    answer_outbox(cell)

    cell.lrp_running("g0", [PortMapping(container_port=8080, host_port=61001)])

    (report,) = pending(cell).running
    assert (report.index, report.instance_guid, report.host) == (3, "g0", "10.0.0.5")
    assert report.ports[0].host_port == 61001
    assert cell.detail().lrps[0].state == "running"
    assert cell.state().starting_containers == 0


async def test_a_crash_frees_the_resources_and_is_reported() -> None:
    cell, _ = make_cell(memory_mb=256)
    take(cell, [(desired(), 0)])
    answer_outbox(cell)

    cell.lrp_crashed("g0", "exited with status 3")

    assert pending(cell).crashed[0].reason == "exited with status 3"
    assert cell.state().available.memory_mb == 256
    assert cell.holds_nothing
    # The same index can come back (a restart gets a new instance guid).
    assert take(cell, [(desired(), 0)]).rejected_lrps == []


async def test_stop_reports_removed_once_the_executor_stopped_it() -> None:
    cell, executor = make_cell()
    take(cell, [(desired(), 0)])
    answer_outbox(cell)

    assert await cell.stop_lrp("g0") is True
    assert await cell.stop_lrp("g0") is False, "a second stop finds nothing"

    assert executor.stopped == ["g0"]
    assert [r.instance_guid for r in pending(cell).removed] == ["g0"]
    assert cell.holds_nothing and await cell.wait_empty(0.1)


async def test_a_crash_during_a_stop_is_not_reported_as_a_crash() -> None:
    cell, _ = make_cell()
    take(cell, [(desired(), 0)])
    cell._instances["g0"].state = "stopping"

    cell.lrp_crashed("g0", "killed by signal 15")

    assert pending(cell).crashed == []


async def test_refused_instances_are_stopped_and_forgotten_silently() -> None:
    cell, executor = make_cell()
    take(cell, [(desired(), i) for i in range(2)])
    answer_outbox(cell)  # both claims accepted: both start
    take(cell, tasks=[task()])
    cell.lrp_running("g0", [])
    cell.lrp_running("g1", [])

    cell.apply_lifecycle_result(
        Reports(),
        LifecycleResult(
            refused=[InstanceRef(process_guid="app", index=1, instance_guid="g1")], refused_tasks=["t1"]
        ),
    )
    await cell.wait_background(1.0)

    # The task's claim refused before it ran: never run, so nothing to cancel.
    assert executor.stopped == ["g1"] and executor.cancelled == [] and executor.tasks == []
    assert [i.instance_guid for i in cell.detail().lrps] == ["g0"]
    assert cell.state().tasks == []
    p = pending(cell)
    assert [r.instance_guid for r in p.running] == ["g0"], "pending reports of the refused one are dropped"
    assert p.claimed == [] and p.removed == [] and p.tasks_started == []


async def test_an_instance_starts_only_once_the_bbs_accepted_its_claim() -> None:
    """As tasks do: a claim the BBS refuses (the work was not this cell's to take) starts nothing, and the
    accepted ones start on their batch's answer, without a request of their own."""
    cell, executor = make_cell()
    take(cell, [(desired(), i) for i in range(3)])
    assert executor.started == [], "nothing starts before the BBS accepted the claims"
    sent = cell.outbox._pending  # what the flusher takes and delivers
    cell.outbox._pending = Reports()
    take(cell, [(desired(), 3)])  # claimed while that request was in flight
    cell.apply_lifecycle_result(sent, LifecycleResult(refused=[InstanceRef(process_guid="app", index=1,
                                                                           instance_guid="g1")]))
    await cell.wait_background(1.0)
    assert [c.instance_guid for c in executor.started] == ["g0", "g2"], "g3's claim is not answered yet"
    assert executor.stopped == [], "a refused claim started nothing, so nothing is stopped"
    assert [(i.instance_guid, i.state) for i in cell.detail().lrps] == [
        ("g0", "starting"), ("g2", "starting"), ("g3", "reserved")]
    assert cell.instance_states() == {"reserved": 1, "starting": 2, "running": 0, "stopping": 0}
    cell.apply_lifecycle_result(sent, LifecycleResult())  # an answer repeated changes nothing
    answer_outbox(cell)
    assert [c.instance_guid for c in executor.started] == ["g0", "g2", "g3"], "each started once"


async def test_a_reserved_instance_stopped_before_its_claim_is_answered_never_starts() -> None:
    cell, executor = make_cell()
    take(cell, [(desired(), 0)])
    sent = cell.outbox._pending
    cell.outbox._pending = Reports()

    assert await cell.stop_lrp("g0") is True
    cell.apply_lifecycle_result(sent, LifecycleResult())  # the claim accepted after all

    assert executor.started == [] and executor.stopped == [], "never handed to the executor"
    assert [r.instance_guid for r in pending(cell).removed] == ["g0"], "the BBS hears it let go"
    assert cell.holds_nothing and cell.state().starting_containers == 0


class PromisingExecutor(RecordingExecutor):
    """An executor that can say before a start that the instance will run at once (as the simulator's)."""

    def promise_running(self, container: LRPContainer) -> Sequence[HostPort] | None:
        return [Port(8080, 40000 + container.index)]


async def test_a_promised_running_report_travels_with_the_claim_and_is_not_sent_again() -> None:
    executor = PromisingExecutor()
    cell = RepCell(make_cell()[0].config, executor, never_sent, new_guid=iter(["g0", "g1"]).__next__)
    take(cell, [(desired(), 0), (desired(), 1)])
    p = pending(cell)
    assert [r.instance_guid for r in p.claimed] == [r.instance_guid for r in p.running] == ["g0", "g1"], (
        "each claim with its promised running report, in one batch")
    assert p.running[0].ports == [Port(8080, 40000)] and p.running[0].host == "10.0.0.5"
    assert executor.started == [], "a promise starts nothing"
    assert not cell.outbox._hurry.is_set(), "the claims may linger for company: their reports are in"

    answer_outbox(cell, refused=("g1",))
    assert [c.instance_guid for c in executor.started] == ["g0"], "the refused claim's instance never starts"
    assert executor.stopped == [] and pending(cell).running == []
    cell.lrp_running("g0", [Port(8080, 40000)])
    assert pending(cell).running == [], "the promised report went with the claim"
    assert [(i.instance_guid, i.state) for i in cell.detail().lrps] == [("g0", "running")]
    assert cell.reassert_running() == 1, "and is asserted again like any other"


async def test_tasks_reserve_start_complete_and_cancel() -> None:
    cell, executor = make_cell(memory_mb=300)
    result = take(cell, tasks=[task("t1", 200), task("t2", 200)])
    assert [t.task_guid for t in result.rejected_tasks] == ["t2"]
    assert pending(cell).tasks_started == ["t1"]
    assert [t.task_guid for t in cell.state().tasks] == ["t1"]

    cell.task_finished(TaskCompletion(task_guid="t1", exit_status=0, result="ok"))
    assert pending(cell).tasks_completed[0].result == "ok"
    assert cell.available().memory_mb == 300

    take(cell, tasks=[task("t3")])
    assert await cell.cancel_task("t3") is True
    done = pending(cell).tasks_completed[-1]
    assert (done.task_guid, done.failed, done.failure_reason) == ("t3", True, "cancelled")
    assert executor.cancelled == ["t3"]


async def test_a_task_runs_only_once_the_bbs_accepted_its_claim() -> None:
    cell, executor = make_cell()
    take(cell, tasks=[task("t1"), task("t2")])
    assert executor.tasks == [], "nothing runs before the BBS accepted the claims"
    sent = cell.outbox._pending  # what the flusher takes and delivers
    cell.outbox._pending = type(sent)()
    take(cell, tasks=[task("t3")])  # claimed while that request was in flight
    # The BBS's answer: t2 is another's
    cell.apply_lifecycle_result(sent, LifecycleResult(refused_tasks=["t2"]))
    assert [c.task.task_guid for c in executor.tasks] == ["t1"]
    assert [t.task_guid for t in cell.state().tasks] == ["t1", "t3"]
    answer_outbox(cell)  # t3's claim delivered too, accepted
    assert [c.task.task_guid for c in executor.tasks] == ["t1", "t3"], "each run once"


async def test_stop_everything_stops_instances_and_fails_tasks() -> None:
    cell, _ = make_cell()
    take(cell, [(desired(), i) for i in range(3)], tasks=[task()])

    await cell.stop_everything("cell evacuated before completion")

    assert cell.holds_nothing
    assert sorted(r.index for r in pending(cell).removed) == [0, 1, 2]
    assert pending(cell).tasks_completed[0].failure_reason == "cell evacuated before completion"


async def test_presence_describes_the_cell() -> None:
    cell, _ = make_cell()
    presence = cell.presence()
    assert (presence.cell_id, presence.zone, presence.rep_url) == ("cell-a", "z1", "http://rep")
    assert presence.total.memory_mb == 1024 and presence.placement_tags == ["gpu"]


async def test_work_waits_until_the_bbs_has_seen_this_boot():
    cell, _ = make_cell()
    cell.awaiting_registration = True
    result = take(cell, [(desired(), 0)])
    assert [w.index for w in result.rejected_lrps] == [0]
    assert result.reason == "cell not yet registered with the BBS"
    cell.awaiting_registration = False
    assert take(cell, [(desired(), 0)]).rejected_lrps == []
    assert cell.presence().boot_id == cell.boot_id != ""


async def test_a_second_instance_of_an_index_starts_only_for_another_version_or_once_one_stops() -> None:
    cell, executor = make_cell(memory_mb=4000)
    take(cell, [(desired("web", memory_mb=100), 0)])
    again = take(cell, [(desired("web", memory_mb=100), 0)])
    assert again.reason == "instance already on this cell" and len(cell.detail().lrps) == 1
    newer = desired("web", memory_mb=100).model_copy(update={"version": 2})
    assert take(cell, [(newer, 0)]).rejected_lrps == [], "a rollout's replacement, make-before-break"
    assert [(r.index, r.version) for r in answer_outbox(cell).claimed] == [(0, 1), (0, 2)], "claims name it"
    assert [c.desired.version for c in executor.started] == [1, 2]

    restarted, executor2 = make_cell(memory_mb=4000)
    take(restarted, [(desired("web", memory_mb=100), 0)])
    answer_outbox(restarted)
    [held] = [i.instance_guid for i in restarted.detail().lrps]
    gate = asyncio.Event()
    executor2.stop_lrp = lambda guid: gate.wait()  # type: ignore[method-assign]  # the stop takes a while
    stopping = asyncio.create_task(restarted.stop_lrp(held))
    await asyncio.sleep(0)
    assert take(restarted, [(desired("web", memory_mb=100), 0)]).rejected_lrps == [], (
        "the index's next instance (a restart) while the old one is being stopped")
    gate.set()
    await asyncio.wait_for(stopping, 5)


async def test_a_running_instance_of_an_index_lets_its_restarted_successor_start_beside_it() -> None:
    # A rolling restart auctions the index anew (same version) while the old instance runs and serves;
    # on few cells the auction picks the old one's cell, which must take it. A start for it while the
    # held one is still starting is a retried delivery of the same work, and is refused.
    cell, executor = make_cell(memory_mb=4000)
    take(cell, [(desired("web", memory_mb=100), 0)])
    assert take(cell, [(desired("web", memory_mb=100), 0)]).reason == "instance already on this cell"
    answer_outbox(cell)
    old = executor.started[0].instance_guid
    cell.lrp_running(old, [])
    assert take(cell, [(desired("web", memory_mb=100), 0)]).rejected_lrps == []
    answer_outbox(cell)
    [_, new] = [c.instance_guid for c in executor.started]
    assert {i.instance_guid for i in cell.detail().lrps} == {old, new}
    assert take(cell, [(desired("web", memory_mb=100), 0)]).reason == "instance already on this cell", (
        "the successor, still starting, refuses a third")
    await cell.stop_lrp(old)
    assert [i.instance_guid for i in cell.detail().lrps] == [new]
    assert take(cell, [(desired("web", memory_mb=100), 0)]).reason == "instance already on this cell", (
        "the old one's stop leaves the successor's index entry")
