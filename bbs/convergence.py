"""One convergence pass as a pure function: desired, actual, tasks and cells in; actions out.

docs/architecture.md "Converge": missing index → UNCLAIMED + auction; extra index → removed and stopped on its
rep; UNCLAIMED left unplaced → auctioned again, unless a present cell accepted it (bbs/placements.py);
CLAIMED/RUNNING on a cell whose presence expired → SUSPECT with an ORDINARY replacement (dropped once
the replacement runs, promoted back when its cell returns first), or for `keep-replicas` LRPs SUSPECT
without one until bbs/cell_loss.py says otherwise; CRASHED whose backoff elapsed → UNCLAIMED + auction.
Tasks: PENDING kicked again (unless a present cell accepted it); PENDING too long, or RUNNING on a
missing cell → failed; COMPLETED too long → deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .actual_set import ActualChanges, ActualSet
from .cell_loss import CellLossConfig, keep_on_cell_loss
from .cell_probes import Probe
from .lifecycle import Stop, stop_of
from .placements import Placement, PlacementLog, wait_for_claim
from .records import (
    CLAIMED,
    COMPLETED,
    CRASHED,
    EVACUATING,
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
    changed,
    completed,
    reset_to_unclaimed,
    unclaimed,
)
from .restart_policy import RestartPolicy

NOT_STARTED_IN_TIME = "not started within time limit"
CELL_DISAPPEARED = "cell disappeared before completion"
CELL_RESTARTED = "cell restarted before completion"


@dataclass(frozen=True, slots=True)
class ConvergenceConfig:
    stale_unclaimed: float = 30.0
    # UNCLAIMED instances and PENDING tasks last auctioned before this (epoch s) are not known to be in
    # flight: this BBS took the convergence lease since, or the auctioneer or a cell's rep restarted. They
    # are auctioned at once, not after `stale_unclaimed` (bbs/operations/convergence.py, "in flight").
    in_flight_since: float = 0.0
    # UNCLAIMED instances whose last auction found no room (a placement error), auctioned before this: a cell
    # appeared or came back since, so they may fit now and are auctioned at once.
    cell_appeared_at: float = 0.0
    kick_task: float = 30.0
    expire_pending_task: float = 1800.0
    expire_completed_task: float = 120.0  # a completed task with a callback that never got through
    # Completed tasks without a callback (their history: result and the last part of their output) are
    # kept this long, at most `max_completed_tasks` of them (the oldest go first).
    task_retention: float = 86400.0
    max_completed_tasks: int = 10_000
    forget_cell_after: float = 3600.0
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    cell_loss: CellLossConfig = field(default_factory=CellLossConfig)
    # Domains upserted through the Diego API whose TTL ran out (bbs/diego, docs/diego-api.md): as in Diego,
    # their extra instances (past the desired count, or of no desired LRP) are kept until the domain is
    # fresh again, since whoever keeps the domain fresh may not have finished desiring.
    stale_domains: frozenset[str] = frozenset()


@dataclass(slots=True)
class ConvergenceActions:
    starts: dict[str, set[int]] = field(default_factory=dict)  # process_guid -> indices to auction
    stops: list[Stop] = field(default_factory=list)
    task_updates: list[TaskRecord] = field(default_factory=list)
    task_deletes: list[TaskRecord] = field(default_factory=list)
    tasks_to_kick: list[TaskRecord] = field(default_factory=list)
    callbacks: list[TaskRecord] = field(default_factory=list)  # completed tasks whose callback is due
    tasks_failed: list[TaskRecord] = field(default_factory=list)  # also in task_updates
    cells_disappeared: list[CellRecord] = field(default_factory=list)
    cells_forgotten: list[CellRecord] = field(default_factory=list)
    next_restart_at: float | None = None  # when a pass is due next: a crash backoff ends, a cell-loss grace
    probe_cells: set[str] = field(default_factory=set)  # cells to ask what they hold (bbs/cell_probes.py)

    def due_at(self, when: float) -> None:
        self.next_restart_at = when if self.next_restart_at is None else min(self.next_restart_at, when)

    def start(self, process_guid: str, index: int) -> None:
        self.starts.setdefault(process_guid, set()).add(index)

    def stop(self, row: ActualRecord) -> None:
        self.stops.extend(stops_for([row]))


def stops_for(rows: Iterable[ActualRecord]) -> list[Stop]:
    """The instances among `rows` that a rep holds (CLAIMED or RUNNING on a cell) and must stop."""
    return [stop_of(r) for r in rows if r.cell_id and r.instance_guid and r.state in (CLAIMED, RUNNING)]


@dataclass(slots=True)
class Settled:
    """ORDINARY instances a pass has nothing to decide about, with no evacuating or suspect copy at
    their index and within their LRP's instance count: CLAIMED or RUNNING on a present cell, or
    UNCLAIMED and auctioned recently. At Diego's scale that is nearly all 250,000 of them, so a pass
    sets them aside (`settle`) instead of copying them into the ActualSet it edits; only the
    missing-index check needs to know where they are."""

    indices: dict[str, set[int]] = field(default_factory=dict)  # process_guid -> settled indices
    states: dict[str, int] = field(default_factory=dict)  # state -> settled instances

    def holds(self, process_guid: str, index: int) -> bool:
        held = self.indices.get(process_guid)
        return held is not None and index in held


def settle(
    desired: Iterable[DesiredSize | DesiredRecord],
    rows: Iterable[ActualRecord],
    cells: dict[str, CellRecord],
    now: float,
    config: ConvergenceConfig,
) -> tuple[Settled, list[ActualRecord]]:
    """Split `rows` into the settled ones and the rest (what `converge` must see)."""
    rows = rows if isinstance(rows, list) else list(rows)
    instances = {d.process_guid: d.instances for d in desired}
    present = {cell_id for cell_id, cell in cells.items() if cell.present(now)}
    # UNCLAIMED and auctioned after this: not stale yet, and known to be in flight.
    fresh_since = max(now - config.stale_unclaimed, config.in_flight_since)
    doubled = {(r.process_guid, r.index) for r in rows if r.presence != ORDINARY}
    settled = Settled()
    indices, states = settled.indices, settled.states
    rest: list[ActualRecord] = []
    for row in rows:
        state = row.state
        if (
            row.presence == ORDINARY
            and row.index < instances.get(row.process_guid, 0)
            and (
                ((state == RUNNING or state == CLAIMED) and row.cell_id in present)
                or (state == UNCLAIMED and max(row.since, row.auctioned_at) > fresh_since
                    and not (row.placement_error and row.auctioned_at < config.cell_appeared_at))
            )
            and (not doubled or (row.process_guid, row.index) not in doubled)
        ):
            held = indices.get(row.process_guid)
            if held is None:
                held = indices[row.process_guid] = set()
            held.add(row.index)
            states[state] = states.get(state, 0) + 1
        else:
            rest.append(row)
    return settled, rest


@dataclass(slots=True)
class _Waits:
    """What keeps an instance from being placed again this pass: its cell's loss under `keep-replicas`
    (bbs/cell_loss.py), or a late claim of the present cell that accepted it (bbs/placements.py)."""

    wanted: dict[str, DesiredSize | DesiredRecord]
    cells: dict[str, CellRecord]
    present: set[str]
    probes: Mapping[str, Probe]
    placements: PlacementLog | None
    now: float
    config: ConvergenceConfig
    out: ConvergenceActions
    kept: set[tuple[str, int]] = field(default_factory=set)  # suspects kept without a replacement

    def keep_on_lost_cell(self, row: ActualRecord) -> bool:
        """Whether `row`, on a cell that is not present, stays without a replacement for now."""
        d = self.wanted.get(row.process_guid)
        if d is None:
            return False
        keep = keep_on_cell_loss(d.on_cell_loss, d.instances, self.cells.get(row.cell_id),
                                 self.probes.get(row.cell_id), self.now, self.config.cell_loss)
        if keep is None:
            return False
        if keep.probe:
            self.out.probe_cells.add(row.cell_id)
        if keep.due is not None:
            self.out.due_at(keep.due)
        self.kept.add((row.process_guid, row.index))
        return True

    def claim_awaited(self, row: ActualRecord) -> bool:
        """Whether a stale UNCLAIMED `row` waits for the claim of the present cell that accepted it."""
        placement = self.placements.instance(row.process_guid, row.index) if self.placements else None
        if not self._current(placement, row.auctioned_at):
            return False
        probe = self.probes.get(placement.cell_id)
        held = probe is not None and probe.lrps is not None and (row.process_guid, row.index) in probe.lrps
        return self._wait(placement, probe, held)

    def task_claim_awaited(self, task: TaskRecord) -> bool:
        placement = self.placements.task(task.task_guid) if self.placements else None
        if not self._current(placement, task.auctioned_at):
            return False
        probe = self.probes.get(placement.cell_id)
        return self._wait(placement, probe, probe is not None and task.task_guid in probe.tasks)

    def _current(self, placement: Placement | None, auctioned_at: float) -> TypeGuard[Placement]:
        """A placement of the work's latest auction, on a cell that is present."""
        return (placement is not None and placement.placed_at >= auctioned_at
                and placement.cell_id in self.present)

    def _wait(self, placement: Placement, probe: Probe | None, held: bool) -> bool:
        wait = wait_for_claim(placement, probe, held, self.now, self.config.stale_unclaimed)
        if wait is not None and wait.probe:
            self.out.probe_cells.add(placement.cell_id)
        return wait is not None


