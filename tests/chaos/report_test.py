from __future__ import annotations

from pathlib import Path

from .checker import TaskHistory
from .faults import Fault
from .ledger import ACKNOWLEDGED, REFUSED, Ledger
from .report import fault_rows, percentiles, read_markers, repairs, tasks


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles([]) == {"count": 0, "p50": None, "p99": None, "max": None}
    assert percentiles([3.0, 1.0, 2.0, 4.0]) == {"count": 4, "p50": 2.0, "p99": 4.0, "max": 4.0}
    hundred = percentiles(float(i) for i in range(1, 101))
    assert (hundred["p50"], hundred["p99"], hundred["max"]) == (50.0, 99.0, 100.0)


def test_repairs_run_from_the_heal_and_unrepaired_faults_are_counted_aside() -> None:
    faults = [
        Fault("sigstop", "bbs", 2.0, started=10.0, healed=12.0, repaired=13.5),
        Fault("sigstop", "cell-0", 2.0, started=20.0, healed=22.0, repaired=22.5),
        Fault("partition_cell", "cell-1", 4.0, started=30.0, healed=34.0, unrepaired="cells not present"),
    ]
    summary = repairs(faults)
    assert (summary["count"], summary["p50"], summary["max"], summary["unrepaired"]) == (2, 0.5, 1.5, 1)
    assert summary["by_kind"]["partition_cell"] == {"count": 0, "p50": None, "p99": None, "max": None,
                                                    "unrepaired": 1}
    rows = fault_rows(faults, started=10.0)
    assert rows[0] == {"kind": "sigstop", "target": "bbs", "hold_s": 2.0, "started_s": 0.0, "healed_s": 2.0,
                       "repair_s": 1.5}
    assert rows[2]["repair_s"] is None and rows[2]["unrepaired"] == "cells not present"


def test_markers_tell_the_runs_of_each_task(tmp_path: Path) -> None:
    for name, line in (("t-1.00aa", "cell-0 10 1.5"), ("t-1.00bb", "cell-1 11 2.5"), ("t-2.00cc", "")):
        (tmp_path / name).write_text(line + "\n")
    assert read_markers(tmp_path) == {"t-1": ["cell-0 10 1.5", "cell-1 11 2.5"], "t-2": [""]}


def test_what_became_of_the_tasks() -> None:
    ledger = Ledger()
    for guid in ("ok", "twice", "lost", "liar"):
        ledger.end(ledger.begin("task", guid), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("task", "refused"), REFUSED, 409)
    histories = {guid: TaskHistory() for guid in ("ok", "twice", "lost", "liar")}
    for guid in ("ok", "twice", "liar"):
        histories[guid].see({"state": "RUNNING"})
        histories[guid].see({"state": "COMPLETED", "failed": False})
    histories["lost"].see({"state": "PENDING"})
    histories["twice"].see({"state": "RUNNING", "cell_id": "cell-2"})
    histories["twice"].see({"state": "COMPLETED", "failed": True, "failure_reason": "cell disappeared"})
    markers = {"ok": ["cell-0 1 1.0"], "twice": ["cell-0 2 2.0", "cell-2 3 3.0"], "refused": ["cell-1 4 4.0"]}
    summary = tasks(ledger.snapshot(), histories, markers)
    details = summary.pop("details")
    assert summary == {
        "created": 4, "unknown_outcome": 0, "completed": 3, "failed_by_reason": {"cell disappeared": 1},
        "never_completed": ["lost"], "completed_twice": ["twice"], "run_twice": ["twice"],
        "succeeded_without_running": ["liar"], "ran_but_never_created": ["refused"],
    }
    assert details["twice"] == {"states_seen": ["RUNNING", "COMPLETED", "RUNNING@cell-2", "COMPLETED"],
                                "runs": ["cell-0 2 2.0", "cell-2 3 3.0"]}
    assert set(details) == {"lost", "twice", "liar", "refused"}


def test_repairs_are_checked_against_the_repair_target() -> None:
    faults = [
        Fault("kill9_restart", "bbs", 1.0, started=10.0, healed=11.0, repaired=14.0),
        Fault("kill9_restart", "auctioneer", 1.0, started=20.0, healed=21.0, repaired=40.0),
        Fault("sigstop", "cell-1", 4.0, started=30.0, healed=34.0, unrepaired="cells not present"),
    ]
    summary = repairs(faults, target_s=8.0)
    assert (summary["target_s"], summary["over_target"], summary["target_met"]) == (8.0, 2, False)
    assert summary["by_kind"]["kill9_restart"]["over_target"] == 1
    assert repairs(faults[:1], target_s=8.0)["target_met"] is True
    assert "target_s" not in repairs(faults)

