"""The rep's lifecycle reports applied to actual LRPs and tasks: pure decisions, no I/O.

One `CellLifecycle` (everything a cell has to say this round) goes through `apply_lrp_reports` and
`apply_task_reports` against the rows it names; the caller writes the net changes, answers the
refusals, sends the auctions and stops, and publishes the events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from common.models import CellLifecycle, InstanceRef, TaskCompletion

from .actual_set import ActualSet
from .records import (
    CLAIMED,
    COMPLETED,
    CRASHED,
    ORDINARY,
    PENDING,
    RUNNING,
    TASK_RUNNING,
    ActualRecord,
    TaskRecord,
    changed,
    completed,
    reset_to_unclaimed,
)
from .restart_policy import RestartPolicy

RESULT_LIMIT = 4096  # a task's result keeps the last 4 KiB of output


@dataclass(frozen=True, slots=True)
class Stop:
    """Ask the rep of `cell_id` to stop this instance."""

    cell_id: str
    process_guid: str
    index: int
    instance_guid: str


@dataclass(slots=True)
class LrpOutcome:
    refused: list[InstanceRef] = field(default_factory=list)
    starts: dict[str, set[int]] = field(default_factory=dict)  # process_guid -> indices to auction
    stops: list[Stop] = field(default_factory=list)
    crashed: int = 0  # how many crashes were recorded
    restart_due: float | None = None  # the earliest end of a crash backoff begun here

    def start(self, process_guid: str, index: int) -> None:
        self.starts.setdefault(process_guid, set()).add(index)


def stop_of(row: ActualRecord) -> Stop:
    return Stop(row.cell_id, row.process_guid, row.index, row.instance_guid)


def lifecycle_keys(report: CellLifecycle) -> set[tuple[str, int]]:
    """The (process_guid, index) pairs a report touches: the rows to read for it."""
    refs: list[InstanceRef] = [*report.claimed, *report.running, *report.crashed, *report.removed]
    return {(ref.process_guid, ref.index) for ref in refs}


def _mine(row: ActualRecord | None, ref: InstanceRef, cell_id: str) -> bool:
    return row is not None and row.instance_guid == ref.instance_guid and row.cell_id == cell_id


def _other_of(actuals: ActualSet, ref: InstanceRef, cell_id: str) -> ActualRecord | None:
    other = actuals.other(ref.process_guid, ref.index)
    return other if _mine(other, ref, cell_id) else None


def apply_lrp_reports(
    actuals: ActualSet,
    report: CellLifecycle,
    cell_id: str,
    zone: str,
    now: float,
    policy: RestartPolicy,
) -> LrpOutcome:
    out = LrpOutcome()
    for ref in report.claimed:
        _claim(actuals, ref, cell_id, zone, now, out)
    for running in report.running:
        _running(actuals, running, cell_id, now, out)
    for crash in report.crashed:
        _crashed(actuals, crash, crash.reason, cell_id, now, policy, out)
    for ref in report.removed:
        _removed(actuals, ref, cell_id, now, out)
    return out


def _claim(
    actuals: ActualSet, ref: InstanceRef, cell_id: str, zone: str, now: float, out: LrpOutcome
) -> None:
    row = actuals.get(ref.process_guid, ref.index)
    if row is None:
        out.refused.append(ref)  # not desired (any more)
    elif row.state == "UNCLAIMED":
        actuals.replace(
            row,
            changed(
                row,
                state=CLAIMED,
                instance_guid=ref.instance_guid,
                cell_id=cell_id,
                zone=zone,
                since=now,
                placement_error="",
            ),
        )
    elif row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        pass  # a repeated claim: idempotent
    else:
        out.refused.append(ref)  # claimed or running elsewhere, or crashed and waiting


def _running(actuals: ActualSet, ref, cell_id: str, now: float, out: LrpOutcome) -> None:
    ports = [{"container_port": p.container_port, "host_port": p.host_port} for p in ref.ports]
    address = f"{ref.host}:{ports[0]['host_port']}" if ports else ref.host
    row = actuals.get(ref.process_guid, ref.index)
    if row is not None and row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        if row.state != RUNNING or row.host != ref.host or row.ports != ports:
            since = row.since if row.state == RUNNING else now
            actuals.replace(
                row, changed(row, state=RUNNING, host=ref.host, ports=ports, address=address, since=since)
            )
        other = actuals.other(ref.process_guid, ref.index)
        if other is not None:
            # The replacement runs: the evacuating or suspect instance is no longer needed.
            actuals.remove(other)
            if other.cell_id and other.instance_guid:
                out.stops.append(stop_of(other))
        return
    if _other_of(actuals, ref, cell_id) is not None:
        return  # still running while it is evacuated or suspected: nothing changes
    out.refused.append(
        InstanceRef(process_guid=ref.process_guid, index=ref.index, instance_guid=ref.instance_guid)
    )


def _crashed(
    actuals: ActualSet,
    ref: InstanceRef,
    reason: str,
    cell_id: str,
    now: float,
    policy: RestartPolicy,
    out: LrpOutcome,
) -> None:
    row = actuals.get(ref.process_guid, ref.index)
    if row is not None and row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        count = policy.crash_count_after(row.crash_count, row.state == RUNNING, row.since, now)
        out.crashed += 1
        if policy.restart_at_once(count):
            actuals.replace(row, reset_to_unclaimed(row, now, crash_count=count, crash_reason=reason))
            out.start(row.process_guid, row.index)
        else:
            crashed_row = reset_to_unclaimed(row, now, crash_count=count, crash_reason=reason)
            actuals.replace(row, dataclasses.replace(crashed_row, state=CRASHED))
            wait = policy.backoff(count)
            if wait is not None:
                due = now + wait
                out.restart_due = due if out.restart_due is None else min(out.restart_due, due)
        return
    other = _other_of(actuals, ref, cell_id)
    if other is not None:
        actuals.remove(other)  # its replacement is already on the way


def _removed(actuals: ActualSet, ref: InstanceRef, cell_id: str, now: float, out: LrpOutcome) -> None:
    row = actuals.get(ref.process_guid, ref.index)
    if row is not None and row.presence == ORDINARY and _mine(row, ref, cell_id):
        # The cell let go of a desired instance (it stopped without evacuating): place it again.
        actuals.replace(row, reset_to_unclaimed(row, now))
        out.start(row.process_guid, row.index)
        return
    other = _other_of(actuals, ref, cell_id)
    if other is not None:
        actuals.remove(other)


@dataclass(slots=True)
class TaskOutcome:
    updated: list[TaskRecord] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    completed: list[TaskRecord] = field(default_factory=list)  # for completion callbacks


def apply_task_reports(
    tasks: dict[str, TaskRecord],
    started: list[str],
    completions: list[TaskCompletion],
    cell_id: str,
    now: float,
) -> TaskOutcome:
    out = TaskOutcome()
    current = dict(tasks)
    touched: set[str] = set()
    for guid in started:
        task = current.get(guid)
        if task is not None and task.state == PENDING:
            current[guid] = dataclasses.replace(task, state=TASK_RUNNING, cell_id=cell_id, updated_at=now)
            touched.add(guid)
        elif task is not None and task.state == TASK_RUNNING and task.cell_id == cell_id:
            pass  # repeated
        else:
            out.refused.append(guid)
    for done in completions:
        task = current.get(done.task_guid)
        if task is None or task.state != TASK_RUNNING or task.cell_id != cell_id:
            continue  # cancelled, failed by convergence, or never ours: nothing to record
        current[done.task_guid] = completed(
            task,
            now,
            failed=done.failed,
            failure_reason=done.failure_reason,
            exit_status=done.exit_status,
            result=done.result[-RESULT_LIMIT:],
        )
        touched.add(done.task_guid)
    out.updated = [current[guid] for guid in touched]
    out.completed = [task for task in out.updated if task.state == COMPLETED]
    return out