def converge(
    desired: Iterable[DesiredSize | DesiredRecord],
    actuals: ActualSet,
    tasks: Iterable[TaskRecord],
    cells: dict[str, CellRecord],
    now: float,
    config: ConvergenceConfig,
    holdings: dict[str, set[str]] | None = None,
    settled: Settled | None = None,
    probes: Mapping[str, Probe] | None = None,
    placements: PlacementLog | None = None,
) -> ConvergenceActions:
    """Decide one pass. `actuals` is edited in place: its `diff()` is the actual LRP part.

    `holdings`: for cells that came back while holding suspect instances, the instance guids each
    one reports holding (see `returning_cells`). A suspect is promoted back only if its cell still
    holds it (a rep that restarted lost its instances); a cell missing from `holdings` is undecided
    this pass. None: trust every returning cell (no state was fetched).

    `settled`: instances set aside by `settle`, not in `actuals`; the decisions are the same as with
    them in it.

    `probes`: the latest answer of each cell asked what it holds (bbs/cell_probes.py); the cells to ask
    are in the actions' `probe_cells`. `placements`: which cells accepted which work (bbs/placements.py)."""
    out = ConvergenceActions()
    wanted = {d.process_guid: d for d in desired}
    present = {cell_id for cell_id, cell in cells.items() if cell.present(now)}
    settled = settled if settled is not None else Settled()
    waits = _Waits(wanted, cells, present, probes or {}, placements, now, config, out)

    # Extra instances first, then the evacuating/suspect ones, then ORDINARY ones: a suspect promoted
    # back replaces its ORDINARY replacement before that replacement would be re-auctioned.
    for row in actuals:
        d = wanted.get(row.process_guid)
        if (d is None or row.index >= d.instances) and row.domain not in config.stale_domains:
            actuals.remove(row)
            out.stop(row)
    for row in actuals:
        if row.presence == SUSPECT:
            _converge_suspect(actuals, row, present, holdings, out, waits)
        elif row.presence == EVACUATING:
            _converge_evacuating(actuals, row, present, out)
    for row in actuals:
        if row.presence == ORDINARY and actuals.get(row.process_guid, row.index) is row:
            _converge_ordinary(actuals, row, present, now, config, out, waits)
    kept = waits.kept
    for d in wanted.values():
        held = settled.indices.get(d.process_guid, ())
        if len(held) == d.instances:
            continue  # every index settled
        for index in range(d.instances):
            if index not in held and actuals.get(d.process_guid, index) is None:
                if kept and (d.process_guid, index) in kept:
                    continue  # a suspect on a lost cell, kept there without a replacement
                actuals.put(unclaimed(d.process_guid, index, d.domain, now))
                out.start(d.process_guid, index)

    history: list[TaskRecord] = []
    for task in tasks:
        _converge_task(task, present, now, config, out, waits)
        if task.state in (COMPLETED, RESOLVING) and not task.callback_url:
            history.append(task)
    _bound_history(history, config, out)
    for cell in cells.values():
        if cell.cell_id in present:
            continue
        if now - cell.expires_at >= config.forget_cell_after:
            out.cells_forgotten.append(cell)
        elif not cell.disappeared:
            out.cells_disappeared.append(dataclasses.replace(cell, disappeared=True))
    return out


