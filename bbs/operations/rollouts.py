"""Changing a desired LRP's definition (PUT/PATCH): a new version and its rollout; the versions and
rollouts read back; pause, resume, undo; restarts of an app or of one instance (docs/rollouts.md).

A change of `instances` or `on_cell_loss` alone is a scale (bbs/operations/desired_lrps.py), no version.
The rollouts themselves are carried out by the convergence leader (bbs/rollouts.py); here they are
created, superseded, paused or resumed, in the same transaction as the change that asks for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from common.models import (
    DEFINITION_EXCLUDED,
    DesiredLRPCreate,
    DesiredLRPReplace,
    ModificationTag,
    RolloutStrategy,
    resolve_max_in_flight,
)
from common.models.image import Image

from ..actual_set import ActualSet
from ..convergence import resize
from ..errors import Conflict, NotFound
from ..events import event
from ..images import ImagePinner
from ..lifecycle import stop_of
from ..quotas import check_scale
from ..records import CLAIMED, ORDINARY, RUNNING, DesiredDefinition, DesiredRecord, iso, reset_to_unclaimed
from ..rollout import COMPLETED, FAILED, MOVING, PAUSED, RUNNING_STATE, RolloutRecord
from ..rollout import count_done as rollout_done
from ..store import Tx
from ..store.versions import VersionRecord
from ..unit_of_work import Effects, UnitOfWork


def definition_of(definition: dict[str, Any] | DesiredDefinition) -> dict[str, Any]:
    """The fields that make a version: every field of the body but process guid, instances, cell-loss
    policy (DEFINITION_EXCLUDED)."""
    return {name: value for name, value in definition.items() if name not in DEFINITION_EXCLUDED}


def _normalized(definition: DesiredDefinition) -> dict[str, Any]:
    """A stored definition with today's defaults filled in, as a new body would be."""
    try:
        body = DesiredLRPCreate.model_validate(
            {k: v for k, v in definition.items() if k in DesiredLRPCreate.model_fields})
    except ValidationError:
        return dict(definition)
    return body.model_dump(mode="json")


def _invalid(error: ValidationError) -> RequestValidationError:
    """A body refused after merging: a 422 naming the field, as FastAPI's own."""
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in error.errors()])


