"""Why work could not be placed: Diego's error string plus a breakdown a person can act on.

Diego reports the furthest compatibility stage any cell reached (rootfs, then volume drivers, then
placement tags); once some cell is compatible, the error is `insufficient resources: ...` naming the
sorted problems that every compatible cell has. The breakdown attributes every cell to the first filter
that rejects it: `0/12 cells fit: 5 stack mismatch, 7 insufficient memory (largest free 384 MB, need 512)`.

One reading of the verdicts (`_failure`) for both forms of the filters: the scalar form walks every
cell through the chain (the reference engines), the vectorised form reads each filter's mask over the
auction's columns (the fast engines); the two give the same failure.
"""

from __future__ import annotations

from collections.abc import Sequence

from .filters import Filter, Work, filter_chain, rejection_stages
from .slot import CellSlot
from .state import AuctionState
from .types import Failure
from .work import LRPStart

NO_CELLS = "unable to communicate to compatible cells"
INFLIGHT_LIMIT = "waiting to start instance: reached in-flight start limit"


def failure_for(item: Work, error: str, detail: str = "") -> Failure:
    if isinstance(item, LRPStart):
        return Failure(error=error, detail=detail, process_guid=item.process_guid, index=item.index)
    return Failure(error=error, detail=detail, task_guid=item.task_guid)


def diagnose(state: AuctionState, item: Work, strategy_filters: Sequence[Filter] = (),
             vectorised: bool = False) -> Failure:
    """The failure for `item` on the current state (a full scan: only called when nothing fits)."""
    if not state.slots:
        return failure_for(item, NO_CELLS, "0 cells present")
    chain = filter_chain(item, strategy_filters)
    first_resource = next(i for i, f in enumerate(chain) if f.resource)
    if vectorised:
        stages, masks = rejection_stages(state.columns, item, chain)
        stage_of = stages.tolist()
        reached = stages >= first_resource  # compatible with everything but resources
        problems = [f.name for f, mask in zip(chain[first_resource:], masks[first_resource:], strict=True)
                    if reached.any() and not mask[reached].any()]
    else:
        stage_of = [_first_stage(slot, item, chain) for slot in state.slots]
        problems = [
            f.name for f in chain[first_resource:]
            if any(stage >= first_resource for stage in stage_of)
            and all(f.rejects(slot, item) for slot, stage in zip(state.slots, stage_of, strict=True)
                    if stage >= first_resource)
        ]
    return failure_for(item, *_failure(state.slots, item, chain, stage_of, first_resource, problems))


def _first_stage(slot: CellSlot, item: Work, chain: Sequence[Filter]) -> int:
    for i, f in enumerate(chain):
        if f.rejects(slot, item):
            return i
    return len(chain)


def _failure(slots: Sequence[CellSlot], item: Work, chain: Sequence[Filter], stage_of: Sequence[int],
             first_resource: int, problems: Sequence[str]) -> tuple[str, str]:
    """(error, detail) from each cell's first rejecting filter (`len(chain)`: none) and the resource
    filters that reject every cell compatible but for resources."""
    furthest = max(stage_of)
    if furthest >= first_resource:
        # No problem in common: every compatible cell fits on resources alone, a strategy declined them all.
        error = (
            "insufficient resources: " + ", ".join(sorted(problems)) if problems else "insufficient resources"
        )
    else:
        error = chain[furthest].error(item)
    rejected: dict[int, list[CellSlot]] = {}
    for slot, stage in zip(slots, stage_of, strict=True):
        if stage < len(chain):
            rejected.setdefault(stage, []).append(slot)
    parts = [chain[i].summary(cells, item) for i, cells in sorted(rejected.items())]
    fitting = sum(1 for stage in stage_of if stage == len(chain))
    detail = f"{fitting}/{len(slots)} cells fit"
    if parts:
        detail += ": " + ", ".join(parts)
    return error, detail

