"""Cells: the reps' heartbeats (group-committed, urgent), an operator's cordon, drain and uncordon, the
removal of a cell gone for good, and the cell listing."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Literal, cast

from common.group_commit import GroupCommit
from common.models import CellPresence

from ..convergence import evacuate, forget_rebooted_cell, undrain
from ..errors import Conflict, NotFound
from ..events import event
from ..records import EVACUATING, ORDINARY, RUNNING, CellRecord, StoredPresence
from ..unit_of_work import Effects, UnitOfWork
from .actual_lrps import rework_cell
from .tasks import fail_tasks_of

log = logging.getLogger("bbs.cells")

# What a heartbeat does not say: the BBS's own view of the cell (CellPresence), never stored from a rep's
# body.
BBS_CELL_FIELDS = {"expires_at", "cordoned", "draining", "state"}
CellMode = Literal["cordon", "uncordon", "drain"]


class Cells:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow
        # list_json's: cell_id -> (presence, expires_at, cordoned, draining, present, the cell's JSON)
        self._encoded: dict[str, tuple[StoredPresence, float, bool, bool, bool, str]] = {}
        self._batcher: GroupCommit[tuple[str, CellPresence], bool] = GroupCommit(self._heartbeat_batch)

    async def heartbeat(self, cell_id: str, body: CellPresence) -> bool:
        """A cell's presence, alive for the TTL; whether the cell is cordoned (the rep then refuses work for
        it, should an auction that started before the cordon place some). Heartbeats arriving together share
        a transaction."""
        return await self._batcher.submit((cell_id, body))

    async def _heartbeat_batch(self, batch: list[tuple[str, CellPresence]]) -> list[bool]:
        now = time.time()
        latest = {cell_id: body for cell_id, body in batch}  # a cell twice in one batch: its last word
        records = {
            cell_id: CellRecord(
                cell_id,
                cast(StoredPresence, body.model_dump(mode="json", exclude=BBS_CELL_FIELDS)),
                expires_at=now + self.uow.settings.presence_ttl,
            )
            for cell_id, body in latest.items()
        }
        # Urgent: a heartbeat stuck behind bulk writes would let presences expire under load.
        async with self.uow.write(urgent=True) as (tx, effects):
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
            for r in appeared:
                effects.cell_changed(now, "appeared", r.cell_id)
            for cell_id, record in records.items():  # a rep shutting down (SIGTERM) starts evacuating
                if record.evacuating and (cell_id not in existing or not existing[cell_id].evacuating):
                    effects.cell_changed(now, "evacuating", cell_id)
            if appeared:
                effects.events.append(lambda: [event("cell_appeared", r.to_wire(), now) for r in appeared])
            rebooted = rebooted_cells(existing, latest)
            for cell_id in rebooted:
                held = await tx.list_actuals(cell_id=cell_id)
                await rework_cell(self.uow, tx, held, forget_rebooted_cell, cell_id, now, effects)
            if rebooted:
                await fail_tasks_of(tx, rebooted, now, effects)
                effects.wake_convergence = True  # what the rep had accepted, not claimed, is auctioned again
            # An evacuating rep (SIGTERM) or a cell the operator drains: what runs there now (what was
            # starting at the last heartbeat runs by this one) gets a replacement elsewhere.
            for cell_id in (i for i, body in latest.items() if body.evacuating or records[i].draining):
                running = await tx.list_actuals(cell_id=cell_id, state=RUNNING, presence=ORDINARY)
                await rework_cell(self.uow, tx, running, evacuate, cell_id, now, effects)
        cordoned = {cell_id for cell_id, r in records.items() if r.cordoned or r.draining}
        return [cell_id in cordoned for cell_id, _ in batch]

    async def remove(self, cell_id: str) -> None:
        """Forget a cell that is gone for good (`vendue cells remove`): everything it held is placed again
        at once, whatever the LRPs' `on_cell_loss` (its ORDINARY instances are auctioned again, its
        suspect and evacuating ones dropped, their indices replaced by the next convergence pass), and its
        row is deleted. A cell that heartbeats is refused (Conflict): stop or drain its rep first."""
        now = time.time()
        async with self.uow.write(Effects(wake_convergence=True)) as (tx, effects):
            cell = await tx.get_cell(cell_id)
            if cell is None:
                raise NotFound(f"no cell {cell_id!r}")
            if cell.present(now):
                raise Conflict(f"cell {cell_id!r} is present (its rep heartbeats): stop or drain it first")
            held = await tx.list_actuals(cell_id=cell_id)
            await rework_cell(self.uow, tx, held, forget_rebooted_cell, cell_id, now, effects)
            await tx.delete_cells([cell_id])
            wire = cell.to_wire()
            effects.events.append(lambda: [event("cell_removed", wire, now)])
            effects.cell_changed(now, "removed", cell_id)
        log.info("cell removed", extra={"data": {"cell_id": cell_id, "instances": len(held)}})

    async def list_all(self, *, expired: bool = False) -> list[dict[str, Any]]:
        """The cell states: present cells (and, with `expired`, those whose presence expired, not yet
        forgotten), each with its last heartbeat's capacity and the operator's flags."""
        now = time.time()
        async with self.uow.read() as tx:
            return [c.to_wire(now) for c in await tx.list_cells(present_at=None if expired else now)]

    async def list_json(self, *, expired: bool = False) -> str:
        """`list_all` as the JSON text {"items": [...]} (compact separators). The auctioneer lists every
        cell each auction, and a cell's state changes only at its heartbeats and the operator's flags:
        each cell's JSON is kept with what it was made from and made again only when that changed."""
        now = time.time()
        async with self.uow.read() as tx:
            cells = await tx.list_cells(present_at=None if expired else now)
        encoded = self._encoded
        if len(encoded) > 4 * len(cells) + 64:
            encoded.clear()  # cells gone for good
        parts = []
        for cell in cells:
            present = cell.present(now)
            made = encoded.get(cell.cell_id)
            # The presence dict is compared by identity (store/cells.py shares one per stored text), and kept
            # here, so its id cannot be reused by another dict meanwhile.
            if (made is None or made[0] is not cell.presence
                    or made[1:5] != (cell.expires_at, cell.cordoned, cell.draining, present)):
                text = json.dumps(cell.to_wire(now), separators=(",", ":"))
                made = encoded[cell.cell_id] = (
                    cell.presence, cell.expires_at, cell.cordoned, cell.draining, present, text
                )
            parts.append(made[5])
        return '{"items":[' + ",".join(parts) + "]}"

    async def set_mode(self, cell_id: str, mode: CellMode) -> dict[str, Any]:
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
        async with self.uow.write() as (tx, effects):
            cell = await tx.get_cell(cell_id)
            if cell is None:
                raise NotFound(f"no cell {cell_id!r}")
            was_draining = cell.draining
            await tx.set_cell_flags(cell_id, cordoned=cordoned, draining=draining)
            cell.cordoned, cell.draining = cordoned, draining
            if draining:
                running = await tx.list_actuals(cell_id=cell_id, state=RUNNING, presence=ORDINARY)
                await rework_cell(self.uow, tx, running, evacuate, cell_id, now, effects)
            elif was_draining:
                moving = await tx.list_actuals(cell_id=cell_id, presence=EVACUATING)
                await rework_cell(self.uow, tx, moving, undrain, cell_id, now, effects)
            wire = cell.to_wire(now)
            effects.events.append(lambda: [event("cell_changed", wire, now)])
            effects.cell_changed(now, "draining" if draining else "cordoned" if cordoned else "uncordoned",
                                 cell_id)
        log.info(
            f"cell {mode}", extra={"data": {"cell_id": cell_id, "cordoned": cordoned, "draining": draining}}
        )
        if cell.rep_url:
            self.uow.outbound.cordon_cell(cell, cordoned)
        return wire


def rebooted_cells(existing: dict[str, CellRecord], latest: dict[str, CellPresence]) -> list[str]:
    """Cells whose heartbeat carries a boot id other than the one the BBS last saw."""
    rebooted = []
    for cell_id, body in latest.items():
        before = existing.get(cell_id)
        seen = before.boot_id if before is not None else ""
        if seen and body.boot_id and seen != body.boot_id:
            rebooted.append(cell_id)
    return rebooted
