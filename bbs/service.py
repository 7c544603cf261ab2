"""The BBS's operations: one write transaction each (read rows, decide with pure functions, write the
net changes in bulk), then the side effects after commit — events, auctions, stops, callbacks.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from common.group_commit import GroupCommit
from common.logging import instance_log
from common.models import (
    MAX_NAME_CHARS,
    AuctionReport,
    CellPresence,
    DesiredLRPCreate,
    DesiredLRPUpdate,
    PlacementExplanation,
    PlacementFailures,
    TaskCreate,
    TokenCreate,
)
from common.urls import resolved_refusal

from .actual_set import ActualChanges, ActualSet
from .cell_loss import CellLossConfig
from .cell_probes import CellProbes
from .convergence import (
    ConvergenceConfig,
    evacuate,
    fail_tasks_of_rebooted_cells,
    forget_rebooted_cell,
    resize,
    stops_for,
    undrain,
)
from .events import EventHub, event
from .explanations import Explanations
from .lifecycle import LrpOutcome, Stop, apply_lrp_reports, apply_task_reports, lifecycle_keys
from .lifecycle_wire import CellReport
from .metrics import BBSMetrics
from .outbound import Outbound
from .placements import PlacementLog
from .quotas import QuotaExceeded, check_scale, desire_refusal
from .rebalancer import Rebalancer
from .records import (
    BEARER_PURPOSES,
    COMPLETED,
    EVACUATING,
    LOGIN_TOKEN,
    ORDINARY,
    PENDING,
    RESOLVING,
    RUNNING,
    SESSION_TOKEN,
    TASK_RUNNING,
    ActualRecord,
    CellRecord,
    DesiredRecord,
    LeaseRecord,
    TaskRecord,
    TokenRecord,
    completed,
    fresh_instances,
    new_epoch,
)
from .redact import masked_env
from .restart_policy import RestartPolicy
from .settings import BBSSettings
from .store import Store, Tx

log = logging.getLogger("bbs.service")

LIFECYCLE_LOG = "bbs.lifecycle"

CANCELLED = "cancelled"
THREAD_ABOVE = 500  # instances in one lifecycle round above which its decisions run in a thread
AUCTIONEER_LEASE = "auctioneer"  # auctioneer/leadership.py takes it through the lease API
TOKEN_PREFIX = "vdt_"  # says what a leaked string is (secret scanners match on it)
TOKEN_BYTES = 32


# What a heartbeat does not say: the BBS's own view of the cell (CellPresence), never stored from a rep's
# body.
BBS_CELL_FIELDS = {"expires_at", "cordoned", "draining", "state"}
CellMode = Literal["cordon", "uncordon", "drain"]


class NotFound(Exception):
    pass


class Conflict(Exception):
    pass


class Fenced(Conflict):
    """A write under a fencing token older than its lease's current one (409, counted as `fenced`)."""


def new_token(role: str, name: str, purpose: str, expires_in_s: float | None,
              now: float) -> tuple[TokenRecord, str]:
    """A token's record and its secret (which only its hash in the record stands for)."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    record = TokenRecord(
        id=secrets.token_hex(8), name=name, role=role, secret_sha256=token_hash(secret), created_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s, purpose=purpose,
    )
    return record, secret


def token_hash(secret: str) -> str:
    """What is stored of a bearer token: the SHA-256 of the whole string (a 256-bit random secret needs
    no salt or slow hash: nothing can be guessed from it)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def placement_message(error: str, detail: str) -> str:
    return f"{error} — {detail}" if detail else error


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

    def actual_events(self, changes: ActualChanges) -> None:
        if changes:
            self.events.append(lambda: actual_change_events(changes))


def actual_change_events(changes: ActualChanges) -> list[dict[str, Any]]:
    now = time.time()  # one commit, one time: formatted once (records.iso caches), not once per event
    return [
        *(event("actual_lrp_removed", r.to_wire(), now) for r in changes.deletes),
        *(event("actual_lrp_changed", r.to_wire(), now) for r in changes.visible_updates),
        *(event("actual_lrp_created", r.to_wire(), now) for r in changes.inserts),
    ]


