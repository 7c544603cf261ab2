"""A rebalancing move on the actual LRPs, make-before-break: pure decisions, no I/O.

A move is a drain's evacuation (bbs/convergence.py `evacuate`) aimed at one instance: the RUNNING
ORDINARY instance becomes EVACUATING and keeps serving, an UNCLAIMED replacement is auctioned, and the
lifecycle stops the old one once the replacement reports RUNNING (bbs/lifecycle.py). What is new here is
the way back: a replacement that crashes or does not run in time is dropped (stopped where a cell claimed
it) and the old instance is the index's instance again.

And the planner's input: the state the BBS holds, turned into the engine's plain data by the one
adapter (placement/wire.py: cells with what they hold, one placement request per app), so that
placement/rebalance/ judges moves with the auction's own filters and score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Literal

from placement.cell_offer import CellOffer, Resources
from placement.rebalance import Placed
from placement.wire import ask_of, stored_cell_offer, stored_placement_fields
from placement.work import LRPStart

from .actual_set import ActualSet
from .lifecycle import Stop, stop_of
from .records import (
    CLAIMED,
    CRASHED,
    EVACUATING,
    KEEP_REPLICAS,
    ORDINARY,
    RUNNING,
    ActualRecord,
    CellRecord,
    DesiredRecord,
    changed,
    unclaimed,
)

Outcome = Literal["moving", "completed", "failed", "lost"]


def start_move(actuals: ActualSet, process_guid: str, index: int, from_cell: str, now: float) -> bool:
    """Make the instance on `from_cell` EVACUATING and add its UNCLAIMED replacement (to auction). False,
    changing nothing, when the index is not a lone RUNNING ORDINARY instance on that cell any more."""
    row = actuals.get(process_guid, index)
    if row is None or row.state != RUNNING or row.cell_id != from_cell or actuals.other(process_guid, index):
        return False
    actuals.replace(row, changed(row, presence=EVACUATING))
    replacement = unclaimed(process_guid, index, row.domain, now)
    actuals.put(dataclasses.replace(replacement, crash_count=row.crash_count))
    return True


def move_outcome(actuals: ActualSet, process_guid: str, index: int, crash_count: int) -> Outcome:
    """Where a started move stands: `completed` (the replacement runs and the old one is gone), `failed`
    (the replacement crashed: its crash count rose above the old instance's), `lost` (the old instance
    is gone without a running replacement, its cell lost), else `moving`."""
    old = actuals.get(process_guid, index, EVACUATING)
    new = actuals.get(process_guid, index)
    if new is not None and (new.state == CRASHED or new.crash_count > crash_count):
        return "failed" if old is not None else "lost"
    if old is None:
        return "completed" if new is not None and new.state == RUNNING else "lost"
    return "moving"


def abandon_move(actuals: ActualSet, process_guid: str, index: int) -> list[Stop]:
    """Keep the old instance: drop the replacement (the stop it needs, where a cell claimed it) and make
    the EVACUATING instance the index's instance again. Nothing to do once the old one is gone."""
    old = actuals.get(process_guid, index, EVACUATING)
    if old is None:
        return []
    stops: list[Stop] = []
    new = actuals.get(process_guid, index)
    if new is not None:
        actuals.remove(new)
        if new.state in (CLAIMED, RUNNING) and new.cell_id and new.instance_guid:
            stops.append(stop_of(new))
    actuals.replace(old, changed(old, presence=ORDINARY))
    return stops


# --- the planner's input ------------------------------------------------------------------------------

def placement_request(desired: DesiredRecord) -> LRPStart:
    """The app's placement request as the auction sees it, from its stored definition (placement/wire.py:
    every placement field, source blob and affinity included)."""
    ask = ask_of(stored_placement_fields(desired.definition))
    return LRPStart(desired.process_guid, 0, ask, desired.instances)


def pinned(desired: DesiredRecord, request: LRPStart) -> bool:
    """Instances that never move: keep-replicas LRPs, and those asking for what a placement uses up of a
    cell's offers (volumes, ingress IPs, devices: the heartbeats the BBS holds do not carry them)."""
    return desired.on_cell_loss == KEEP_REPLICAS or request.ask.uses_up_offers


def planner_cells(
    cells: Sequence[CellRecord], actuals: Iterable[ActualRecord], requests: dict[str, LRPStart]
) -> tuple[list[CellOffer], list[Placed]]:
    """The schedulable cells (present, not cordoned) with what each holds taken from its total, and the
    instances that could move: RUNNING ORDINARY ones with no evacuating or suspect copy."""
    by_id = {
        record.cell_id: stored_cell_offer(record.cell_id, record.presence)
        for record in cells
        if not (record.cordoned or record.draining or record.evacuating)
    }
    placed: list[Placed] = []
    others: set[tuple[str, int]] = set()
    rows = list(actuals)
    for row in rows:
        if row.presence != ORDINARY:
            others.add((row.process_guid, row.index))
    for row in rows:
        cell, item = by_id.get(row.cell_id), requests.get(row.process_guid)
        if cell is None or item is None or row.state not in (CLAIMED, RUNNING):
            continue
        a, ask = cell.available, item.ask
        cell.available = Resources(a.memory_mb - ask.memory_mb, a.disk_mb - ask.disk_mb, a.containers - 1)
        if row.presence != ORDINARY:
            continue  # holds its room, but is not one of the app's instances there
        cell.lrp_counts[row.process_guid] = cell.lrp_counts.get(row.process_guid, 0) + 1
        if row.state == RUNNING and (row.process_guid, row.index) not in others:
            placed.append(Placed(row.process_guid, row.index, row.cell_id))
    return list(by_id.values()), placed
