"""Convergence: one pass of a BBS reads a snapshot, decides (bbs.convergence.converge, pure), applies
what is still valid in one write transaction, then sends the auctions, stops and events. Its state
between passes (the leader's) is here too: what cells were asked what they hold (probes), and the
auctioneer's reports of what they accepted (the placement log).

The snapshot is read without the write lock, so a pass over 10,000 instances does not hold up the
reps' lifecycle reports; the write keeps only the decisions about rows nobody changed meanwhile
(convergence.drop_stale), and the next pass decides the rest again.

In flight: an UNCLAIMED instance (a PENDING task) auctioned lately is taken to be on its way, in the
auctioneer's batch or a rep's claims, and left alone until `--stale-unclaimed`. What is on its way is known
only by the processes that hold it, so the leader keeps one mark, `in_flight_since`: what was auctioned
before it is not known to be in flight and is auctioned again at once (unless a present cell accepted it:
bbs/placements.py). The mark moves to now when the leader takes the convergence lease (a fresh process knows
of nothing in flight), when the auctioneer lease changes hands (the old holder's batch may be lost), when
start requests could not be delivered (no auctioneer answered any try: `Outbound.auction_lost_at`) and
when a cell heartbeats with a new boot id (its rep lost what it had accepted and not claimed). A cell
that appears or comes back moves another mark, `cell_appeared_at`: what an auction found no room for
before it (its placement error says so: not in flight) is auctioned again at once. A duplicate
auction costs a claim the BBS refuses; waiting costs 30 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping

from ..actual_set import ActualChanges, ActualSet
from ..cell_probes import CellProbes, Probe
from ..convergence import (
    ConvergenceActions,
    ConvergenceConfig,
    Settled,
    converge,
    drop_stale,
    returning_cells,
    settle,
    touched_indices,
)
from ..diego_counts import PassCounts, count_pass, extra_instances, tasks_after
from ..events import event
from ..placements import PlacementLog, Report, parse_all, prune
from ..records import (
    ORDINARY,
    PENDING,
    SUSPECT,
    UNCLAIMED,
    ActualRecord,
    CellRecord,
    DesiredRecord,
    DesiredSize,
    TaskRecord,
)
from ..unit_of_work import Effects, UnitOfWork

log = logging.getLogger("bbs.convergence")

AUCTIONEER_LEASE = "auctioneer"


class Convergence:
    """Passes of this BBS (the convergence lease holder's: bbs/converger.py runs them)."""

    def __init__(self, uow: UnitOfWork, config: ConvergenceConfig) -> None:
        self.uow = uow
        self.config = config
        self.probes = CellProbes(uow.outbound.cell_detail, uow.settings.cell_loss_check,
                                 on_done=lambda: uow.on_wake())
        self.placement_log = PlacementLog()
        self.in_flight_since = 0.0  # see "In flight" above
        self.cell_appeared_at = 0.0
        self.took_over_at = 0.0
        self._boots: dict[str, str] | None = None  # each cell's boot id, as this leader last saw it
        self._auctioneer_token: int | None = None  # the auctioneer lease's token, as last seen
        self._present: set[str] | None = None  # the cells present at the last pass

    def took_over(self, now: float) -> None:
        """This process has just taken the convergence lease: it knows of nothing in flight."""
        self.in_flight_since = self.took_over_at = now
        self._boots, self._auctioneer_token, self._present = None, None, None

    def heard(self, cells: dict[str, CellRecord], now: float) -> dict[str, CellRecord]:
        """The cells as this pass may judge them. A BBS that has just taken over has not heard the cells'
        heartbeats yet (they failed while no BBS served, or went to the previous leader): a cell not already
        known gone counts as present until one presence TTL after the takeover, as long as a live rep needs
        to reach this BBS, so that a BBS restart never marks the instances of live cells SUSPECT."""
        until = self.took_over_at + self.uow.settings.presence_ttl
        if now >= until:
            return cells
        return {cell_id: (dataclasses.replace(cell, expires_at=until)
                          if not cell.disappeared and cell.expires_at < until else cell)
                for cell_id, cell in cells.items()}

    def notice(self, cells: Mapping[str, CellRecord], auctioneer_token: int | None, now: float) -> None:
        """Move the in-flight mark to now when the auctioneer lease changed hands, start requests were not
        delivered or a cell's rep restarted since the last pass."""
        boots = {cell_id: cell.boot_id for cell_id, cell in cells.items()}
        rebooted = self._boots is not None and any(
            boot and self._boots.get(cell_id, boot) != boot for cell_id, boot in boots.items()
        )
        handed_over = (self._auctioneer_token is not None and auctioneer_token is not None
                       and auctioneer_token != self._auctioneer_token)
        lost = self.uow.outbound.auction_lost_at > self.in_flight_since
        # A cell (re)appeared: what an auction could not place meanwhile (a BBS down longer than the
        # presence TTL comes back to no present cell) may fit now.
        present = {cell_id for cell_id, cell in cells.items() if cell.present(now)}
        if self._present is not None and not present <= self._present:
            self.cell_appeared_at = now
        self._present = present
        if rebooted or handed_over or lost:
            self.in_flight_since = now
            log.info("work in flight may be lost: auctioning what is UNCLAIMED at once",
                     extra={"data": {"cell_restarted": rebooted, "auctioneer_changed": handed_over,
                                     "start_requests_undelivered": lost}})
        self._boots = boots
        if auctioneer_token is not None:
            self._auctioneer_token = auctioneer_token

    def pass_config(self) -> ConvergenceConfig:
        if self.in_flight_since <= 0 and self.cell_appeared_at <= 0:
            return self.config
        return dataclasses.replace(self.config, in_flight_since=self.in_flight_since,
                                   cell_appeared_at=self.cell_appeared_at)

    async def run_pass(self, now: float | None = None) -> float | None:
        """One convergence pass; when the next one is due at the latest (see converge_once)."""
        return await converge_once(self, now)


async def converge_once(conv: Convergence, now: float | None = None) -> float | None:
    """One convergence pass. Returns when the next one is due at the latest: the earliest cell
    presence expiry or crash backoff end (None: nothing pending, the timer decides).

    Decided on a snapshot read without the write lock; applied in one write transaction that
    keeps only the decisions about rows nobody changed meanwhile (see convergence.drop_stale)."""
    now = time.time() if now is None else now
    uow, placed, probes = conv.uow, conv.placement_log, conv.probes
    async with uow.read() as tx:
        snapshot = await tx.all_actuals()  # first: see Tx.all_actuals
        counted = await tx.count_actuals()
        # Only cells holding SUSPECT instances can be returning ones: skip looking through every row
        # for them when the counts (in memory, usually) say there are none.
        suspects = any(n for _, presence, n in counted if presence == SUSPECT)
        desired = await tx.desired_sizes()  # definitions are read below, for the LRPs to start
        tasks = await tx.list_tasks()
        cells = conv.heard({c.cell_id: c for c in await tx.list_cells()}, now)
        auctioneer = await tx.lease(AUCTIONEER_LEASE)
        domains = await tx.list_domains()
        # The auctioneer's reports of what cells accepted (bbs/placements.py): their ids and times each
        # pass, a new one's contents once. Those older than the staleness limit are done with when nothing
        # is UNCLAIMED or PENDING (they go whole, unread); else they are taken apart, once, and what they
        # name is looked up.
        fetch = placed.sync(await tx.placement_times())
        if fetch:
            placed.add(await tx.placements_by_id(fetch))
        due = placed.due(now, conv.config.stale_unclaimed)
        waiting = any(
            n for state, presence, n in counted if state == UNCLAIMED and presence == ORDINARY
        ) or any(t.state == PENDING for t in tasks)
        due_rows: list[ActualRecord] = []
        if due and waiting:
            await asyncio.to_thread(parse_all, due)
            due_keys = {key for report in due for key in (report.lrps or ())}
            due_rows = await tx.actuals_for_keys(due_keys) if due_keys else []
    conv.notice(cells, auctioneer.token if auctioneer is not None else None, now)
    config = conv.pass_config()
    stale = frozenset(name for name, until in domains.items() if until is not None and until <= now)
    if stale:
        config = dataclasses.replace(config, stale_domains=stale)
    returning = returning_cells(snapshot, cells, now) if suspects else []
    # What the returning cells still hold, asked of each rep process once (a sim host's cells return
    # together).
    holdings = await uow.outbound.cells_instances(returning) if returning else {}
    probes.keep_only(cells)
    # The pure decision runs in a worker thread: on 10,000 instances it is CPU work the event loop
    # (heartbeats, reports) should not wait for. The snapshot is this pass's own data.
    actions, changes, counts, resolved, diego_counts = await asyncio.to_thread(
        _decide, desired, snapshot, tasks, cells, now, config, holdings, probes.latest(), placed,
        due if waiting else [], due_rows,
    )
    if not waiting:
        resolved = [report.id for report in due]
    probes.request(cells[cell_id] for cell_id in sorted(actions.probe_cells) if cell_id in cells)
    # Not UnitOfWork.write: a pass writes only when it changed something, yet its sends (kicked tasks,
    # callbacks retried) go either way; the effects run once, after the write if there is one.
    effects = Effects()
    touched = touched_indices(changes, actions)  # every start among them
    desired_now: dict[str, DesiredRecord] = {}
    touched_tasks = {t.task_guid for t in (*actions.task_updates, *actions.task_deletes)}
    touched_cells = [c.cell_id for c in (*actions.cells_disappeared, *actions.cells_forgotten)]
    if resolved:
        for report_id in resolved:  # every claim of these is in: forgotten here, deleted below
            del placed.reports[report_id]
    if touched or touched_tasks or touched_cells or resolved:
        async with uow.store.write() as tx:
            current = await tx.actuals_for_keys(touched) if touched else []
            desired_now = await tx.desired_by_guid({pg for pg, _ in touched})
            tasks_current = await tx.tasks_by_guid(touched_tasks) if touched_tasks else {}
            cells_current = await tx.cells_by_id(touched_cells) if touched_cells else {}
            changes = drop_stale(
                changes,
                actions,
                [r for r in snapshot if (r.process_guid, r.index) in touched],
                current,
                set(desired_now),
                {t.task_guid: t for t in tasks if t.task_guid in touched_tasks},
                tasks_current,
                cells_current,
            )
            await tx.apply_actual_changes(changes)
            await tx.update_tasks(actions.task_updates)
            await tx.delete_tasks(t.task_guid for t in actions.task_deletes)
            await tx.mark_cells_disappeared(c.cell_id for c in actions.cells_disappeared)
            await tx.delete_cells(c.cell_id for c in actions.cells_forgotten)
            await tx.delete_placements(resolved)
            await uow.add_stops(tx, actions.stops, effects)
    for process_guid, indices in actions.starts.items():
        d = desired_now.get(process_guid)
        if d is not None:
            effects.lrp_starts.append({"desired": d.to_wire(), "indices": sorted(indices)})
    effects.task_starts.extend({"task": task.to_wire()} for task in actions.tasks_to_kick)
    effects.callbacks.extend(actions.callbacks)
    effects.tasks_completed.extend(actions.tasks_failed)
    for cell in actions.cells_disappeared:
        effects.cell_changed(now, "lost", cell.cell_id)
    effects.actual_events(changes)
    effects.events.append(
        lambda: [
            *(event("task_changed", t.to_wire(), now) for t in actions.tasks_failed),
            *(event("task_removed", t.to_wire(), now) for t in actions.task_deletes),
            *(event("cell_disappeared", c.to_wire(), now) for c in actions.cells_disappeared),
        ]
    )
    uow.metrics.set_actual_counts(counts)
    uow.metrics.diego.counted(diego_counts)
    if changes or actions.starts or actions.stops or actions.task_updates or actions.cells_disappeared:
        log.info(
            "convergence pass",
            extra={
                "data": {
                    "deleted": len(changes.deletes),
                    "updated": len(changes.visible_updates),
                    "created": len(changes.inserts),
                    "auction_lrps": sum(len(i) for i in actions.starts.values()),
                    "kick_tasks": len(actions.tasks_to_kick),
                    "stops": len(actions.stops),
                    "cells_disappeared": [c.cell_id for c in actions.cells_disappeared],
                }
            },
        )
    uow.run_effects(effects)
    gone = {c.cell_id for c in (*actions.cells_disappeared, *actions.cells_forgotten)}
    pending = [c.expires_at for c in cells.values() if not c.disappeared and c.cell_id not in gone]
    if actions.next_restart_at is not None:
        pending.append(actions.next_restart_at)
    return min(pending, default=None)


def _decide(
    desired: list[DesiredSize],
    snapshot: list[ActualRecord],
    tasks: list[TaskRecord],
    cells: dict[str, CellRecord],
    now: float,
    config: ConvergenceConfig,
    holdings: dict[str, set[str]],
    probes: Mapping[str, Probe],
    placements: PlacementLog,
    due: list[Report],
    due_rows: list[ActualRecord],
) -> tuple[ConvergenceActions, ActualChanges, list[tuple[str, str, int]], list[int], PassCounts]:
    """The pass's decisions, which of the `due` placement reports (taken apart) have every claim in
    (to delete), and what it counts for Diego's metrics."""
    resolved: list[int] = []
    if due:
        present = {cell_id for cell_id, cell in cells.items() if cell.present(now)}
        rows = {(r.process_guid, r.index): r for r in due_rows if r.presence == ORDINARY}
        by_guid = {t.task_guid: t for t in tasks} if any(report.tasks for report in due) else {}
        for report in due:
            prune(report, rows, by_guid, present)
            if not report.waiting:
                resolved.append(report.id)
    settled, rest = settle(desired, snapshot, cells, now, config)
    actuals = ActualSet(rest)
    extra = extra_instances(desired, rest)
    actions = converge(desired, actuals, tasks, cells, now, config, holdings, settled, probes, placements)
    counts = _count(actuals, settled)
    diego = count_pass(desired, {(state, presence): n for state, presence, n in counts}, actuals, extra,
                       tasks_after(tasks, actions.task_updates, actions.task_deletes), cells.values(), now)
    return actions, actuals.diff(), counts, resolved, diego


def _count(actuals: ActualSet, settled: Settled) -> list[tuple[str, str, int]]:
    """(state, presence, instances) after the pass: the settled ones and the decided ones."""
    counts: dict[tuple[str, str], int] = {(state, ORDINARY): n for state, n in settled.states.items()}
    for row in actuals:
        counts[(row.state, row.presence)] = counts.get((row.state, row.presence), 0) + 1
    return [(state, presence, n) for (state, presence), n in counts.items()]
