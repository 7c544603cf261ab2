"""The rep's reports against the actual LRP state machine: pure decisions."""

from __future__ import annotations

import dataclasses

from bbs.actual_set import ActualSet
from bbs.lifecycle import Stop, apply_lrp_reports, apply_task_reports
from bbs.lifecycle_wire import CELL_REPORT, CellReport
from bbs.records import CLAIMED, CRASHED, EVACUATING, RUNNING, SUSPECT, UNCLAIMED, TaskRecord, unclaimed
from bbs.restart_policy import RestartPolicy
from common.models import TaskCompletion

POLICY = RestartPolicy()


def report(**parts: list[dict]) -> CellReport:
    return CELL_REPORT.validate_python(parts)


def ref(index: int = 0, guid: str = "i1", pg: str = "web") -> dict:
    return {"process_guid": pg, "index": index, "instance_guid": guid}


def running_set(now: float = 100.0, crash_count: int = 0, since: float = 100.0) -> ActualSet:
    actuals = ActualSet([unclaimed("web", 0, "d", 0.0)])
    apply_lrp_reports(
        actuals,
        report(claimed=[ref()], running=[{**ref(), "ports": [{"container_port": 8080, "host_port": 61000}]}]),
        "c1",
        "z1",
        since,
        POLICY,
    )
    row = actuals.get("web", 0)
    actuals.put(dataclasses.replace(row, crash_count=crash_count))
    return ActualSet(list(actuals))


def test_claim_then_running_sets_cell_zone_and_address() -> None:
    actuals = ActualSet([unclaimed("web", 0, "d", 0.0)])
    out = apply_lrp_reports(
        actuals,
        report(
            claimed=[ref()],
            running=[{**ref(), "host": "10.0.0.5", "ports": [{"container_port": 8080, "host_port": 61001}]}],
        ),
        "c1",
        "z1",
        5.0,
        POLICY,
    )
    row = actuals.get("web", 0)
    assert out.refused == []
    assert (row.state, row.cell_id, row.zone, row.instance_guid, row.address) == (
        RUNNING,
        "c1",
        "z1",
        "i1",
        "10.0.0.5:61001",
    )
    assert row.mod_index == 1  # claimed and running in one report: one transition, one new tag
    assert [r.state for r in actuals.diff().updates] == [RUNNING]


def test_claim_and_running_together_end_as_claim_then_running_apart() -> None:
    running = {**ref(), "host": "10.0.0.5", "ports": [{"container_port": 8080, "host_port": 61001}]}
    together = ActualSet([unclaimed("web", 0, "d", 0.0)])
    apply_lrp_reports(together, report(claimed=[ref()], running=[running]), "c1", "z1", 5.0, POLICY)
    apart = ActualSet([unclaimed("web", 0, "d", 0.0)])
    apply_lrp_reports(apart, report(claimed=[ref()]), "c1", "z1", 5.0, POLICY)
    assert apart.get("web", 0).state == CLAIMED
    apply_lrp_reports(apart, report(running=[running]), "c1", "z1", 5.0, POLICY)
    one, two = together.get("web", 0), apart.get("web", 0)
    assert (one.mod_index, two.mod_index) == (1, 2)
    assert dataclasses.replace(one, mod_index=2, mod_epoch=two.mod_epoch) == two


def test_running_of_another_instance_does_not_ride_on_a_claim() -> None:
    actuals = ActualSet([unclaimed("web", 0, "d", 0.0)])
    out = apply_lrp_reports(
        actuals, report(claimed=[ref(guid="i1")], running=[ref(guid="i2")]), "c1", "z1", 5.0, POLICY
    )
    row = actuals.get("web", 0)
    assert (row.state, row.instance_guid) == (CLAIMED, "i1")
    assert out.refused == [ref(guid="i2")]


def test_claim_of_an_index_held_by_another_instance_is_refused() -> None:
    actuals = running_set()
    out = apply_lrp_reports(actuals, report(claimed=[ref(guid="i2")]), "c2", "z1", 6.0, POLICY)
    assert [r["instance_guid"] for r in out.refused] == ["i2"]
    assert not actuals.diff()


def test_claim_of_an_undesired_index_is_refused() -> None:
    out = apply_lrp_reports(ActualSet(), report(claimed=[ref(index=7)]), "c1", "z1", 1.0, POLICY)
    assert [(r["index"], r["instance_guid"]) for r in out.refused] == [(7, "i1")]


def test_running_for_an_unknown_instance_is_refused() -> None:
    actuals = running_set()
    out = apply_lrp_reports(actuals, report(running=[ref(guid="ghost")]), "c1", "z1", 6.0, POLICY)
    assert [r["instance_guid"] for r in out.refused] == ["ghost"]
    out = apply_lrp_reports(actuals, report(running=[ref()]), "other-cell", "z1", 6.0, POLICY)
    assert len(out.refused) == 1


