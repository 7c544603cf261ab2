"""The rep's lifecycle reports applied to actual LRPs and tasks: pure decisions, no I/O.

One `CellReport` (everything a cell has to say this round) goes through `apply_lrp_reports` and
`apply_task_reports` against the rows it names; the caller writes the net changes, answers the
refusals, sends the auctions and stops, and publishes the events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from common.models import TaskCompletion

from .actual_set import ActualSet
from .lifecycle_wire import CellReport, ClaimRef, CrashReport, InstanceRef, RunningReport
from .records import (
    CLAIMED,
    COMPLETED,
    CRASHED,
    ORDINARY,
    PENDING,
    RUNNING,
    TASK_RUNNING,
    UNCLAIMED,
    ActualRecord,
    TaskRecord,
    changed,
    claimed,
    completed,
    reset_to_unclaimed,
)
from .restart_policy import RestartPolicy

RESULT_LIMIT = 4096  # a task's result keeps the last 4 KiB of output

# The fields a claim (records.claimed) and a running report set: every one they may change.
CLAIM_FIELDS = frozenset(
    {"state", "instance_guid", "cell_id", "zone", "host", "ports", "address", "since", "placement_error",
     "mod_index", "version"}
)
RUNNING_FIELDS = frozenset({"state", "host", "ports", "address", "since", "mod_index"})


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


def lifecycle_keys(report: CellReport) -> set[tuple[str, int]]:
    """The (process_guid, index) pairs a report touches: the rows to read for it."""
    keys = {(ref["process_guid"], ref["index"]) for ref in report["claimed"]}
    for part in (report["running"], report["crashed"], report["removed"]):
        keys.update((ref["process_guid"], ref["index"]) for ref in part)
    return keys


def _mine(row: ActualRecord | None, ref: InstanceRef, cell_id: str) -> bool:
    return row is not None and row.instance_guid == ref["instance_guid"] and row.cell_id == cell_id


def _other_of(actuals: ActualSet, ref: InstanceRef, cell_id: str) -> ActualRecord | None:
    other = actuals.other(ref["process_guid"], ref["index"])
    return other if _mine(other, ref, cell_id) else None


def _address(ref: RunningReport) -> str:
    ports = ref["ports"]
    return f"{ref['host']}:{ports[0]['host_port']}" if ports else ref["host"]


def apply_lrp_reports(
    actuals: ActualSet,
    report: CellReport,
    cell_id: str,
    zone: str,
    now: float,
    policy: RestartPolicy,
) -> LrpOutcome:
    out = LrpOutcome()
    claims, runs = report["claimed"], report["running"]
    # A quick start's claim and running report usually come together: such a claim goes straight to
    # RUNNING (one new record, one row update); its running report then finds nothing left to change.
    running_of = (
        {(r["process_guid"], r["index"], r["instance_guid"]): r for r in runs} if claims and runs else {}
    )
    for ref in claims:
        _claim(actuals, ref, running_of, cell_id, zone, now, out)
    for running in runs:
        _running(actuals, running, cell_id, now, out)
    for crash in report["crashed"]:
        _crashed(actuals, crash, cell_id, now, policy, out)
    for removed in report["removed"]:
        _removed(actuals, removed, cell_id, now, out)
    return out


def _claim(
    actuals: ActualSet,
    ref: ClaimRef,
    running_of: dict[tuple[str, int, str], RunningReport],
    cell_id: str,
    zone: str,
    now: float,
    out: LrpOutcome,
) -> None:
    row = actuals.get(ref["process_guid"], ref["index"])
    if row is None:
        out.refused.append(_plain(ref))  # not desired (any more)
    elif row.state == UNCLAIMED:
        guid = ref["instance_guid"]
        running = running_of.get((ref["process_guid"], ref["index"], guid))
        if running is None:
            new = claimed(
                row, CLAIMED, guid, cell_id, zone, now, row.host, row.ports, row.address, ref["version"])
        else:
            new = claimed(
                row, RUNNING, guid, cell_id, zone, now, running["host"], running["ports"], _address(running),
                ref["version"],
            )
        actuals.replace(row, new, CLAIM_FIELDS)
    elif row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        pass  # a repeated claim: idempotent
    else:
        out.refused.append(_plain(ref))  # claimed or running elsewhere, or crashed and waiting


def _plain(ref: ClaimRef) -> InstanceRef:
    """The claim as the rep's refused list names it (without its version)."""
    return {"process_guid": ref["process_guid"], "index": ref["index"], "instance_guid": ref["instance_guid"]}


def _running(actuals: ActualSet, ref: RunningReport, cell_id: str, now: float, out: LrpOutcome) -> None:
    process_guid, index = ref["process_guid"], ref["index"]
    row = actuals.get(process_guid, index)
    if row is not None and row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        host, ports = ref["host"], ref["ports"]
        if row.state != RUNNING or row.host != host or row.ports != ports:
            since = row.since if row.state == RUNNING else now
            actuals.replace(
                row,
                changed(row, state=RUNNING, host=host, ports=ports, address=_address(ref), since=since),
                RUNNING_FIELDS,
            )
        other = actuals.other(process_guid, index)
        if other is not None:
            # The replacement runs: the evacuating or suspect instance is no longer needed.
            actuals.remove(other)
            if other.cell_id and other.instance_guid:
                out.stops.append(stop_of(other))
        return
    other = _other_of(actuals, ref, cell_id)
    if other is not None:
        # Still running while it is evacuated or suspected: it stays so. One suspected while it started
        # (CLAIMED when its cell went silent) does run now: say so, or once promoted back (its cell returns
        # before the replacement runs) it would stay CLAIMED for good, its rep having reported it already.
        if other.state == CLAIMED:
            actuals.replace(other, changed(other, state=RUNNING, host=ref["host"], ports=ref["ports"],
                                           address=_address(ref), since=now))
        return
    out.refused.append({"process_guid": process_guid, "index": index, "instance_guid": ref["instance_guid"]})


def _crashed(
    actuals: ActualSet,
    ref: CrashReport,
    cell_id: str,
    now: float,
    policy: RestartPolicy,
    out: LrpOutcome,
) -> None:
    row = actuals.get(ref["process_guid"], ref["index"])
    if row is not None and row.state in (CLAIMED, RUNNING) and _mine(row, ref, cell_id):
        count = policy.crash_count_after(row.crash_count, row.state == RUNNING, row.since, now)
        out.crashed += 1
        reason = ref["reason"]
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
    row = actuals.get(ref["process_guid"], ref["index"])
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
