"""What a convergence pass counts for Diego's BBS metrics (LRPsDesired, LRPsMissing, PresentCells, ...).

Diego's BBS emits these from its convergence pass, and so does Vendue's: the pass has every desired
size, actual instance, task and cell in hand already, so counting costs one walk over the instances it
decided about (the settled ones, nearly all of them at scale, are counted by state when set aside) and
no query of its own. A scrape reads the last pass's counts; only the BBS holding the convergence lease
has them (bbs/metrics.py).

Meanings (the README's metrics table says the same, beside Diego's wording), all after the pass:
- LRPsDesired: instances desired, over every desired LRP;
- LRPsUnclaimed / LRPsClaimed / LRPsRunning / CrashedActualLRPs: ORDINARY instances in that state;
- LRPsMissing: desired instances with no ORDINARY instance CLAIMED or RUNNING (unplaced, crashed, or
  placed anew by this pass). Diego counts "desired but no record"; Vendue writes the UNCLAIMED record
  when the instance is desired, so that would be 0 even while nothing can be placed;
- LRPsExtra: instances the pass found beyond their LRP's count or of no desired LRP (it stops them);
- CrashingDesiredLRPs: desired LRPs with at least one CRASHED instance;
- SuspectRunningActualLRPs / SuspectClaimedActualLRPs: SUSPECT instances (on a cell whose presence
  expired) RUNNING / CLAIMED;
- PresentCells: cells whose presence has not expired; SuspectCells: cells holding SUSPECT instances;
- Tasks*: tasks in each state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .records import (
    CLAIMED,
    COMPLETED,
    CRASHED,
    ORDINARY,
    PENDING,
    RESOLVING,
    RUNNING,
    SUSPECT,
    TASK_RUNNING,
    UNCLAIMED,
    ActualRecord,
    CellRecord,
    DesiredRecord,
    DesiredSize,
    TaskRecord,
)

TASK_STATES = (PENDING, TASK_RUNNING, COMPLETED, RESOLVING)


@dataclass(frozen=True, slots=True)
class PassCounts:
    lrps_desired: int = 0
    lrps_unclaimed: int = 0
    lrps_claimed: int = 0
    lrps_running: int = 0
    lrps_missing: int = 0
    lrps_extra: int = 0
    crashed_actual_lrps: int = 0
    crashing_desired_lrps: int = 0
    suspect_running_actual_lrps: int = 0
    suspect_claimed_actual_lrps: int = 0
    present_cells: int = 0
    suspect_cells: int = 0
    tasks_pending: int = 0
    tasks_running: int = 0
    tasks_completed: int = 0
    tasks_resolving: int = 0


def extra_instances(desired: Iterable[DesiredSize | DesiredRecord], rows: Iterable[ActualRecord]) -> int:
    """Instances beyond their LRP's count or of no desired LRP, among `rows` (before the pass removes
    them; settled instances never are)."""
    instances = {d.process_guid: d.instances for d in desired}
    return sum(1 for r in rows if r.index >= instances.get(r.process_guid, 0))


def count_pass(
    desired: Iterable[DesiredSize | DesiredRecord],
    states: Mapping[tuple[str, str], int],
    decided: Iterable[ActualRecord],
    extra: int,
    tasks: Iterable[TaskRecord],
    cells: Iterable[CellRecord],
    now: float,
) -> PassCounts:
    """`states`: (state, presence) -> instances after the pass, settled ones included; `decided`: the
    instances the pass decided about, as it left them (every CRASHED and SUSPECT one is among them);
    `tasks`: as the pass leaves them."""
    desired_total = sum(d.instances for d in desired)
    crashing: set[str] = set()
    suspect_cells: set[str] = set()
    for row in decided:
        if row.presence == SUSPECT:
            suspect_cells.add(row.cell_id)
        elif row.state == CRASHED and row.presence == ORDINARY:
            crashing.add(row.process_guid)
    by_task_state = dict.fromkeys(TASK_STATES, 0)
    for task in tasks:
        by_task_state[task.state] = by_task_state.get(task.state, 0) + 1
    claimed, running = states.get((CLAIMED, ORDINARY), 0), states.get((RUNNING, ORDINARY), 0)
    return PassCounts(
        lrps_desired=desired_total,
        lrps_unclaimed=states.get((UNCLAIMED, ORDINARY), 0),
        lrps_claimed=claimed,
        lrps_running=running,
        lrps_missing=max(0, desired_total - claimed - running),
        lrps_extra=extra,
        crashed_actual_lrps=states.get((CRASHED, ORDINARY), 0),
        crashing_desired_lrps=len(crashing),
        suspect_running_actual_lrps=states.get((RUNNING, SUSPECT), 0),
        suspect_claimed_actual_lrps=states.get((CLAIMED, SUSPECT), 0),
        present_cells=sum(1 for cell in cells if cell.present(now)),
        suspect_cells=len(suspect_cells),
        tasks_pending=by_task_state[PENDING],
        tasks_running=by_task_state[TASK_RUNNING],
        tasks_completed=by_task_state[COMPLETED],
        tasks_resolving=by_task_state[RESOLVING],
    )


def tasks_after(
    tasks: Iterable[TaskRecord], updated: Iterable[TaskRecord], deleted: Iterable[TaskRecord]
) -> list[TaskRecord]:
    """`tasks` as a pass leaves them: its updates applied, its deletions gone."""
    changed = {t.task_guid: t for t in updated}
    gone = {t.task_guid for t in deleted}
    return [changed.get(t.task_guid, t) for t in tasks if t.task_guid not in gone]
