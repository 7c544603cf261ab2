"""The auction's pending work and the rep's bids into the engine's vocabulary (placement/wire.py), and the
engine's failures back into the BBS's report.

Kept lean because an auction converts 1,000 cells and 250,000 instances: a desired LRP's `Ask` is made
once per desired LRP object and shared by its instances, each of which is then four plain values.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.models import (
    AcceptedWork,
    LRPPlacementFailure,
    PlacementFailures,
    TaskPlacementFailure,
)
from placement.ask import Ask
from placement.types import Failure
from placement.wire import ask_of, task_start
from placement.wire import cell_offer as cell_from_state
from placement.work import LRPStart, TaskStart

from .batcher import PendingLRP, PendingTask

__all__ = ["cell_from_state", "lrp_starts", "placement_failures", "task_starts"]


def lrp_starts(items: Iterable[PendingLRP]) -> list[LRPStart]:
    """One LRPStart per instance; a desired LRP's ask is made once per desired LRP object."""
    asks: dict[int, tuple[str, Ask, int]] = {}
    starts: list[LRPStart] = []
    append = starts.append
    for item in items:
        desired = item.desired
        found = asks.get(id(desired))
        if found is None:
            found = asks[id(desired)] = (desired.process_guid, ask_of(desired), desired.instances)
        process_guid, ask, total = found
        append(LRPStart(process_guid, item.index, ask, total))
    return starts


def task_starts(items: Iterable[PendingTask]) -> list[TaskStart]:
    return [task_start(item.task) for item in items]


def placement_failures(
    failures: Iterable[Failure], accepted: dict[str, AcceptedWork] | None = None
) -> PlacementFailures:
    """An auction's report to the BBS: its failures, and what each cell accepted."""
    body = PlacementFailures(accepted=accepted or {})
    for f in failures:
        if f.task_guid is not None:
            body.tasks.append(TaskPlacementFailure(task_guid=f.task_guid, error=f.error, detail=f.detail))
        elif f.process_guid is not None and f.index is not None:
            body.lrps.append(
                LRPPlacementFailure(
                    process_guid=f.process_guid, index=f.index, error=f.error, detail=f.detail
                )
            )
    return body
