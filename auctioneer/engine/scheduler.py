"""The placement engine's entry point: cells and a batch of work in, assignments and failures out.

No I/O. The same driver serves both engines; they differ only in the pickers that choose cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from .batch import order_batch
from .diagnosis import INFLIGHT_LIMIT, failure_for
from .filters import invalid_request
from .state import AuctionState
from .strategies import pickers
from .strategies.base import Picker
from .types import (
    STRATEGIES,
    AuctionResult,
    Cell,
    LRPAssignment,
    LRPStart,
    SchedulerConfig,
    TaskAssignment,
    TaskStart,
)


def schedule(
    cells: Sequence[Cell],
    lrps: Sequence[LRPStart] = (),
    tasks: Sequence[TaskStart] = (),
    config: SchedulerConfig | None = None,
) -> AuctionResult:
    config = config or SchedulerConfig()
    factories = pickers(config.engine)
    for name in {config.strategy, *(lrp.strategy for lrp in lrps if lrp.strategy)}:
        if name not in factories:
            raise ValueError(f"unknown strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    state = AuctionState(cells, config)
    active: dict[str, Picker] = {}
    result = AuctionResult()

    def picker_for(name: str) -> Picker:
        picker = active.get(name)
        if picker is None:
            picker = active[name] = factories[name](state)
        return picker

    batch = order_batch(lrps, tasks)
    state.note_batch(batch)
    for item in batch:
        if state.inflight_limit_reached():
            result.failures.append(failure_for(item, INFLIGHT_LIMIT, f"{state.total_starting} starting"))
            continue
        if isinstance(item, LRPStart):
            invalid = invalid_request(item)
            if invalid:
                result.failures.append(failure_for(item, invalid))
                continue
            picker = picker_for(item.strategy or config.strategy)
            slot = picker.pick_lrp(item)
            if slot is None:
                result.failures.append(picker.diagnose(item))
            else:
                state.reserve_lrp(slot, item)
                result.lrp_assignments.append(LRPAssignment(item.process_guid, item.index, slot.cell_id))
        else:
            picker = picker_for(config.strategy)
            slot = picker.pick_task(item)
            if slot is None:
                result.failures.append(picker.diagnose(item))
            else:
                state.reserve_task(slot, item)
                result.task_assignments.append(TaskAssignment(item.task_guid, slot.cell_id))
    return result
