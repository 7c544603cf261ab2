"""The placement engine's entry point: cells and a batch of work in, assignments and failures out.

No I/O. The same driver serves both engines; they differ only in the pickers that choose cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from .ask import STRATEGIES
from .batch import order_batch
from .cell_offer import CellOffer
from .diagnosis import INFLIGHT_LIMIT, failure_for
from .filters import invalid_request
from .placement_trace import PlacementTrace
from .state import AuctionState
from .strategies import pickers
from .strategies.base import Picker
from .types import AuctionResult, LRPAssignment, SchedulerConfig, TaskAssignment
from .work import LRPStart, TaskStart


def begin(
    cells: Sequence[CellOffer],
    lrps: Sequence[LRPStart],
    tasks: Sequence[TaskStart],
    config: SchedulerConfig,
    engine: str,
) -> tuple[AuctionState, list[LRPStart | TaskStart], dict[str, Picker]]:
    """The auction's state, its batch in placing order, and one picker per strategy the batch names,
    each told the whole batch before the first pick (all made first, so each sees the state as the
    batch found it)."""
    factories = pickers(engine)
    names = sorted({config.strategy, *(lrp.ask.strategy for lrp in lrps if lrp.ask.strategy)})
    for name in names:
        if name not in factories:
            raise ValueError(f"unknown strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    state = AuctionState(cells, config, {lrp.process_guid for lrp in lrps})
    batch = order_batch(lrps, tasks, len(state.zone_names), lambda pg: sum(state.zone_instances(pg).values()))
    state.note_batch(batch)
    active = {name: factories[name](state) for name in names}
    for picker in active.values():
        picker.note_batch(batch)
    return state, batch, active


def schedule(
    cells: Sequence[CellOffer],
    lrps: Sequence[LRPStart] = (),
    tasks: Sequence[TaskStart] = (),
    config: SchedulerConfig | None = None,
    trace: PlacementTrace | None = None,
) -> AuctionResult:
    """`trace`: record why each LRP instance went where it did (placement_trace.py); None costs nothing."""
    config = config or SchedulerConfig()
    state, batch, active = begin(cells, lrps, tasks, config, config.engine)
    if trace is not None:
        trace.begin(state, active)
    result = AuctionResult()
    # id of an app's ask (alive as long as the batch) -> (why it is invalid or None, its strategy): read
    # once per app, not per instance
    per_ask: dict[int, tuple[str | None, str]] = {}
    for item in batch:
        if state.inflight_limit_reached():
            result.failures.append(failure_for(item, INFLIGHT_LIMIT, f"{state.total_starting} starting"))
            if trace is not None:
                trace.failed(result.failures[-1])
            continue
        if isinstance(item, LRPStart):
            ask = item.ask
            found = per_ask.get(id(ask))
            if found is None:
                found = per_ask[id(ask)] = (invalid_request(item), ask.strategy or config.strategy)
            invalid, name = found
            if invalid:
                result.failures.append(failure_for(item, invalid))
                if trace is not None:
                    trace.failed(result.failures[-1])
                continue
            picker = active[name]
            slot = picker.pick_lrp(item)
            if slot is None:
                result.failures.append(picker.diagnose(item))
                if trace is not None:
                    trace.failed(result.failures[-1])
            else:
                if trace is not None:
                    trace.placed(picker, name, item, slot)
                state.reserve_lrp(slot, item)
                result.lrp_assignments.append(LRPAssignment(item.process_guid, item.index, slot.cell_id))
        else:
            picker = active[config.strategy]
            slot = picker.pick_task(item)
            if slot is None:
                result.failures.append(picker.diagnose(item))
            else:
                state.reserve_task(slot, item)
                result.task_assignments.append(TaskAssignment(item.task_guid, slot.cell_id))
    return result
