"""One unit of work of the BBS: a write transaction, then — only once it committed — its side effects
(events, auctions, stops, task cancels and completion callbacks, convergence wake-ups), and the one
auctioneer-lease fence check.

Every operation module (bbs/operations/) depends on this and nothing bigger: an operation reads rows,
decides with pure functions, writes the net changes, and lists what to do after commit in `Effects`;
`UnitOfWork.write` commits and then runs them. Effects never run for a transaction that rolled back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.urls import resolved_refusal

from .actual_set import ActualChanges
from .app_history import AppHistory
from .errors import Fenced
from .events import EventHub, event
from .lifecycle import Stop
from .metrics import BBSMetrics
from .outbound import Outbound
from .recent_past import CELL_EVENT_TYPES, ClusterRing
from .records import AUCTIONEER_LEASE, COMPLETED, RESOLVING, CellRecord, DesiredRecord, TaskRecord
from .redact import masked_env
from .settings import BBSSettings
from .store import Store, Tx

log = logging.getLogger("bbs.unit_of_work")


class ConvergenceLeaseHolder(Protocol):
    """What the operations may ask of the convergence loop (bbs/converger.py): whether it leads."""

    token: int | None  # the convergence lease's fencing token while this process holds it

    def serving_at(self, url: str) -> None: ...  # where this BBS serves, once bound


@dataclass(slots=True)
class Effects:
    """What to do once a transaction committed."""

    events: list[Callable[[], list[dict[str, Any]]]] = field(default_factory=list)  # built lazily
    lrp_starts: list[dict[str, Any]] = field(default_factory=list)
    task_starts: list[dict[str, Any]] = field(default_factory=list)
    # (cell, process_guid, instance_guid)
    stops: list[tuple[CellRecord, str, str]] = field(default_factory=list)
    cancels: list[tuple[CellRecord, str]] = field(default_factory=list)  # (cell, task_guid)
    callbacks: list[TaskRecord] = field(default_factory=list)
    wake_convergence: bool = False
    pass_due: float | None = None  # epoch seconds: a convergence pass is needed then
    # What each app's story keeps (bbs/app_history.py), recorded whether anyone listens or not.
    actual_changes: list[ActualChanges] = field(default_factory=list)
    rollouts: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    # The cluster's rare events the recent read keeps whoever listens (bbs/recent_past.py): a cell's
    # (at, kind, cell_id) and the tasks that completed.
    cell_changes: list[tuple[float, str, str]] = field(default_factory=list)
    tasks_completed: list[TaskRecord] = field(default_factory=list)

    def actual_events(self, changes: ActualChanges) -> None:
        if changes:
            self.events.append(lambda: actual_change_events(changes))
            self.actual_changes.append(changes)

    def cell_changed(self, at: float, kind: str, cell_id: str) -> None:
        self.cell_changes.append((at, kind, cell_id))

    def rollout_changed(self, wire: dict[str, Any], now: float) -> None:
        self.events.append(lambda: [event("rollout_changed", wire, now)])
        self.rollouts.append((wire, now))


def actual_change_events(changes: ActualChanges) -> list[dict[str, Any]]:
    now = time.time()  # one commit, one time: formatted once (records.iso caches), not once per event
    return [
        *(event("actual_lrp_removed", r.to_wire(), now) for r in changes.deletes),
        *(event("actual_lrp_changed", r.to_wire(), now) for r in changes.visible_updates),
        *(event("actual_lrp_created", r.to_wire(), now) for r in changes.inserts),
    ]


class UnitOfWork:
    """The store, what is sent after commit (outbound, events), and the convergence loop's hooks."""

    def __init__(
        self, settings: BBSSettings, store: Store, outbound: Outbound, hub: EventHub, metrics: BBSMetrics
    ) -> None:
        self.settings = settings
        self.store = store
        self.outbound = outbound
        self.hub = hub
        self.metrics = metrics
        self.on_wake: Callable[[], None] = lambda: None  # set by the converger
        self.on_due: Callable[[float], None] = lambda when: None  # set by the converger
        self.converger: ConvergenceLeaseHolder | None = None  # the Converger driving this BBS, if any
        self.history = AppHistory()  # each app's last events: its story (`vendue app`)
        self.cluster = ClusterRing()  # the cluster's last rare events (GET /v1/events/recent)

    @asynccontextmanager
    async def write(
        self, effects: Effects | None = None, *, urgent: bool = False
    ) -> AsyncIterator[tuple[Tx, Effects]]:
        """A write transaction and the effects to run once it committed (none if it raised). `urgent`:
        ahead of queued bulk writes (heartbeats, leases: deadline-bound)."""
        effects = Effects() if effects is None else effects
        async with self.store.write(urgent=urgent) as tx:
            yield tx, effects
        self.run_effects(effects)

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """A read transaction (no effects)."""
        return self.store.read()

    async def fence(self, tx: Tx, fencing_token: int, writes: str) -> None:
        """Refuse (Fenced, counted under `writes` in vendue_bbs_stale_writes_total) a report from an
        auctioneer whose term is older than the auctioneer lease's current one: a deposed leader must not
        fail, or explain, what the new one is placing."""
        lease = await tx.lease(AUCTIONEER_LEASE)
        if lease is not None and fencing_token < lease.token:
            self.metrics.stale_writes.labels(writes).inc()
            raise Fenced(
                f"fencing_token {fencing_token} is older than the auctioneer lease's current token "
                f"{lease.token}: a report from a deposed auctioneer is not applied"
            )

    async def add_starts(
        self, tx: Tx, starts: dict[str, set[int]], effects: Effects, known: DesiredRecord | None = None
    ) -> None:
        """Auction these indices after commit, each LRP's definition read here (`known` saves the read)."""
        if not starts:
            return
        if known is not None and set(starts) == {known.process_guid}:
            desired = {known.process_guid: known}
        else:
            desired = await tx.desired_by_guid(starts)
        for process_guid, indices in starts.items():
            d = desired.get(process_guid)
            if d is not None and indices:
                effects.lrp_starts.append({"desired": d.to_wire(), "indices": sorted(indices)})

    async def add_stops(self, tx: Tx, stops: Iterable[Stop], effects: Effects) -> None:
        """Ask the reps to stop these instances after commit (a cell unknown or without a URL: none)."""
        stops = list(stops)
        if not stops:
            return
        cells = await tx.cells_by_id(s.cell_id for s in stops)
        for s in stops:
            cell = cells.get(s.cell_id)
            if cell is not None and cell.rep_url:
                effects.stops.append((cell, s.process_guid, s.instance_guid))

    def run_effects(self, effects: Effects) -> None:
        """Send what a committed transaction decided. Events are built only when someone listens."""
        for changes in effects.actual_changes:
            self.history.record_actuals(changes)
        for wire, at in effects.rollouts:
            self.history.record_rollout(wire, at)
        for at, kind, cell_id in effects.cell_changes:
            self.cluster.add(at, kind, cell_id, type_=CELL_EVENT_TYPES.get(kind, "cell_changed"))
        for task in effects.tasks_completed:
            self.cluster.add(task.updated_at, "failed" if task.failed else "succeeded", task.cell_id,
                             task.task_guid, task.failure_reason, type_="task_changed")
        if self.hub.listening:
            events: list[dict[str, Any]] = []
            for build in effects.events:
                events.extend(build())
            self.hub.publish(events)
        elif effects.events:
            self.hub.missed()  # not built: a client resuming from before them must list again
        if effects.lrp_starts:
            self.outbound.auction_lrps(effects.lrp_starts)
        if effects.task_starts:
            self.outbound.auction_tasks(effects.task_starts)
        for cell, process_guid, instance_guid in effects.stops:
            self.outbound.stop_instance(cell, process_guid, instance_guid)
        for cell, task_guid in effects.cancels:
            self.outbound.cancel_task(cell, task_guid)
        for task in effects.callbacks:
            if task.callback_url:
                self.outbound.spawn(self._callback(task.callback_url, task))
        if effects.wake_convergence:
            self.on_wake()
        if effects.pass_due is not None:
            self.on_due(effects.pass_due)

    async def _callback(self, url: str, task: TaskRecord) -> None:
        """POST the completed Task to its callback URL; once delivered, the task is resolved (deleted).
        A failed delivery leaves it COMPLETED: convergence retries until it expires. The receiver gets the
        outcome, not the task's secrets: env values masked, as in events. A URL refused now (its name
        resolves to a link-local or metadata address: common/urls.py) is not POSTed to at all."""
        if (refusal := await resolved_refusal(url, self.settings.callback_allow)) is not None:
            log.warning(
                "task callback refused", extra={"data": {"task_guid": task.task_guid, "reason": refusal}}
            )
            return
        if not await self.outbound.task_callback(url, masked_env(task.to_wire())):
            return
        async with self.write() as (tx, effects):
            current = await tx.get_task(task.task_guid)
            if current is None or current.state not in (COMPLETED, RESOLVING):
                return
            await tx.delete_tasks([task.task_guid])
            wire = current.to_wire()
            effects.events.append(lambda: [event("task_removed", wire)])