def returning_cells(
    actuals: Iterable[ActualRecord], cells: dict[str, CellRecord], now: float
) -> list[CellRecord]:
    """Present cells holding SUSPECT instances: whose holdings a pass should ask for."""
    ids = {r.cell_id for r in actuals if r.presence == SUSPECT}
    return [cells[i] for i in sorted(ids) if i in cells and cells[i].present(now)]


def _converge_suspect(
    actuals: ActualSet,
    row: ActualRecord,
    present: set[str],
    holdings: dict[str, set[str]] | None,
    out: ConvergenceActions,
    waits: _Waits,
) -> None:
    ordinary = actuals.get(row.process_guid, row.index)
    replacement_runs = ordinary is not None and ordinary.state == RUNNING
    if row.cell_id in present and not replacement_runs and holdings is not None:
        held = holdings.get(row.cell_id)
        if held is None:
            return  # its cell's holdings are unknown this pass: decide next time
        if row.instance_guid not in held:
            actuals.remove(row)  # the cell is back without it (its rep restarted): keep the replacement
            return
    if row.cell_id in present and not replacement_runs:
        # Its cell heartbeats again before the replacement ran: keep the original, drop the replacement.
        if ordinary is not None:
            actuals.remove(ordinary)
            out.stop(ordinary)
        actuals.replace(row, changed(row, presence=ORDINARY))
    elif replacement_runs:
        actuals.remove(row)
        out.stop(row)  # if its rep is reachable at all, it stops the now redundant instance
    elif ordinary is None and not waits.keep_on_lost_cell(row):
        # Kept without a replacement (keep-replicas) until now: its cell is lost, or its LRP's policy changed.
        replacement = unclaimed(row.process_guid, row.index, row.domain, waits.now)
        actuals.put(dataclasses.replace(replacement, crash_count=row.crash_count))
        out.start(row.process_guid, row.index)