def test_first_two_crashes_restart_at_once_the_third_waits() -> None:
    actuals = running_set(crash_count=1)
    out = apply_lrp_reports(
        actuals, report(crashed=[{**ref(), "reason": "exited with status 137"}]), "c1", "z1", 110.0, POLICY
    )
    row = actuals.get("web", 0)
    assert (row.state, row.crash_count, row.crash_reason, row.cell_id) == (
        UNCLAIMED,
        2,
        "exited with status 137",
        "",
    )
    assert out.starts == {"web": {0}} and out.crashed == 1

    actuals = running_set(crash_count=2)
    out = apply_lrp_reports(actuals, report(crashed=[{**ref(), "reason": "boom"}]), "c1", "z1", 110.0, POLICY)
    row = actuals.get("web", 0)
    assert (row.state, row.crash_count, row.since) == (CRASHED, 3, 110.0)
    assert out.starts == {}


def test_crash_after_five_minutes_running_resets_the_count() -> None:
    actuals = running_set(crash_count=50, since=100.0)
    out = apply_lrp_reports(actuals, report(crashed=[ref()]), "c1", "z1", 400.0, POLICY)
    assert actuals.get("web", 0).crash_count == 1 and out.starts == {"web": {0}}


def test_replacement_running_removes_the_evacuating_instance_and_stops_it() -> None:
    actuals = running_set()
    old = actuals.get("web", 0)
    actuals.replace(old, dataclasses.replace(old, presence=EVACUATING))
    actuals.put(unclaimed("web", 0, "d", 1.0))
    actuals = ActualSet(list(actuals))
    out = apply_lrp_reports(
        actuals, report(claimed=[ref(guid="i2")], running=[ref(guid="i2")]), "c2", "z1", 9.0, POLICY
    )
    assert actuals.other("web", 0) is None
    assert out.stops == [Stop("c1", "web", 0, "i1")]
    assert actuals.get("web", 0).cell_id == "c2"
    # A late report from the old cell about it is refused: its rep stops the instance.
    out = apply_lrp_reports(actuals, report(running=[ref()]), "c1", "z1", 9.0, POLICY)
    assert len(out.refused) == 1


def test_running_of_an_instance_suspected_while_it_started_is_recorded() -> None:
    # Claimed on c1, whose presence expired before its running report arrived: SUSPECT and CLAIMED, with a
    # replacement to place. Its running report must not be lost: if c1 returns before the replacement
    # runs, the suspect is promoted back, and it would stay CLAIMED for good.
    actuals = ActualSet([unclaimed("web", 0, "d", 0.0)])
    apply_lrp_reports(actuals, report(claimed=[ref()]), "c1", "z1", 1.0, POLICY)
    started = actuals.get("web", 0)
    actuals.replace(started, dataclasses.replace(started, presence=SUSPECT))
    actuals.put(unclaimed("web", 0, "d", 4.0))
    actuals = ActualSet(list(actuals))
    running = {**ref(), "host": "10.0.0.5", "ports": [{"container_port": 8080, "host_port": 61001}]}
    out = apply_lrp_reports(actuals, report(running=[running]), "c1", "z1", 5.0, POLICY)
    suspect = actuals.other("web", 0)
    assert out.refused == [] and out.stops == []
    assert (suspect.presence, suspect.state, suspect.address, suspect.since) == (
        SUSPECT,
        RUNNING,
        "10.0.0.5:61001",
        5.0,
    )
    assert actuals.get("web", 0).state == UNCLAIMED  # the replacement is still to be placed
    # Reported again (its rep reasserts after a silence): nothing more changes.
    assert not apply_lrp_reports(ActualSet(list(actuals)), report(running=[running]), "c1", "z1", 6.0,
                                 POLICY).refused


def test_removed_ordinary_instance_is_placed_again() -> None:
    actuals = running_set()
    out = apply_lrp_reports(actuals, report(removed=[ref()]), "c1", "z1", 9.0, POLICY)
    assert actuals.get("web", 0).state == UNCLAIMED and out.starts == {"web": {0}}


def test_task_start_and_completion() -> None:
    task = TaskRecord("t1", "d", {"command": ["x"]}, created_at=1.0, updated_at=1.0)
    out = apply_task_reports({"t1": task}, ["t1", "nope"], [], "c1", 2.0)
    assert out.refused == ["nope"] and out.updated[0].state == "RUNNING"
    started = out.updated[0]
    out = apply_task_reports(
        {"t1": started}, ["t1"], [TaskCompletion(task_guid="t1", exit_status=0, result="x" * 5000)], "c1", 3.0
    )
    done = out.updated[0]
    assert (done.state, done.exit_status, len(done.result), done.first_completed_at) == (
        "COMPLETED",
        0,
        4096,
        3.0,
    )
    assert out.refused == [] and out.completed == [done]
    # Another cell may not start a task that already runs elsewhere.
    assert apply_task_reports({"t1": started}, ["t1"], [], "c2", 3.0).refused == ["t1"]
