"""Desired LRPs: desire (group-committed), read, remove. Each write resizes the LRP's actual instances in the
same transaction; auctions and stops go after commit. A change (a scale, a cell-loss policy, a new
version) is bbs/operations/rollouts.py's."""

from __future__ import annotations

import time
from typing import Any, cast

from common.group_commit import GroupCommit
from common.models import DesiredLRPCreate

from ..actual_set import ActualChanges, ActualSet
from ..convergence import resize, stops_for
from ..errors import Conflict, NotFound
from ..events import event
from ..lifecycle import Stop
from ..quotas import QuotaExceeded, desire_refusal
from ..records import DesiredDefinition, DesiredRecord, fresh_instances, new_epoch
from ..unit_of_work import UnitOfWork


class DesiredLRPs:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow
        self._batcher: GroupCommit[DesiredLRPCreate, dict[str, Any] | Conflict | QuotaExceeded] = (
            GroupCommit(self._desire_batch)
        )

    async def desire(self, body: DesiredLRPCreate) -> dict[str, Any]:
        """Store a desired LRP with UNCLAIMED instances and send the auctioneer one start request.
        Desires arriving together share one transaction (group commit)."""
        result = await self._batcher.submit(body)
        if isinstance(result, Conflict | QuotaExceeded):
            raise result
        return result

    async def _desire_batch(
        self, bodies: list[DesiredLRPCreate]
    ) -> list[dict[str, Any] | Conflict | QuotaExceeded]:
        now = time.time()
        settings = self.uow.settings
        results: list[DesiredRecord | Conflict | QuotaExceeded] = []
        records: list[DesiredRecord] = []
        async with self.uow.write() as (tx, effects):
            effects.events.append(lambda: [event("desired_lrp_created", r.to_wire(), now) for r in records])
            taken = set(await tx.desired_by_guid(b.process_guid for b in bodies))
            lrps, instances = await tx.desired_totals()
            for body in bodies:
                if body.process_guid in taken:
                    results.append(Conflict(f"desired LRP {body.process_guid!r} exists"))
                    continue
                if (refusal := desire_refusal(settings, lrps, instances, body.instances)) is not None:
                    results.append(QuotaExceeded(refusal))
                    continue
                lrps, instances = lrps + 1, instances + body.instances
                taken.add(body.process_guid)
                record = DesiredRecord(
                    process_guid=body.process_guid,
                    domain=body.domain,
                    instances=body.instances,
                    definition=cast(DesiredDefinition, body.model_dump(mode="json")),
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
                        raise Conflict(f"desired LRP {bodies[0].process_guid!r} exists")
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
                await self.uow.add_stops(tx, stops, effects)
        return [r.to_wire() if isinstance(r, DesiredRecord) else r for r in results]

    async def get(self, process_guid: str) -> dict[str, Any]:
        async with self.uow.read() as tx:
            record = await tx.get_desired(process_guid)
        if record is None:
            raise NotFound(f"desired LRP {process_guid!r} not found")
        return record.to_wire()

    async def list_all(self, domain: str | None = None) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            return [r.to_wire() for r in await tx.list_desired(domain)]

    async def remove(self, process_guid: str) -> None:
        async with self.uow.write() as (tx, effects):
            now = time.time()
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            effects.events.append(lambda: [event("desired_lrp_removed", record.to_wire(), now)])
            actuals = await tx.list_actuals(process_guid=process_guid)
            await tx.delete_actuals_of(process_guid)
            await tx.delete_desired(process_guid)
            await tx.delete_versions_of(process_guid)
            effects.actual_events(ActualChanges(deletes=actuals))
            await self.uow.add_stops(tx, stops_for(actuals), effects)
        self.uow.history.forget(process_guid)  # a new app of the same name starts its own story