def _converge_evacuating(
    actuals: ActualSet, row: ActualRecord, present: set[str], out: ConvergenceActions
) -> None:
    ordinary = actuals.get(row.process_guid, row.index)
    if row.cell_id not in present:
        actuals.remove(row)  # the evacuating cell is gone, and its instance with it
    elif ordinary is not None and ordinary.state == RUNNING:
        actuals.remove(row)
        out.stop(row)


def _converge_ordinary(
    actuals: ActualSet,
    row: ActualRecord,
    present: set[str],
    now: float,
    config: ConvergenceConfig,
    out: ConvergenceActions,
    waits: _Waits,
) -> None:
    if row.state == UNCLAIMED:
        stamp = max(row.since, row.auctioned_at)
        if ((now - stamp >= config.stale_unclaimed or stamp < config.in_flight_since
             or (row.placement_error and row.auctioned_at < config.cell_appeared_at))
                and not waits.claim_awaited(row)):
            actuals.replace(row, dataclasses.replace(row, auctioned_at=now))  # internal: no new tag
            out.start(row.process_guid, row.index)
    elif row.state == CRASHED:
        if config.policy.should_restart(row.crash_count, row.since, now):
            actuals.replace(row, reset_to_unclaimed(row, now, crash_reason=row.crash_reason))
            out.start(row.process_guid, row.index)
        elif (wait := config.policy.backoff(row.crash_count)) is not None:
            out.due_at(row.since + wait)
    elif row.cell_id not in present:  # CLAIMED or RUNNING on a cell whose presence expired
        if actuals.other(row.process_guid, row.index) is None:
            actuals.replace(row, changed(row, presence=SUSPECT))
            if waits.keep_on_lost_cell(row):
                return  # keep-replicas: no replacement for now
            replacement = unclaimed(row.process_guid, row.index, row.domain, now)
            actuals.put(dataclasses.replace(replacement, crash_count=row.crash_count))
        else:
            # Already one evacuating/suspect instance for this index (at most one other): just re-place.
            actuals.replace(row, reset_to_unclaimed(row, now))
        out.start(row.process_guid, row.index)


def _converge_task(
    task: TaskRecord,
    present: set[str],
    now: float,
    config: ConvergenceConfig,
    out: ConvergenceActions,
    waits: _Waits,
) -> None:
    if task.state == PENDING:
        if now - task.created_at >= config.expire_pending_task:
            _fail(task, NOT_STARTED_IN_TIME, now, out)
        elif ((now - task.auctioned_at >= config.kick_task or task.auctioned_at < config.in_flight_since)
              and not waits.task_claim_awaited(task)):
            kicked = dataclasses.replace(task, auctioned_at=now)
            out.task_updates.append(kicked)
            out.tasks_to_kick.append(kicked)
    elif task.state == TASK_RUNNING:
        if task.cell_id not in present:
            _fail(task, CELL_DISAPPEARED, now, out)
    elif task.state in (COMPLETED, RESOLVING):
        # Diego's semantics for a task with a callback: resolved (deleted) once the callback got through,
        # forgotten after expire_completed_task if it never does. Without one: kept as history.
        keep = config.expire_completed_task if task.callback_url else config.task_retention
        if now - _finished_at(task) >= keep:
            out.task_deletes.append(task)
        elif task.callback_url and now - task.auctioned_at >= config.kick_task:
            retried = dataclasses.replace(task, auctioned_at=now)
            out.task_updates.append(retried)
            out.callbacks.append(retried)


