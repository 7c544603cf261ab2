"""Why did this item land there (or nowhere)? Every cell, its verdict and its score components.

`explain` replays the batch with the reference engine up to the item in question, so the cell states
are exactly those the item met, then reports for every cell: the filter that rejected it (with the
filter's reason), or its score and the parts of the score. For the Diego strategy the parts are those of
`scoring.lrp_score`; other strategies report what their reference picker exposes through an optional
`components(slot, item) -> dict` method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .cell_offer import CellOffer
from .filters import Work, first_rejection
from .scheduler import begin
from .scoring import lrp_score_components, task_score
from .state import AuctionState
from .types import SchedulerConfig
from .work import LRPStart, TaskStart


@dataclass(slots=True)
class CellVerdict:
    cell_id: str
    zone: str
    rejected_by: str | None = None  # filter name
    reason: str = ""
    zone_instances: int = 0  # instances of the process already in this cell's zone (LRPs)
    components: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Explanation:
    item: str
    strategy: str
    chosen: str | None
    error: str = ""
    detail: str = ""
    cells: list[CellVerdict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "item": self.item, "strategy": self.strategy, "chosen": self.chosen,
            "error": self.error, "detail": self.detail,
            "cells": [
                {"cell_id": v.cell_id, "zone": v.zone, "rejected_by": v.rejected_by, "reason": v.reason,
                 "zone_instances": v.zone_instances, "components": v.components}
                for v in self.cells
            ],
        }


def _label(item: Work) -> str:
    return f"{item.process_guid}/{item.index}" if isinstance(item, LRPStart) else f"task {item.task_guid}"


def explain(
    cells: Sequence[CellOffer],
    target: tuple[str, int] | str,
    lrps: Sequence[LRPStart] = (),
    tasks: Sequence[TaskStart] = (),
    config: SchedulerConfig | None = None,
) -> Explanation:
    """Explain the placement of `target` — (process_guid, index) or a task guid — within this batch."""
    config = config or SchedulerConfig()
    state, batch, active = begin(cells, lrps, tasks, config, "reference")
    for item in batch:
        if isinstance(item, LRPStart):
            name = item.ask.strategy or config.strategy
            if item.key == target:
                return _explain_item(state, active[name], item, name)
            slot = active[name].pick_lrp(item)
            if slot is not None:
                state.reserve_lrp(slot, item)
        else:
            name = config.strategy
            if item.task_guid == target:
                return _explain_item(state, active[name], item, name)
            slot = active[name].pick_task(item)
            if slot is not None:
                state.reserve_task(slot, item)
    raise KeyError(f"{target!r} is not in the batch")


def _explain_item(state: AuctionState, picker, item: Work, strategy: str) -> Explanation:
    slot = picker.pick_lrp(item) if isinstance(item, LRPStart) else picker.pick_task(item)
    explanation = Explanation(_label(item), strategy, slot.cell_id if slot else None)
    if slot is None:
        failure = picker.diagnose(item)
        explanation.error, explanation.detail = failure.error, failure.detail
    chain = picker.chain(item)
    sw = state.config.starting_container_weight
    bw = state.config.bin_pack_first_fit_weight
    zone_counts = state.zone_instances(item.process_guid) if isinstance(item, LRPStart) else {}
    for cell in state.slots:
        verdict = CellVerdict(cell.cell_id, cell.zone, zone_instances=zone_counts.get(cell.zone, 0))
        rejecting = first_rejection(cell, item, chain)
        if rejecting is not None:
            verdict.rejected_by = rejecting.name
            verdict.reason = rejecting.summary([cell], item).split(" ", 1)[1]
        elif hasattr(picker, "components"):
            verdict.components = picker.components(cell, item)
        elif strategy != "diego":
            verdict.components = {"feasible": 1.0}
        elif isinstance(item, LRPStart):
            verdict.components = lrp_score_components(
                cell, item.ask.memory_mb, item.ask.disk_mb, item.process_guid, sw, bw, item.ask.source_blob,
                state.config.cache_weight,
            )
        else:
            verdict.components = {"score": task_score(cell, item.ask.memory_mb, item.ask.disk_mb, sw),
                                  "tasks": float(cell.task_count)}
        explanation.cells.append(verdict)
    return explanation
