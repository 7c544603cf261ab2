"""Each app's last events (bbs/app_history.py): which changes of rows are kept, and the bounds."""

from __future__ import annotations

import dataclasses

from .actual_set import ActualChanges
from .app_history import AppHistory, actual_entries, as_wire
from .records import ActualRecord


def row(index: int = 0, **over: object) -> ActualRecord:
    return dataclasses.replace(ActualRecord(process_guid="web", index=index, since=100.0), **over)  # type: ignore[arg-type]


def updated(before: ActualRecord, after: ActualRecord) -> ActualChanges:
    return ActualChanges(updates=[after], visible_updates=[after], previous={before.key: before})


def kinds(changes: ActualChanges) -> list[str]:
    return [as_wire(entry)["kind"] for _, entry in actual_entries(changes)]


def test_placement_start_crash_restart_and_stop_are_kept() -> None:
    unclaimed = row()
    claimed = row(state="CLAIMED", cell_id="cell-1", instance_guid="i1")
    running = dataclasses.replace(claimed, state="RUNNING")
    crashed = row(state="CRASHED", crash_count=4, crash_reason="exited with status 1")
    assert kinds(ActualChanges(inserts=[unclaimed])) == []
    assert kinds(updated(unclaimed, claimed)) == ["placed"]
    assert kinds(updated(claimed, running)) == ["started"]
    [(guid, kept)] = actual_entries(updated(running, crashed))
    crash = as_wire(kept)
    assert guid == "web" and crash["kind"] == "crashed"
    assert crash["reason"] == "exited with status 1" and crash["crash_count"] == 4
    assert kinds(updated(crashed, row(crash_count=4))) == ["restarting"]
    # Diego's first crashes restart at once: the row goes back to UNCLAIMED with the count up.
    assert kinds(updated(running, row(crash_count=1, crash_reason="killed by signal 9"))) == [
        "crashed", "restarting"]
    assert kinds(ActualChanges(deletes=[running])) == ["stopped"]
    assert kinds(updated(running, dataclasses.replace(running, address="10.0.0.1"))) == []


def test_a_placement_error_and_an_evacuation_are_kept_once() -> None:
    failed = row(placement_error="insufficient resources: memory")
    assert kinds(updated(row(), failed)) == ["unplaceable"]
    assert kinds(updated(failed, failed)) == []
    running = row(state="RUNNING", cell_id="cell-1")
    evacuating = dataclasses.replace(running, presence="EVACUATING")
    assert kinds(ActualChanges(inserts=[evacuating])) == ["evacuating"]
    assert kinds(ActualChanges(deletes=[evacuating])) == ["evacuated"]


def test_bounded_per_app_and_in_apps() -> None:
    history = AppHistory(per_app=3, max_apps=2)
    for n in range(5):
        history.add("web", {"kind": "placed", "index": n})
    assert [e["index"] for e in history.recent("web")] == [2, 3, 4]
    history.add("api", {"kind": "placed", "index": 0})
    history.add("db", {"kind": "placed", "index": 0})  # the least recently changed app goes
    assert history.recent("web") == [] and history.recent("api") and history.recent("db")
    history.forget("api")
    assert history.recent("api") == []


def test_a_rollouts_progress_updates_its_entry() -> None:
    history = AppHistory()
    wire = {"process_guid": "web", "kind": "update", "state": "rolling", "to_version": 2, "done": 0,
            "total": 4}
    history.record_rollout(wire, 1.0)
    history.record_rollout({**wire, "done": 3}, 2.0)
    history.record_rollout({**wire, "state": "completed", "done": 4}, 3.0)
    entries = history.recent("web")
    assert [(e["state"], e["done"]) for e in entries] == [("rolling", 3), ("completed", 4)]
    assert entries[0]["rollout_kind"] == "update"
