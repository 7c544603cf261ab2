"""What cells accepted, kept until their claims arrive: the log, its pruning, and the wait for a late
claim."""

from __future__ import annotations

import dataclasses

from bbs.cell_probes import Probe
from bbs.placements import (
    Placement,
    PlacementLog,
    Report,
    Wait,
    instance_waits,
    parse_all,
    prune,
    task_waits,
    wait_for_claim,
)
from bbs.records import CLAIMED, SUSPECT, TASK_RUNNING, TaskRecord, unclaimed


def report(report_id: int, placed_at: float, **cells: tuple[str, str]) -> tuple[int, float, dict]:
    accepted = {cell: {"lrps": lrps, "tasks": tasks} for cell, (lrps, tasks) in cells.items()}
    return report_id, placed_at, accepted


def test_the_log_follows_the_stored_reports_and_the_latest_placement_wins() -> None:
    log = PlacementLog()
    assert log.sync([(1, 10.0), (2, 20.0)]) == [1, 2]
    log.add([report(1, 10.0, c1=("web:0 web:1", "t1")), report(2, 20.0, c2=("web:1", ""))])
    assert log.sync([(1, 10.0), (2, 20.0)]) == []  # nothing new to fetch
    assert log.instance("web", 0) == Placement("c1", 10.0)
    assert log.instance("web", 1) == Placement("c2", 20.0)  # placed again later, elsewhere
    assert log.task("t1") == Placement("c1", 10.0)
    assert log.instance("api", 0) is None and log.task("t2") is None
    assert log.sync([(2, 20.0), (3, 30.0)]) == [3]  # another leader deleted report 1
    assert log.instance("web", 0) is None and log.task("t1") is None


def test_reports_old_enough_are_due_and_taken_apart_only_when_asked() -> None:
    log = PlacementLog()
    log.add([report(1, 10.0, c1=("web:0", "")), report(2, 40.0, c1=("web:1", ""))])
    due = log.due(now=50.0, age=15.0)
    assert [r.id for r in due] == [1] and due[0].lrps is None  # still as stored: nothing done per instance
    parse_all(due)
    assert due[0].lrps == {("web", 0): "c1"} and due[0].accepted == {}


def test_pruning_keeps_what_still_waits_for_its_claim() -> None:
    waiting = unclaimed("web", 0, "d", 5.0)  # auctioned at 5, placed at 10: still waits
    claimed = dataclasses.replace(unclaimed("web", 1, "d", 5.0), state=CLAIMED, cell_id="c1")
    auctioned_again = unclaimed("web", 2, "d", 12.0)  # auctioned after the placement: superseded
    elsewhere = unclaimed("web", 3, "d", 5.0)  # accepted by a cell that is gone
    r = Report(1, 10.0, {"c1": {"lrps": "web:0 web:1 web:2 web:4", "tasks": "t1 t2 t3"},
                         "gone": {"lrps": "web:3", "tasks": ""}})
    r.parse()
    rows = {(x.process_guid, x.index): x for x in (waiting, claimed, auctioned_again, elsewhere)}
    tasks = {"t1": TaskRecord("t1", "d", {}, auctioned_at=5.0),
             "t2": TaskRecord("t2", "d", {}, state=TASK_RUNNING)}
    prune(r, rows, tasks, present={"c1"})  # web:4 and t3 have no row any more (deleted)
    assert r.lrps == {("web", 0): "c1"} and r.tasks == {"t1": "c1"} and r.waiting
    prune(r, {("web", 0): dataclasses.replace(waiting, state=CLAIMED)}, {}, present={"c1"})
    assert not r.waiting  # every claim is in: the report can go


def test_what_waits_for_a_claim() -> None:
    placed = Placement("c1", 10.0)
    row = unclaimed("web", 0, "d", 5.0)
    assert instance_waits(row, placed, {"c1"})
    assert not instance_waits(row, placed, {"c2"})  # its cell is not present
    assert not instance_waits(dataclasses.replace(row, presence=SUSPECT), placed, {"c1"})
    assert not instance_waits(None, placed, {"c1"})
    task = TaskRecord("t", "d", {}, auctioned_at=5.0)
    assert task_waits(task, placed, {"c1"}) and not task_waits(dataclasses.replace(task, auctioned_at=11.0),
                                                                placed, {"c1"})


def test_a_late_claim_is_awaited_until_the_cell_says_it_does_not_hold_it() -> None:
    placed = Placement("c1", 10.0)
    assert wait_for_claim(placed, None, False, 40.0, 30.0) == Wait(probe=True)  # ask the cell
    before = Probe(started_at=9.0, lrps=frozenset())  # asked before it accepted: says nothing
    assert wait_for_claim(placed, before, False, 40.0, 30.0) == Wait(probe=True)
    holds = Probe(started_at=41.0, lrps=frozenset({("web", 0)}))
    assert wait_for_claim(placed, holds, True, 42.0, 30.0) == Wait()
    silent = Probe(started_at=41.0, lrps=None)  # a stalled rep: its presence decides
    assert wait_for_claim(placed, silent, False, 42.0, 30.0) == Wait()
    assert wait_for_claim(placed, silent, False, 71.0, 30.0) == Wait(probe=True)  # ask again, later
    lost = Probe(started_at=41.0, lrps=frozenset())  # answered without it: it restarted, or lost it
    assert wait_for_claim(placed, lost, False, 42.0, 30.0) is None