class Rollouts:
    def __init__(self, uow: UnitOfWork, images: ImagePinner | None = None) -> None:
        self.uow = uow
        # A change naming an image pins it again (bbs/images.py): a tag moved since is a new digest.
        self.images = images or ImagePinner([], None, uow.settings.registry_timeout)
        self.wake: Callable[[], None] = lambda: None  # set by the driver (bbs/rollouts.py)

    # --- changes -------------------------------------------------------------------------------

    async def replace(self, process_guid: str, body: DesiredLRPReplace) -> dict[str, Any]:
        if body.process_guid is not None and body.process_guid != process_guid:
            raise RequestValidationError([{
                "type": "value_error", "loc": ("body", "process_guid"), "input": body.process_guid,
                "msg": f"must match the path's process guid {process_guid!r}",
            }])
        given = body.model_dump(mode="json", exclude_unset=True, exclude={"rollout"})
        given["process_guid"] = process_guid
        given = await self.images.pin(given, whole=True)
        return await self._change(process_guid, given, body.rollout, whole=True)

    async def patch(self, process_guid: str, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body)
        errors: list[dict[str, Any]] = []
        if "process_guid" in body:
            errors.append({"type": "value_error", "loc": ("body", "process_guid"),
                           "input": body["process_guid"],
                           "msg": "the process guid of a desired LRP cannot change"})
        strategy = None
        if "rollout" in body:
            try:
                strategy = RolloutStrategy.model_validate(body.pop("rollout"))
            except ValidationError as exc:
                raise RequestValidationError(
                    [{**e, "loc": ("body", "rollout", *e["loc"])} for e in exc.errors()]) from exc
        tag = None
        if body.get("modification_tag") is not None:
            try:  # bounded as everywhere (an index past the store is 422, not a stale 409)
                tag = ModificationTag.model_validate(body.pop("modification_tag"))
            except ValidationError as exc:
                errors.extend({**e, "loc": ("body", "modification_tag", *e["loc"])} for e in exc.errors())
        body.pop("modification_tag", None)
        if body.get("image") is not None:
            try:  # checked before the registry is asked; the merged body is validated whole afterwards
                image = Image.model_validate(body["image"])
                body["image"] = image.model_dump(mode="json", exclude_unset=True)
            except ValidationError as exc:
                errors.extend({**e, "loc": ("body", "image", *e["loc"])} for e in exc.errors())
        if errors:
            raise RequestValidationError(errors)
        body = await self.images.pin(body, whole=False)
        return await self._change(process_guid, body, strategy, whole=False, tag=tag)

    async def _change(
        self, process_guid: str, given: dict[str, Any], strategy: RolloutStrategy | None, *, whole: bool,
        tag: ModificationTag | None = None,
    ) -> dict[str, Any]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            if tag is not None:
                if (tag.epoch, tag.index) != (record.mod_epoch, record.mod_index):
                    raise Conflict(f"modification_tag {tag.epoch}:{tag.index} is stale "
                                   f"(now {record.mod_epoch}:{record.mod_index})")
            current = _normalized(record.definition)
            if whole:
                merged = {**given}
                merged.setdefault("instances", record.instances)
                merged.setdefault("on_cell_loss", record.on_cell_loss)
                merged.setdefault("exec_enabled", record.definition.get("exec_enabled", True))
                merged.setdefault("diego", current.get("diego"))  # kept unless the body replaces it
            else:
                base = dict(current)
                if "artifacts" in given and "source_blob" not in given:
                    base.pop("source_blob", None)  # derived from the artifacts again
                merged = {**base, **given, "process_guid": process_guid}
            try:
                body = DesiredLRPCreate.model_validate(merged)
            except ValidationError as exc:
                raise _invalid(exc) from exc
            new = cast(DesiredDefinition, body.model_dump(mode="json"))
            new_version = definition_of(new) != definition_of(current)
            scale = body.instances != record.instances
            policy = body.on_cell_loss != record.on_cell_loss
            policy = policy or body.exec_enabled != record.definition.get("exec_enabled", True)
            # The Diego message (routes, annotation, ...: bbs/diego) changes no version; it is stored.
            diego = body.diego != current.get("diego")
            if not (new_version or scale or policy or diego):
                return {"desired_lrp": record.to_wire(), "new_version": False, "rollout": None}
            if body.instances > record.instances:
                total = (await tx.desired_totals())[1]
                check_scale(self.uow.settings, total, record.instances, body.instances)
            old_version = record.version
            record.instances, record.on_cell_loss = body.instances, body.on_cell_loss
            if new_version:
                await self._keep_version(tx, record)
                record.version = await self._next_version(tx, record)
                record.definition = new
                await tx.insert_version(VersionRecord(process_guid, record.version, now, new))
            else:
                record.definition = {**record.definition, "instances": body.instances,
                                     "on_cell_loss": body.on_cell_loss, "exec_enabled": body.exec_enabled,
                                     "diego": body.diego}
            record.mod_index += 1
            # A new Diego message is sealed with command and env: the row is written whole.
            await tx.update_desired(record, definition_changed=new_version or diego)
            wire = record.to_wire()
            effects.events.append(lambda: [event("desired_lrp_changed", wire, now)])
            actuals = ActualSet(await tx.list_actuals(process_guid=process_guid))
            if scale:
                await self._resize(tx, record, actuals, now, effects)
            rollout = None
            if new_version:
                rollout = await self._begin(
                    tx, record, actuals, "update", old_version, strategy or RolloutStrategy(), now, effects)
        if rollout is not None:
            self.wake()
        return {"desired_lrp": record.to_wire(), "new_version": new_version,
                "rollout": None if rollout is None else rollout.to_wire()}

    async def _keep_version(self, tx: Tx, record: DesiredRecord) -> None:
        """The current definition among the versions (an LRP desired before versions were kept has none)."""
        if await tx.get_version(record.process_guid, record.version) is None:
            await tx.insert_version(VersionRecord(record.process_guid, record.version, record.created_at,
                                                  record.definition))

    async def _next_version(self, tx: Tx, record: DesiredRecord) -> int:
        """One past every version made so far: a rolled-back version's number is never used again."""
        versions = await tx.list_versions(record.process_guid)
        return max([record.version, *(v.version for v in versions)]) + 1

    async def _resize(
        self, tx: Tx, record: DesiredRecord, actuals: ActualSet, now: float, effects: Effects
    ) -> None:
        actions = resize(record, actuals, now)
        changes = actuals.diff()
        await tx.apply_actual_changes(changes)
        effects.actual_events(changes)
        await self.uow.add_starts(tx, actions.starts, effects, known=record)
        await self.uow.add_stops(tx, actions.stops, effects)

    async def _begin(
        self, tx: Tx, record: DesiredRecord, actuals: ActualSet, kind: str, from_version: int,
        strategy: RolloutStrategy, now: float, effects: Effects,
    ) -> RolloutRecord:
        """A new rollout of `record` (its current version), superseding one still going."""
        history = await tx.list_rollouts(record.process_guid)
        seq = history[0][0] + 1 if history else 1
        for _, data in history:
            old = RolloutRecord.from_data(data)
            if old.active:
                # Its moves in flight end as evacuations do; the new rollout replaces what they start.
                old.state, old.finished_at, old.updated_at = FAILED, now, now
                old.reason = f"superseded by a {kind} to version {record.version}"
                old.in_flight.clear()
                await self._put(tx, old, effects, now)
        rollout = RolloutRecord(
            process_guid=record.process_guid, seq=seq, kind=kind, from_version=from_version,
            to_version=record.version, state=RUNNING_STATE, total=record.instances,
            max_in_flight=resolve_max_in_flight(strategy.max_in_flight, record.instances),
            auto_revert=strategy.auto_revert and kind == "update", canary=strategy.canary,
            started_at=now, updated_at=now,
        )
        rollout.done = rollout_done(rollout, actuals, record.instances)
        if rollout.done >= record.instances:
            rollout.state, rollout.finished_at = COMPLETED, now
        await self._put(tx, rollout, effects, now)
        return rollout

    async def _put(self, tx: Tx, rollout: RolloutRecord, effects: Effects, now: float) -> None:
        await tx.put_rollout(rollout.process_guid, rollout.seq, rollout.to_data())
        wire = rollout.to_wire()
        effects.rollout_changed(wire, now)

    # --- reads ---------------------------------------------------------------------------------

    async def latest(self, process_guid: str) -> dict[str, Any]:
        history = await self.history(process_guid)
        if not history:
            raise NotFound(f"desired LRP {process_guid!r} has no rollout")
        return history[0]

    async def history(self, process_guid: str) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            if await tx.get_desired(process_guid) is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            history = await tx.list_rollouts(process_guid)
        return [RolloutRecord.from_data(data).to_wire() for _, data in history]

    async def versions(self, process_guid: str) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            versions = await tx.list_versions(process_guid)
        if not any(v.version == record.version for v in versions):
            current = VersionRecord(process_guid, record.version, record.created_at, record.definition)
            versions.insert(0, current)
        return [
            {"version": v.version, "created_at": iso(v.created_at), "current": v.version == record.version,
             "definition": definition_of(v.definition)}
            for v in versions
        ]

    # --- actions -------------------------------------------------------------------------------

    async def _active(self, tx: Tx, process_guid: str) -> RolloutRecord | None:
        if await tx.get_desired(process_guid) is None:
            raise NotFound(f"desired LRP {process_guid!r} not found")
        history = await tx.list_rollouts(process_guid)
        if not history:
            return None
        latest = RolloutRecord.from_data(history[0][1])
        return latest if latest.active else None

    async def pause(self, process_guid: str) -> dict[str, Any]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            rollout = await self._active(tx, process_guid)
            if rollout is None or rollout.state not in MOVING:
                raise Conflict(f"desired LRP {process_guid!r} has no rollout running")
            # The moves in flight finish (or fail) as they would; no new one starts until resumed.
            rollout.paused_from = rollout.state
            rollout.state, rollout.reason, rollout.updated_at = PAUSED, "paused by an operator", now
            await self._put(tx, rollout, effects, now)
        return rollout.to_wire()

    async def resume(self, process_guid: str) -> dict[str, Any]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            rollout = await self._active(tx, process_guid)
            if rollout is None or rollout.state != PAUSED:
                raise Conflict(f"desired LRP {process_guid!r} has no paused rollout")
            if rollout.canary:
                rollout.canary_passed = True
            rollout.state = rollout.paused_from if rollout.paused_from in MOVING else RUNNING_STATE
            rollout.reason, rollout.updated_at = None, now
            await self._put(tx, rollout, effects, now)
        self.wake()
        return rollout.to_wire()

    async def undo(self, process_guid: str) -> dict[str, Any]:
        """Roll back to the version before the current one: a new rollout of kind `rollback`."""
        now = time.time()
        async with self.uow.write() as (tx, effects):
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            previous = [v for v in await tx.list_versions(process_guid) if v.version < record.version]
            if not previous:
                raise Conflict(f"desired LRP {process_guid!r} has no version before {record.version}")
            await self._keep_version(tx, record)
            back = previous[0]
            from_version = record.version
            await self.revert(tx, record, back, effects, now)
            actuals = ActualSet(await tx.list_actuals(process_guid=process_guid))
            rollout = await self._begin(tx, record, actuals, "rollback", from_version, RolloutStrategy(),
                                        now, effects)
        self.wake()
        return rollout.to_wire()

    async def revert(
        self, tx: Tx, record: DesiredRecord, version: VersionRecord, effects: Effects, now: float
    ) -> None:
        """Make `version` the desired LRP's definition again (instances, cell-loss policy and exec kept)."""
        record.definition = cast(DesiredDefinition, {
            **version.definition, "instances": record.instances, "on_cell_loss": record.on_cell_loss,
            "exec_enabled": record.definition.get("exec_enabled", True)})
        record.version = version.version
        record.mod_index += 1
        await tx.update_desired(record, definition_changed=True)
        wire = record.to_wire()
        effects.events.append(lambda: [event("desired_lrp_changed", wire, now)])

    async def restart(
        self, process_guid: str, all_at_once: bool, max_in_flight: int | str
    ) -> dict[str, Any]:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            record = await tx.get_desired(process_guid)
            if record is None:
                raise NotFound(f"desired LRP {process_guid!r} not found")
            actuals = ActualSet(await tx.list_actuals(process_guid=process_guid))
            strategy = RolloutStrategy(max_in_flight=max_in_flight, auto_revert=False)
            if all_at_once:
                # Every instance stopped and started again at once: the outage taken knowingly.
                indices = [i for i in range(record.instances) if actuals.get(process_guid, i) is not None]
                await self._restart_indices(tx, record, actuals, indices, now, effects)
            rollout = await self._begin(
                tx, record, actuals, "restart", record.version, strategy, now, effects)
            if all_at_once:
                rollout.state, rollout.finished_at = COMPLETED, now
                rollout.done = rollout.total
                await self._put(tx, rollout, effects, now)
        if not all_at_once:
            self.wake()
        return rollout.to_wire()

    async def restart_instance(self, process_guid: str, index: int) -> None:
        now = time.time()
        async with self.uow.write() as (tx, effects):
            record = await tx.get_desired(process_guid)
            actuals = ActualSet(await tx.list_actuals(process_guid=process_guid))
            if record is None or index >= record.instances or actuals.get(process_guid, index) is None:
                raise NotFound(f"desired LRP {process_guid!r} has no instance {index}")
            await self._restart_indices(tx, record, actuals, [index], now, effects)

    async def _restart_indices(
        self, tx: Tx, record: DesiredRecord, actuals: ActualSet, indices: list[int], now: float,
        effects: Effects,
    ) -> None:
        """Stop these indices' instances where they run and auction them again (retire-actual-lrp)."""
        stops = []
        for index in indices:
            row = actuals.get(record.process_guid, index, ORDINARY)
            if row is None:
                continue
            if row.state in (CLAIMED, RUNNING) and row.cell_id and row.instance_guid:
                stops.append(stop_of(row))
            actuals.replace(row, reset_to_unclaimed(row, now))
        changes = actuals.diff()
        await tx.apply_actual_changes(changes)
        effects.actual_events(changes)
        await self.uow.add_stops(tx, stops, effects)
        await self.uow.add_starts(tx, {record.process_guid: set(indices)}, effects, known=record)