def _finished_at(task: TaskRecord) -> float:
    return task.first_completed_at if task.first_completed_at is not None else task.updated_at


def _bound_history(history: list[TaskRecord], config: ConvergenceConfig, out: ConvergenceActions) -> None:
    """At most `max_completed_tasks` completed tasks without a callback are kept: the oldest beyond go."""
    deleted = {t.task_guid for t in out.task_deletes}
    kept = [t for t in history if t.task_guid not in deleted]
    excess = len(kept) - config.max_completed_tasks
    if excess > 0:
        kept.sort(key=lambda t: (_finished_at(t), t.task_guid))
        out.task_deletes.extend(kept[:excess])


def _fail(task: TaskRecord, reason: str, now: float, out: ConvergenceActions) -> None:
    failed = completed(task, now, failed=True, failure_reason=reason)
    out.task_updates.append(failed)
    out.tasks_failed.append(failed)
    if task.callback_url:
        out.callbacks.append(failed)


def resize(desired: DesiredRecord, actuals: ActualSet, now: float) -> ConvergenceActions:
    """Scale one desired LRP to `desired.instances`: the index part of a pass, for one LRP at once.

    New indices become UNCLAIMED and are auctioned; every instance at or above the new count is
    removed (an UNCLAIMED one simply disappears) and stopped on its cell.
    """
    out = ConvergenceActions()
    for row in actuals:
        if row.process_guid == desired.process_guid and row.index >= desired.instances:
            actuals.remove(row)
            out.stop(row)
    for index in range(desired.instances):
        if actuals.get(desired.process_guid, index) is None:
            actuals.put(unclaimed(desired.process_guid, index, desired.domain, now))
            out.start(desired.process_guid, index)
    return out


def evacuate(actuals: ActualSet, cell_id: str, now: float) -> dict[str, set[int]]:
    """A cell says it is evacuating: each RUNNING ORDINARY instance on it becomes EVACUATING and gets
    an ORDINARY UNCLAIMED replacement to auction (the original keeps serving until that one runs).
    Returns the starts. Idempotent: a second heartbeat finds nothing left to convert."""
    starts: dict[str, set[int]] = {}
    for row in actuals:
        if row.cell_id != cell_id or row.presence != ORDINARY or row.state != RUNNING:
            continue
        if actuals.other(row.process_guid, row.index) is not None:
            continue  # at most one other per index; it stays ORDINARY until its cell stops it
        actuals.replace(row, changed(row, presence=EVACUATING))
        replacement = unclaimed(row.process_guid, row.index, row.domain, now)
        actuals.put(dataclasses.replace(replacement, crash_count=row.crash_count))
        starts.setdefault(row.process_guid, set()).add(row.index)
    return starts


def undrain(actuals: ActualSet, cell_id: str, now: float) -> dict[str, set[int]]:
    """An operator ends a cell's drain (uncordon): each instance still EVACUATING there whose replacement is
    not placed yet (UNCLAIMED: no room elsewhere, or its auction still pending) is the index's instance
    again, and the replacement is dropped. One whose replacement a cell already claimed is left to finish
    the move. Returns no starts."""
    for row in actuals:
        if row.cell_id != cell_id or row.presence != EVACUATING:
            continue
        replacement = actuals.get(row.process_guid, row.index)
        if replacement is not None and replacement.state != UNCLAIMED:
            continue
        if replacement is not None:
            actuals.remove(replacement)
        actuals.replace(row, changed(row, presence=ORDINARY))
    return {}


def forget_rebooted_cell(actuals: ActualSet, cell_id: str, now: float) -> dict[str, set[int]]:
    """A cell heartbeats with a new boot id: its rep restarted and holds nothing it held before.

    Its ORDINARY instances go back to UNCLAIMED to be placed again at once (waiting for the presence
    to expire would wait forever: the cell keeps heartbeating); its EVACUATING and SUSPECT records are
    dropped, their replacements already placed. Returns the starts.
    """
    starts: dict[str, set[int]] = {}
    for row in actuals:
        if row.cell_id != cell_id:
            continue
        if row.presence != ORDINARY:
            actuals.remove(row)
        elif row.state in (CLAIMED, RUNNING):
            actuals.replace(row, reset_to_unclaimed(row, now))
            starts.setdefault(row.process_guid, set()).add(row.index)
    return starts