class BBS:
    def __init__(
        self, settings: BBSSettings, store: Store, outbound: Outbound, hub: EventHub, metrics: BBSMetrics
    ):
        self.settings = settings
        self.store = store
        self.outbound = outbound
        self.hub = hub
        self.metrics = metrics
        self.policy = RestartPolicy(
            immediate_restarts=settings.immediate_restarts,
            backoff_min=settings.crash_backoff_min,
            backoff_max=settings.crash_backoff_max,
            max_restarts=settings.max_restarts,
            reset_after=settings.crash_reset_after,
        )
        self.convergence = ConvergenceConfig(
            stale_unclaimed=settings.stale_unclaimed,
            kick_task=settings.kick_task,
            expire_pending_task=settings.expire_pending_task,
            expire_completed_task=settings.expire_completed_task,
            forget_cell_after=settings.forget_cell_after,
            policy=self.policy,
            cell_loss=CellLossConfig(grace=settings.cell_loss_grace, check=settings.cell_loss_check),
        )
        self.on_wake: Callable[[], None] = lambda: None  # set by the converger
        # Convergence's own state between passes (the leader's): what cells were asked what they hold, and
        # the auctioneer's reports of what they accepted.
        self.probes = CellProbes(outbound.cell_detail, settings.cell_loss_check,
                                 on_done=lambda: self.on_wake())
        self.placement_log = PlacementLog()
        self.explanations = Explanations(settings.max_explanations)  # for `vendue why`, in memory
        self.rebalancer = Rebalancer(self)  # `vendue rebalance`: moves this replica carries out
        self.on_due: Callable[[float], None] = lambda when: None  # set by the converger
        self.converger: Any = None  # the Converger driving this BBS, if any
        self.transport_ready: Callable[[], bool] = lambda: True  # NATS connected (when it is the transport)
        self._desire_batcher: GroupCommit[DesiredLRPCreate, dict[str, Any] | Conflict | QuotaExceeded] = (
            GroupCommit(self._desire_batch)
        )
        self._heartbeat_batcher: GroupCommit[tuple[str, CellPresence], bool] = GroupCommit(
            self._heartbeat_batch
        )
        self._lifecycle_batcher: GroupCommit[tuple[str, CellReport], dict[str, Any]] = GroupCommit(
            self._lifecycle_batch
        )

    # --- effects ----------------------------------------------------------------------------------

    async def add_starts(
        self, tx: Tx, starts: dict[str, set[int]], effects: Effects, known: DesiredRecord | None = None
    ) -> None:
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
        stops = list(stops)
        if not stops:
            return
        cells = await tx.cells_by_id(s.cell_id for s in stops)
        for s in stops:
            cell = cells.get(s.cell_id)
            if cell is not None and cell.rep_url:
                effects.stops.append((cell, s.process_guid, s.instance_guid))

    def run_effects(self, effects: Effects) -> None:
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
            url = task.definition.get("completion_callback_url")
            if url:
                self.outbound.spawn(self._callback(url, task))
        if effects.wake_convergence:
            self.on_wake()
        if effects.pass_due is not None:
            self.on_due(effects.pass_due)

    # --- desired LRPs -----------------------------------------------------------------------------

    async def desire_lrp(self, body: DesiredLRPCreate) -> dict[str, Any]:
        """Store a desired LRP with UNCLAIMED instances and send the auctioneer one start request.
        Desires arriving together share one transaction (group commit)."""
        result = await self._desire_batcher.submit(body)
        if isinstance(result, Conflict | QuotaExceeded):
            raise result
        return result

    async def _desire_batch(
        self, bodies: list[DesiredLRPCreate]
    ) -> list[dict[str, Any] | Conflict | QuotaExceeded]:
        now = time.time()
        effects = Effects()
        results: list[DesiredRecord | Conflict | QuotaExceeded] = []
        records: list[DesiredRecord] = []
        async with self.store.write() as tx:
            taken = set(await tx.desired_by_guid(b.process_guid for b in bodies))
            lrps, instances = await tx.desired_totals()
            for body in bodies:
                if body.process_guid in taken:
                    results.append(Conflict(f"desired LRP {body.process_guid!r} exists"))
                    continue
                if (refusal := desire_refusal(self.settings, lrps, instances, body.instances)) is not None:
                    results.append(QuotaExceeded(refusal))
                    continue
                lrps, instances = lrps + 1, instances + body.instances
                taken.add(body.process_guid)
                record = DesiredRecord(
                    process_guid=body.process_guid,
                    domain=body.domain,
                    instances=body.instances,
                    definition=body.model_dump(mode="json"),
                    created_at=now,
                    mod_epoch=new_epoch(),
                    on_cell_loss=body.on_cell_loss,
                )
                records.append(record)
                results.append(record)
            if records:
                if not await tx.insert_desireds(records):
                    # Another BBS inserted one of them meanwhile: fail, to be retried item by item.
                    if len(bodies) == 1:
                        return [Conflict(f"desired LRP {bodies[0].process_guid!r} exists")]
                    raise Conflict("a desired LRP of this batch was created concurrently")
                # Leftover instances of an earlier LRP of the same name (normally none) are resized too.
                leftovers = await tx.actuals_of([r.process_guid for r in records])
                starts: dict[str, set[int]] = {}
                stops: list[Stop] = []
                if not leftovers:  # the usual case, written out: 250,000 instances go through here
                    changes = ActualChanges(inserts=fresh_instances(records, now))
                    starts = {r.process_guid: set(range(r.instances)) for r in records}
                else:
                    actuals = ActualSet(leftovers)
                    for record in records:
                        actions = resize(record, actuals, now)
                        starts.update(actions.starts)
                        stops.extend(actions.stops)
                    changes = actuals.diff()
                await tx.apply_actual_changes(changes)
                effects.actual_events(changes)
                effects.lrp_starts.extend(
                    {"desired": r.to_wire(), "indices": sorted(starts[r.process_guid])}
                    for r in records
                    if starts.get(r.process_guid)
                )
                await self.add_stops(tx, stops, effects)
        effects.events.insert(0, lambda: [event("desired_lrp_created", r.to_wire(), now) for r in records])
        self.run_effects(effects)
        return [r.to_wire() if isinstance(r, DesiredRecord) else r for r in results]

    async def _resize(self, tx: Tx, record: DesiredRecord, now: float, effects: Effects) -> None:
        actuals = ActualSet(await tx.list_actuals(process_guid=record.process_guid))
        actions = resize(record, actuals, now)
        changes = actuals.diff()
        await tx.apply_actual_changes(changes)
        effects.actual_events(changes)
        await self.add_starts(tx, actions.starts, effects, known=record)
        await self.add_stops(tx, actions.stops, effects)

    async def get_desired(self, process_guid: str) -> dict[str, Any]:
        async with self.store.read() as tx:
            record = await tx.get_desired(process_guid)
        if record is None:
            raise NotFound(f"desired LRP {process_guid!r} not found")
        return record.to_wire()

    async def list_desired(self, domain: str | None = None) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            return [r.to_wire() for r in await tx.list_desired(domain)]

    async def update_desired(self, process_guid: str, body: DesiredLRPUpdate) -> dict[str, Any]:
        now = time.time()
        effects = Effects()
        async with self.store.write() as tx:
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            tag = body.modification_tag
            if tag is not None and (tag.epoch, tag.index) != (record.mod_epoch, record.mod_index):
                raise Conflict(
                    f"modification_tag {tag.epoch}:{tag.index} is stale (now "
                    f"{record.mod_epoch}:{record.mod_index})"
                )
            scale = body.instances is not None and body.instances != record.instances
            policy = body.on_cell_loss is not None and body.on_cell_loss != record.on_cell_loss
            if not scale and not policy:
                return record.to_wire()
            if body.on_cell_loss is not None and policy:  # convergence applies it from its next pass
                record.on_cell_loss = body.on_cell_loss
                record.definition = {**record.definition, "on_cell_loss": body.on_cell_loss}
            if body.instances is not None and scale:
                if body.instances > record.instances:  # scaling up counts against the instance quota
                    total = (await tx.desired_totals())[1]
                    check_scale(self.settings, total, record.instances, body.instances)
                record.instances = body.instances
                record.definition = {**record.definition, "instances": body.instances}
            record.mod_index += 1
            await tx.update_desired(record)
            if scale:
                await self._resize(tx, record, now, effects)
        effects.events.insert(0, lambda: [event("desired_lrp_changed", record.to_wire(), now)])
        self.run_effects(effects)
        return record.to_wire()

    async def remove_desired(self, process_guid: str) -> None:
        now = time.time()
        effects = Effects()
        async with self.store.write() as tx:
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            actuals = await tx.list_actuals(process_guid=process_guid)
            await tx.delete_actuals_of(process_guid)
            await tx.delete_desired(process_guid)
            effects.actual_events(ActualChanges(deletes=actuals))
            await self.add_stops(tx, stops_for(actuals), effects)
        effects.events.insert(0, lambda: [event("desired_lrp_removed", record.to_wire(), now)])
        self.run_effects(effects)

    # --- actual LRPs ------------------------------------------------------------------------------

    async def summarize_actuals(self, process_guid: str | None = None) -> dict[str, Any]:
        async with self.store.read() as tx:
            counts = await tx.count_actuals(process_guid)
        by_state: dict[str, int] = {}
        by_presence: dict[str, int] = {}
        for state, presence, n in counts:
            by_presence[presence] = by_presence.get(presence, 0) + n
            if presence == ORDINARY:
                by_state[state] = by_state.get(state, 0) + n
        return {"total": sum(n for _, _, n in counts), "by_state": by_state, "by_presence": by_presence}

    async def list_actuals(self, **filters: str | None) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            return [r.to_wire() for r in await tx.list_actuals(**filters)]

    async def lifecycle(self, cell_id: str, report: CellReport) -> dict[str, Any]:
        """One cell's report. Reports that arrive while another transaction runs are applied
        together in the next one (group commit): 100 cells reporting at once cost a few
        transactions, not 100."""
        return await self._lifecycle_batcher.submit((cell_id, report))

    async def _lifecycle_batch(self, batch: list[tuple[str, CellReport]]) -> list[dict[str, Any]]:
        now = time.time()
        effects = Effects()
        async with self.store.write() as tx:
            claiming = {cell_id for cell_id, report in batch if report["claimed"]}
            cells = await tx.cells_by_id(claiming) if claiming else {}
            keys: set[tuple[str, int]] = set()
            for _, report in batch:
                keys |= lifecycle_keys(report)
            actuals = ActualSet(await tx.actuals_for_keys(keys) if keys else ())

            def decide() -> list[LrpOutcome]:
                return [
                    apply_lrp_reports(
                        actuals,
                        report,
                        cell_id,
                        cells[cell_id].zone if cell_id in cells else "",
                        now,
                        self.policy,
                    )
                    for cell_id, report in batch
                ]

            # A big round (thousands of instances) is decided in a worker thread, so heartbeats and
            # reads keep being served meanwhile; the working set is this transaction's own data.
            outcomes = await asyncio.to_thread(decide) if len(keys) > THREAD_ABOVE else decide()
            changes = actuals.diff()
            _log_lifecycle(batch, changes)
            await tx.apply_actual_changes(changes)
            effects.actual_events(changes)
            starts: dict[str, set[int]] = {}
            for outcome in outcomes:
                for process_guid, indices in outcome.starts.items():
                    starts.setdefault(process_guid, set()).update(indices)
                if outcome.restart_due is not None:  # a delayed restart needs a pass when its backoff ends
                    effects.pass_due = min(effects.pass_due or outcome.restart_due, outcome.restart_due)
            await self.add_starts(tx, starts, effects)
            await self.add_stops(tx, [stop for outcome in outcomes for stop in outcome.stops], effects)

            refused_tasks: list[list[str]] = [[] for _ in batch]
            guids = {
                g
                for _, r in batch
                for g in (*r["tasks_started"], *(c.task_guid for c in r["tasks_completed"]))
            }
            if guids:
                tasks = await tx.tasks_by_guid(guids)
                touched: dict[str, TaskRecord] = {}
                for position, (cell_id, report) in enumerate(batch):
                    if not report["tasks_started"] and not report["tasks_completed"]:
                        continue
                    task_outcome = apply_task_reports(
                        tasks, report["tasks_started"], report["tasks_completed"], cell_id, now
                    )
                    refused_tasks[position] = task_outcome.refused
                    for task in task_outcome.updated:
                        tasks[task.task_guid] = touched[task.task_guid] = task
                    effects.callbacks.extend(task_outcome.completed)
                await tx.update_tasks(touched.values())
                updated = list(touched.values())
                effects.events.append(lambda: [event("task_changed", t.to_wire(), now) for t in updated])
        self.run_effects(effects)
        return [
            {"refused": outcome.refused, "refused_tasks": refused}
            for outcome, refused in zip(outcomes, refused_tasks, strict=True)
        ]

    async def placement_failures(self, body: PlacementFailures) -> None:
        """Record the auctioneer's report of an auction — its failures, and what each cell accepted —
        unless it comes from a term older than the auctioneer lease's current one (Conflict, nothing
        written): a deposed leader must not fail what the new one is placing."""
        now = time.time()
        effects = Effects()
        async with self.store.write() as tx:
            lease = await tx.lease(AUCTIONEER_LEASE)
            if lease is not None and body.fencing_token < lease.token:
                self.metrics.stale_writes.labels("placement_failures").inc()
                raise Fenced(
                    f"fencing_token {body.fencing_token} is older than the auctioneer lease's current token "
                    f"{lease.token}: a report from a deposed auctioneer is not applied"
                )
            if body.accepted:  # kept until the claims arrive (bbs/placements.py)
                accepted = {cell: work.model_dump() for cell, work in body.accepted.items()}
                await tx.insert_placement(now, accepted)
            if body.lrps:
                changed = await tx.set_placement_errors(
                    [(f.process_guid, f.index, placement_message(f.error, f.detail)) for f in body.lrps]
                )
                effects.actual_events(ActualChanges(updates=changed, visible_updates=changed))
            if body.tasks:
                tasks = await tx.tasks_by_guid(f.task_guid for f in body.tasks)
                updated: list[TaskRecord] = []
                for failure in body.tasks:
                    task = tasks.get(failure.task_guid)
                    if task is None or task.state != PENDING:
                        continue
                    count = task.rejection_count + 1
                    if count >= self.settings.task_retries:
                        message = placement_message(failure.error, failure.detail)
                        task = completed(
                            task, now, failed=True, failure_reason=message, rejection_count=count
                        )
                        effects.callbacks.append(task)
                    else:
                        task.rejection_count, task.updated_at, task.auctioned_at = count, now, now
                        effects.task_starts.append({"task": task.to_wire()})
                    tasks[failure.task_guid] = task
                    updated.append(task)
                await tx.update_tasks(updated)
                effects.events.append(lambda: [event("task_changed", t.to_wire(), now) for t in updated])
        self.run_effects(effects)

    async def record_auction(self, body: AuctionReport) -> None:
        """Apply an auction's report: its failures and accepted work (`placement_failures`), its placement
        explanations (latest per instance, bounded, in memory), and publish `auction_completed` with its
        durations and counts — unless it comes from a term older than the auctioneer lease's (Conflict,
        nothing applied): a deposed leader must not fail, or explain, what the new one is placing."""
        if body.lrps or body.tasks or body.accepted:
            await self.placement_failures(body)  # fenced there
        else:
            async with self.store.read() as tx:
                lease = await tx.lease(AUCTIONEER_LEASE)
            if lease is not None and body.fencing_token < lease.token:
                self.metrics.stale_writes.labels("auctions").inc()
                raise Conflict(
                    f"fencing_token {body.fencing_token} is older than the auctioneer lease's current token "
                    f"{lease.token}: a report from a deposed auctioneer is not applied"
                )
        finished = body.finished_at or time.time()
        self.explanations.record(body.explanations, finished)
        if self.hub.listening:
            self.hub.publish([event("auction_completed", {
                "duration_s": body.duration_s, "fetch_states_s": body.fetch_states_s,
                "lrps_placed": body.lrps_placed, "lrps_failed": body.lrps_failed,
                "tasks_placed": body.tasks_placed, "tasks_failed": body.tasks_failed,
            }, finished)])

    async def placement(self, process_guid: str, index: int) -> str:
        """Why this instance is where it is, as PlacementExplanation JSON: the latest auction's explanation
        this BBS was told of, else (an unplaced instance) its stored placement error; NotFound otherwise."""
        known = self.explanations.latest(process_guid, index)
        if known is not None:
            return known
        async with self.store.read() as tx:
            actuals = await tx.actuals_for_keys([(process_guid, index)])
        actual = next((a for a in actuals if a.placement_error), None)
        if actual is not None:
            error, _, detail = actual.placement_error.partition(" — ")  # placement_message's join
            return PlacementExplanation(
                process_guid=process_guid, index=index, placed=False, error=error, detail=detail,
                auctioned_at=actual.auctioned_at, source="placement_error",
            ).model_dump_json()
        raise NotFound(
            f"no placement explanation for {process_guid}/{index}: this BBS has not seen it auctioned "
            f"(they are kept in memory: an instance placed before the BBS started, or long ago, is not known)"
        )

    # --- tasks ------------------------------------------------------------------------------------

    async def desire_task(self, body: TaskCreate) -> dict[str, Any]:
        now = time.time()
        record = TaskRecord(
            task_guid=body.task_guid,
            domain=body.domain,
            definition=body.model_dump(mode="json"),
            created_at=now,
            updated_at=now,
            auctioned_at=now,
        )
        async with self.store.write() as tx:
            if not await tx.insert_task(record):
                raise Conflict(f"task {body.task_guid!r} exists")
        wire = record.to_wire()
        self.run_effects(
            Effects(events=[lambda: [event("task_created", wire, now)]], task_starts=[{"task": wire}])
        )
        return wire

    async def get_task(self, task_guid: str) -> dict[str, Any]:
        async with self.store.read() as tx:
            record = await tx.get_task(task_guid)
        if record is None:
            raise NotFound(f"task {task_guid!r} not found")
        return record.to_wire()

    async def list_tasks(self, state: str | None = None, domain: str | None = None) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            return [r.to_wire() for r in await tx.list_tasks(state, domain)]

    async def cancel_task(self, task_guid: str) -> dict[str, Any]:
        now = time.time()
        effects = Effects()
        async with self.store.write() as tx:
            task = await tx.get_task(task_guid)
            if task is None:
                raise NotFound(f"task {task_guid!r} not found")
            if task.state in (COMPLETED, RESOLVING):
                raise Conflict(f"task {task_guid!r} is {task.state} already")
            if task.state == TASK_RUNNING:
                cell = await tx.get_cell(task.cell_id)
                if cell is not None and cell.rep_url:
                    effects.cancels.append((cell, task_guid))
            task = completed(task, now, failed=True, failure_reason=CANCELLED)
            await tx.update_tasks([task])
        wire = task.to_wire()
        effects.events.append(lambda: [event("task_changed", wire, now)])
        effects.callbacks.append(task)
        self.run_effects(effects)
        return wire

    async def delete_task(self, task_guid: str) -> None:
        async with self.store.write() as tx:
            task = await tx.get_task(task_guid)
            if task is None:
                raise NotFound(f"task {task_guid!r} not found")
            if task.state not in (COMPLETED, RESOLVING):
                raise Conflict(f"task {task_guid!r} is {task.state}; only a completed task can be deleted")
            await tx.delete_tasks([task_guid])
        wire = task.to_wire()
        self.run_effects(Effects(events=[lambda: [event("task_removed", wire)]]))

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
        async with self.store.write() as tx:
            current = await tx.get_task(task.task_guid)
            if current is None or current.state not in (COMPLETED, RESOLVING):
                return
            await tx.delete_tasks([task.task_guid])
        wire = current.to_wire()
        self.run_effects(Effects(events=[lambda: [event("task_removed", wire)]]))

    # --- cells ------------------------------------------------------------------------------------

    async def heartbeat(self, cell_id: str, body: CellPresence) -> bool:
        """A cell's presence, alive for the TTL; whether the cell is cordoned (the rep then refuses work for
        it, should an auction that started before the cordon place some). Heartbeats arriving together share
        a transaction."""
        return await self._heartbeat_batcher.submit((cell_id, body))

    async def _heartbeat_batch(self, batch: list[tuple[str, CellPresence]]) -> list[bool]:
        now = time.time()
        effects = Effects()
        latest = {cell_id: body for cell_id, body in batch}  # a cell twice in one batch: its last word
        records = {
            cell_id: CellRecord(
                cell_id,
                body.model_dump(mode="json", exclude=BBS_CELL_FIELDS),
                expires_at=now + self.settings.presence_ttl,
            )
            for cell_id, body in latest.items()
        }
        # Urgent: a heartbeat stuck behind bulk writes would let presences expire under load.
        async with self.store.write(urgent=True) as tx:
            existing = await tx.cells_by_id(records)
            for cell_id, stored in existing.items():  # the operator's flags are the BBS's, kept as they are
                records[cell_id].cordoned, records[cell_id].draining = stored.cordoned, stored.draining
            # A heartbeat older than the presence stored is dropped: one that reached this replica while
            # it could not reach the database, written once it can, after the rep's next heartbeats went
            # through another replica, would cut the presence short and have the cell's instances replaced.
            late = [cell_id for cell_id, r in records.items()
                    if cell_id in existing and existing[cell_id].expires_at > r.expires_at]
            for cell_id in late:
                del records[cell_id], latest[cell_id]
            await tx.put_cells(
                [r for i, r in records.items() if i in existing],
                [r for i, r in records.items() if i not in existing],
            )
            appeared: list[CellRecord] = []
            for cell_id, record in records.items():
                before = existing.get(cell_id)
                returned = before is not None and (before.disappeared or not before.present(now))
                if before is None or returned:
                    appeared.append(record)
                if returned:
                    effects.wake_convergence = True  # its suspect instances may be promoted back
            if appeared:
                effects.events.append(lambda: [event("cell_appeared", r.to_wire(), now) for r in appeared])
            rebooted = rebooted_cells(existing, latest)
            for cell_id in rebooted:
                held = await tx.list_actuals(cell_id=cell_id)
                await self._rework_cell(tx, held, forget_rebooted_cell, cell_id, now, effects)
            if rebooted:
                await self._fail_tasks_of(tx, rebooted, now, effects)
            # An evacuating rep (SIGTERM) or a cell the operator drains: what runs there now (what was
            # starting at the last heartbeat runs by this one) gets a replacement elsewhere.
            for cell_id in (i for i, body in latest.items() if body.evacuating or records[i].draining):
                running = await tx.list_actuals(cell_id=cell_id, state=RUNNING, presence=ORDINARY)
                await self._rework_cell(tx, running, evacuate, cell_id, now, effects)
        self.run_effects(effects)
        cordoned = {cell_id for cell_id, r in records.items() if r.cordoned or r.draining}
        return [cell_id in cordoned for cell_id, _ in batch]

    async def _fail_tasks_of(self, tx: Tx, rebooted: list[str], now: float, effects: Effects) -> None:
        """Fail the tasks RUNNING on cells whose reps restarted (convergence.fail_tasks_of_rebooted_cells),
        in this transaction, their callbacks and events with it."""
        running_there = await tx.list_tasks(state=TASK_RUNNING, cell_ids=rebooted)
        failed = fail_tasks_of_rebooted_cells(running_there, rebooted, now)
        if not failed:
            return
        await tx.update_tasks(failed)
        log.info("tasks failed: their cell restarted",
                 extra={"data": {"cells": rebooted, "tasks": [t.task_guid for t in failed]}})
        effects.events.append(lambda: [event("task_changed", t.to_wire(), now) for t in failed])
        effects.callbacks.extend(t for t in failed if t.definition.get("completion_callback_url"))

    async def _rework_cell(self, tx, held: list[ActualRecord], rework, cell_id: str, now: float,
                           effects: Effects) -> None:
        """Apply `rework` (evacuate, forget_rebooted_cell) to every index a cell holds, in this
        transaction."""
        if not held:
            return
        actuals = ActualSet(await tx.actuals_for_keys((r.process_guid, r.index) for r in held))
        starts = rework(actuals, cell_id, now)
        changes = actuals.diff()
        await tx.apply_actual_changes(changes)
        effects.actual_events(changes)
        await self.add_starts(tx, starts, effects)

    async def remove_cell(self, cell_id: str) -> None:
        """Forget a cell that is gone for good (`vendue cells remove`): everything it held is placed again
        at once, whatever the LRPs' `on_cell_loss` (its ORDINARY instances are auctioned again, its
        suspect and evacuating ones dropped, their indices replaced by the next convergence pass), and its
        row is deleted. A cell that heartbeats is refused (Conflict): stop or drain its rep first."""
        now = time.time()
        effects = Effects(wake_convergence=True)
        async with self.store.write() as tx:
            cell = await tx.get_cell(cell_id)
            if cell is None:
                raise NotFound(f"no cell {cell_id!r}")
            if cell.present(now):
                raise Conflict(f"cell {cell_id!r} is present (its rep heartbeats): stop or drain it first")
            held = await tx.list_actuals(cell_id=cell_id)
            await self._rework_cell(tx, held, forget_rebooted_cell, cell_id, now, effects)
            await tx.delete_cells([cell_id])
        log.info("cell removed", extra={"data": {"cell_id": cell_id, "instances": len(held)}})
        wire = cell.to_wire()
        effects.events.append(lambda: [event("cell_removed", wire, now)])
        self.run_effects(effects)

    async def list_cells(self, *, expired: bool = False) -> list[dict[str, Any]]:
        """The cell states: present cells (and, with `expired`, those whose presence expired, not yet
        forgotten), each with its last heartbeat's capacity and the operator's flags."""
        now = time.time()
        async with self.store.read() as tx:
            return [c.to_wire(now) for c in await tx.list_cells(present_at=None if expired else now)]

    async def set_cell_mode(self, cell_id: str, mode: CellMode) -> dict[str, Any]:
        """An operator's cordon, drain or uncordon of a cell; the cell state after.

        cordon: no new work is placed there; what runs stays. drain: cordon, and each instance running there
        gets a replacement elsewhere, the original stopped once that one runs (make-before-break, Diego's
        evacuation done by the BBS, the rep left running); every heartbeat of the cell does it again for
        what started since, and an instance no other cell has room for keeps running, its replacement
        waiting with the placement error. uncordon: neither; an instance whose replacement is not placed yet
        stays where it is. The BBS's state: it survives the rep's restarts and the BBS's, and the rep learns
        it from every heartbeat's answer."""
        now = time.time()
        cordoned, draining = mode != "uncordon", mode == "drain"
        effects = Effects()
        async with self.store.write() as tx:
            cell = await tx.get_cell(cell_id)
            if cell is None:
                raise NotFound(f"no cell {cell_id!r}")
            was_draining = cell.draining
            await tx.set_cell_flags(cell_id, cordoned=cordoned, draining=draining)
            cell.cordoned, cell.draining = cordoned, draining
            if draining:
                running = await tx.list_actuals(cell_id=cell_id, state=RUNNING, presence=ORDINARY)
                await self._rework_cell(tx, running, evacuate, cell_id, now, effects)
            elif was_draining:
                moving = await tx.list_actuals(cell_id=cell_id, presence=EVACUATING)
                await self._rework_cell(tx, moving, undrain, cell_id, now, effects)
        wire = cell.to_wire(now)
        log.info(
            f"cell {mode}", extra={"data": {"cell_id": cell_id, "cordoned": cordoned, "draining": draining}}
        )
        effects.events.append(lambda: [event("cell_changed", wire, now)])
        self.run_effects(effects)
        if cell.rep_url:
            self.outbound.cordon_cell(cell, cordoned)
        return wire

    # --- convergence ------------------------------------------------------------------------------

    async def acquire_lease(
        self, name: str, owner: str, *, url: str = "", ttl: float | None = None
    ) -> int | None:
        """Take or renew the lease `name` for `ttl` seconds (default: this BBS's lease TTL); its fencing
        token when held, None when another owner holds it. Expiry is by the database's clock."""
        ttl = self.settings.lease_ttl if ttl is None else ttl
        async with self.store.write(urgent=True) as tx:
            return await tx.acquire_lease(name, owner, ttl, url=url)

    async def take_lease(self, name: str, owner: str, *, url: str, ttl: float) -> tuple[bool, LeaseRecord]:
        """Acquire or renew, then the lease as it stands after, in one transaction: (held, lease)."""
        async with self.store.write(urgent=True) as tx:
            token = await tx.acquire_lease(name, owner, ttl, url=url)
            lease = await tx.lease(name)
        assert lease is not None  # acquire_lease creates the row when there is none
        return token is not None, lease

    async def release_lease(self, name: str, owner: str, token: int) -> bool | None:
        """Give the lease up (graceful stop): True released, False held by another owner or term, None never
        taken."""
        async with self.store.write(urgent=True) as tx:
            return await tx.release_lease(name, owner, token)

    async def lease(self, name: str) -> LeaseRecord | None:
        """The lease row as stored, expired or not."""
        async with self.store.read() as tx:
            return await tx.lease(name)

    async def held_lease(self, name: str) -> LeaseRecord | None:
        """The lease while someone holds it, by the database's clock; None when nobody does."""
        async with self.store.read() as tx:
            return await tx.held_lease(name)

    # --- bearer tokens ----------------------------------------------------------------------------

    async def create_token(self, body: TokenCreate) -> dict[str, Any]:
        """A new token: its secret is in the answer (TokenCreated) and nowhere else, ever."""
        record, secret = new_token(body.role, body.name, body.purpose, body.expires_in_s, time.time())
        async with self.store.write() as tx:
            await tx.insert_token(record)
        log.info("token created", extra={"data": {"id": record.id, "role": record.role, "name": record.name,
                                                  "purpose": record.purpose}})
        return {**record.to_wire(), "token": secret}

    async def log_in(self, secret: str, session_s: float) -> str | None:
        """A dashboard login: the login token with this secret, when valid, is used up, and the secret of a
        reader session token of `session_s` made in its place is returned; None when there is no such login
        token (unknown, expired, revoked, used already, or a token of another purpose). Logins and sessions
        that can never be used again are deleted meanwhile: each login would otherwise leave two more rows."""
        now = time.time()
        async with self.store.write() as tx:
            login = await tx.token_by_hash(token_hash(secret))
            if login is None or login.purpose != LOGIN_TOKEN or not login.valid(now):
                return None
            if not await tx.consume_token(login.id, now):
                return None  # another request used it first
            await tx.prune_tokens((LOGIN_TOKEN, SESSION_TOKEN), now)
            name = f"dashboard session of {login.name or 'token ' + login.id}"[:MAX_NAME_CHARS]
            session, session_secret = new_token("reader", name, SESSION_TOKEN, session_s, now)
            await tx.insert_token(session)
        log.info("logged in", extra={"data": {"login_token": login.id, "session_token": session.id}})
        return session_secret

    async def list_tokens(self) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            return [r.to_wire() for r in await tx.list_tokens()]

    async def revoke_token(self, token_id: str) -> None:
        async with self.store.write() as tx:
            if not await tx.revoke_token(token_id, time.time()):
                raise NotFound(f"no token with id {token_id!r}")
        log.info("token revoked", extra={"data": {"id": token_id}})

    async def verify_token(self, secret: str) -> TokenRecord | None:
        """The valid (unrevoked, unexpired) bearer token with this secret, read from the database each time:
        a revoked token is refused from the next request on, by every replica. A login token is not one: it
        is good for one login at /ui/login (`log_in`), nothing else."""
        async with self.store.read() as tx:
            record = await tx.token_by_hash(token_hash(secret))
        if record is None or record.purpose not in BEARER_PURPOSES or not record.valid(time.time()):
            return None
        return record

def rebooted_cells(existing: dict[str, CellRecord], latest: dict[str, CellPresence]) -> list[str]:
    """Cells whose heartbeat carries a boot id other than the one the BBS last saw."""
    rebooted = []
    for cell_id, body in latest.items():
        before = existing.get(cell_id)
        seen = before.presence.get("boot_id", "") if before is not None else ""
        if seen and body.boot_id and seen != body.boot_id:
            rebooted.append(cell_id)
    return rebooted


def _log_lifecycle(batch: list[tuple[str, CellReport]], changes: ActualChanges) -> None:
    """A line per crash a cell reported, with the instance bound (crashes are few); a line per changed
    actual LRP only at debug (thousands a second start: at info they cost one level check per round)."""
    for cell_id, report in batch:
        for crash in report["crashed"]:
            instance_log(LIFECYCLE_LOG, crash["process_guid"], crash["index"], cell_id).info(
                "instance crashed", reason=crash["reason"])
    if logging.getLogger(LIFECYCLE_LOG).isEnabledFor(logging.DEBUG):
        for row in (*changes.inserts, *changes.updates):
            instance_log(LIFECYCLE_LOG, row.process_guid, row.index, row.cell_id or None).debug(
                "actual LRP", state=row.state, presence=row.presence)
