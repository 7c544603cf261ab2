"""The figures of the campaign's JSON: repair times, faults by kind, and what became of every task.

Percentiles are nearest-rank (p99 of fewer than 100 values is the largest but none): no interpolation
between two measured repairs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .checker import TaskHistory
from .faults import Fault
from .ledger import ACKNOWLEDGED, UNKNOWN, Write

DETAILS = 10  # tasks of the findings described at most


def percentiles(values: Iterable[float]) -> dict[str, Any]:
    ordered = sorted(values)

    def rank(p: float) -> float | None:
        return round(ordered[max(0, math.ceil(p * len(ordered)) - 1)], 2) if ordered else None

    return {"count": len(ordered), "p50": rank(0.50), "p99": rank(0.99),
            "max": round(ordered[-1], 2) if ordered else None}


def repair_s(fault: Fault) -> float | None:
    """From the heal to the first observation of the cluster repaired."""
    if fault.repaired is None or fault.healed is None:
        return None
    return max(0.0, fault.repaired - fault.healed)


def repairs(faults: Sequence[Fault], target_s: float | None = None) -> dict[str, Any]:
    """Repair time after each fault: all of them, and per kind; faults not repaired in time counted aside.
    With `target_s` (the repair target: presence TTL + 5 s), the faults repaired later than it, or never,
    are counted as `over_target` and `target_met` says whether there were none."""
    def of(group: Sequence[Fault]) -> dict[str, Any]:
        times = [t for t in map(repair_s, group) if t is not None]
        summary = {**percentiles(times), "unrepaired": sum(1 for f in group if repair_s(f) is None)}
        if target_s is not None:
            summary["over_target"] = sum(1 for f in group if (t := repair_s(f)) is None or t > target_s)
        return summary

    kinds = sorted({f.kind for f in faults})
    result = {**of(faults), "by_kind": {kind: of([f for f in faults if f.kind == kind]) for kind in kinds}}
    if target_s is not None:
        result |= {"target_s": target_s, "target_met": result["over_target"] == 0}
    return result


def fault_rows(faults: Sequence[Fault], started: float) -> list[dict[str, Any]]:
    def at(moment: float | None) -> float | None:
        return None if moment is None else round(moment - started, 2)

    return [{"kind": f.kind, "target": f.target, "hold_s": f.hold_s, "started_s": at(f.started),
             **({"started_unix": round(f.started_unix, 2)} if f.started_unix is not None else {}),
             "healed_s": at(f.healed), "repair_s": None if (r := repair_s(f)) is None else round(r, 2),
             **({"unrepaired": f.unrepaired, "diagnosis": f.diagnosis} if f.unrepaired else {}),
             **({"restart_errors": f.restart_errors} if f.restart_errors else {})} for f in faults]


def read_markers(directory: Path) -> dict[str, list[str]]:
    """task guid -> a line per run of its command (files `<task guid>.<hex>`: "<cell> <pid> <unix time>")."""
    runs: dict[str, list[str]] = {}
    for path in sorted(directory.iterdir()):
        if "." in path.name:
            runs.setdefault(path.name.rsplit(".", 1)[0], []).append(path.read_text(errors="replace").strip())
    return runs


def tasks(writes: Sequence[Write], histories: dict[str, TaskHistory],
          markers: dict[str, list[str]]) -> dict[str, Any]:
    """What became of every task the workload asked for. Findings: an acknowledged task never COMPLETED,
    one COMPLETED twice, one whose command ran twice (two markers, or on two hosts at once), one that
    succeeded without its command running, and one refused (never created) whose command ran.
    `details`: for each task of a finding, the states the checker saw and its runs (markers)."""
    runs = Counter({guid: len(lines) for guid, lines in markers.items()})
    created = {w.guid for w in writes if w.kind == "task" and w.outcome == ACKNOWLEDGED}
    maybe = {w.guid for w in writes if w.kind == "task" and w.outcome == UNKNOWN}
    asked = {w.guid for w in writes if w.kind == "task"}
    last = {guid: h.last for guid, h in histories.items() if h.last}
    completed = {guid for guid, task in last.items() if task.get("state") == "COMPLETED"}
    failed = Counter(
        str(last[guid].get("failure_reason") or "?") for guid in completed if last[guid].get("failed")
    )
    found = {
        "never_completed": sorted(created - completed),
        "completed_twice": sorted(g for g, h in histories.items() if h.completions > 1),
        "run_twice": sorted(
            {g for g, n in runs.items() if n > 1} | {g for g, h in histories.items() if h.hosts_at_once > 1}
        ),
        "succeeded_without_running": sorted(
            g for g in completed if not last[g].get("failed") and runs[g] == 0
        ),
        "ran_but_never_created": sorted(g for g in runs if g in asked and g not in created | maybe),
    }
    return {
        "created": len(created),
        "unknown_outcome": len(maybe),
        "completed": len(completed & (created | maybe)),
        "failed_by_reason": dict(failed.most_common()),
        **found,
        "details": {guid: {"states_seen": histories[guid].states if guid in histories else [],
                           "runs": markers.get(guid, [])}
                    for guid in sorted(set().union(*found.values()))[:DETAILS]},
    }