def fail_tasks_of_rebooted_cells(running: Iterable[TaskRecord], cell_ids: Collection[str],
                                 now: float) -> list[TaskRecord]:
    """Cells that heartbeat with a new boot id: their reps restarted and run none of the tasks they ran
    (a restarted rep kills what its cgroups held). Those RUNNING there fail, as Diego's rep fails a task
    whose container is gone: never started again, a task may have done part of its work. Waiting would
    wait forever: the cell is present, so the `CELL_DISAPPEARED` rule never fires."""
    return [completed(t, now, failed=True, failure_reason=CELL_RESTARTED)
            for t in running if t.state == TASK_RUNNING and t.cell_id in cell_ids]


# --- applying a pass decided on a snapshot ----------------------------------------------------------
#
# A pass reads everything outside the write lock (a consistent snapshot, without holding up the
# reps' lifecycle reports), decides, and then, in the write transaction, keeps only the decisions
# whose rows nobody changed meanwhile. Whatever it drops, the next pass decides again.


def _fingerprints(rows: Iterable[ActualRecord]) -> dict[tuple[str, int], frozenset[tuple[Any, ...]]]:
    grouped: dict[tuple[str, int], set[tuple[Any, ...]]] = {}
    for r in rows:
        grouped.setdefault((r.process_guid, r.index), set()).add(
            (r.presence, r.state, r.mod_epoch, r.mod_index, r.auctioned_at)
        )
    return {key: frozenset(value) for key, value in grouped.items()}


def touched_indices(changes: ActualChanges, actions: ConvergenceActions) -> set[tuple[str, int]]:
    keys = {(r.process_guid, r.index) for r in (*changes.deletes, *changes.updates, *changes.inserts)}
    keys.update((s.process_guid, s.index) for s in actions.stops)
    keys.update((pg, i) for pg, indices in actions.starts.items() for i in indices)
    return keys


def drop_stale(
    changes: ActualChanges,
    actions: ConvergenceActions,
    snapshot: Iterable[ActualRecord],
    current: Iterable[ActualRecord],
    still_desired: set[str],
    tasks_snapshot: dict[str, TaskRecord],
    tasks_current: dict[str, TaskRecord],
    cells_current: dict[str, CellRecord],
) -> ActualChanges:
    """Keep the decisions about (process_guid, index) groups, tasks and cells that are unchanged
    since the snapshot; returns the actual LRP changes to write and trims `actions` in place."""
    before, now = _fingerprints(snapshot), _fingerprints(current)

    def fresh(process_guid: str, index: int) -> bool:
        return before.get((process_guid, index)) == now.get((process_guid, index))

    def keep(rows: list[ActualRecord], *, need_desired: bool = False) -> list[ActualRecord]:
        return [
            r
            for r in rows
            if fresh(r.process_guid, r.index) and (not need_desired or r.process_guid in still_desired)
        ]

    kept = ActualChanges(
        deletes=keep(changes.deletes),
        updates=keep(changes.updates),
        inserts=keep(changes.inserts, need_desired=True),
        visible_updates=keep(changes.visible_updates),
        previous=changes.previous,
    )
    starts = {
        pg: {i for i in indices if fresh(pg, i)}
        for pg, indices in actions.starts.items()
        if pg in still_desired
    }
    actions.starts = {pg: indices for pg, indices in starts.items() if indices}
    actions.stops = [s for s in actions.stops if fresh(s.process_guid, s.index)]

    def task_fresh(task: TaskRecord) -> bool:
        return tasks_snapshot.get(task.task_guid) == tasks_current.get(task.task_guid)

    actions.task_updates = [t for t in actions.task_updates if task_fresh(t)]
    actions.task_deletes = [t for t in actions.task_deletes if task_fresh(t)]
    actions.tasks_to_kick = [t for t in actions.tasks_to_kick if task_fresh(t)]
    actions.tasks_failed = [t for t in actions.tasks_failed if task_fresh(t)]
    actions.callbacks = [t for t in actions.callbacks if task_fresh(t)]

    def cell_unchanged(cell_id: str, expires_at: float) -> bool:
        current_cell = cells_current.get(cell_id)
        return current_cell is not None and current_cell.expires_at == expires_at

    actions.cells_disappeared = [
        c for c in actions.cells_disappeared if cell_unchanged(c.cell_id, c.expires_at)
    ]
    actions.cells_forgotten = [c for c in actions.cells_forgotten if cell_unchanged(c.cell_id, c.expires_at)]
    return kept
