"""The auctioneer's reports: an auction's failures and what each cell accepted (written, fenced by the
auctioneer lease), its placement explanations (kept in memory for `vendue why`), and its summary event."""

from __future__ import annotations

import time

from common.models import AuctionReport, PlacementExplanation, PlacementFailures

from ..actual_set import ActualChanges
from ..errors import NotFound
from ..events import event
from ..explanations import Explanations
from ..records import PENDING, TaskRecord, completed
from ..unit_of_work import UnitOfWork


def placement_message(error: str, detail: str) -> str:
    return f"{error} — {detail}" if detail else error


class Auctions:
    def __init__(self, uow: UnitOfWork, explanations: Explanations) -> None:
        self.uow = uow
        self.explanations = explanations  # for `vendue why`, in memory

    async def placement_failures(self, body: PlacementFailures) -> None:
        """Record the auctioneer's report of an auction — its failures, and what each cell accepted —
        unless it comes from a term older than the auctioneer lease's current one (Fenced, nothing
        written): a deposed leader must not fail what the new one is placing."""
        now = time.time()
        async with self.uow.write() as (tx, effects):
            await self.uow.fence(tx, body.fencing_token, "placement_failures")
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
                    if count >= self.uow.settings.task_retries:
                        message = placement_message(failure.error, failure.detail)
                        task = completed(
                            task, now, failed=True, failure_reason=message, rejection_count=count
                        )
                        effects.callbacks.append(task)
                        effects.tasks_completed.append(task)
                    else:
                        task.rejection_count, task.updated_at, task.auctioned_at = count, now, now
                        effects.task_starts.append({"task": task.to_wire()})
                    tasks[failure.task_guid] = task
                    updated.append(task)
                await tx.update_tasks(updated)
                effects.events.append(lambda: [event("task_changed", t.to_wire(), now) for t in updated])

    async def record(self, body: AuctionReport) -> None:
        """Apply an auction's report: its failures and accepted work (`placement_failures`), its placement
        explanations (latest per instance, bounded, in memory), and publish `auction_completed` with its
        durations and counts — unless it comes from a term older than the auctioneer lease's (Fenced,
        nothing applied)."""
        if body.lrps or body.tasks or body.accepted:
            await self.placement_failures(body)  # fenced there
        else:
            async with self.uow.read() as tx:
                await self.uow.fence(tx, body.fencing_token, "auctions")
        finished = body.finished_at or time.time()
        self.explanations.record(body.explanations, finished)
        hub = self.uow.hub
        if hub.listening:
            hub.publish([event("auction_completed", {
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
        async with self.uow.read() as tx:
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
