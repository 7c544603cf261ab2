"""Why work could not be placed: Diego's error string plus a breakdown a person can act on.

Diego reports the furthest compatibility stage any cell reached (rootfs, then volume drivers, then
placement tags); once some cell is compatible, the error is `insufficient resources: ...` naming the
sorted problems that every compatible cell has. The breakdown attributes every cell to the first filter
that rejects it: `0/12 cells fit: 5 stack mismatch, 7 insufficient memory (largest free 384 MB, need 512)`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .filters import Filter, Work, filter_chain
from .state import AuctionState
from .types import Failure, LRPStart

NO_CELLS = "unable to communicate to compatible cells"
INFLIGHT_LIMIT = "waiting to start instance: reached in-flight start limit"


def failure_for(item: Work, error: str, detail: str = "") -> Failure:
    if isinstance(item, LRPStart):
        return Failure(error=error, detail=detail, process_guid=item.process_guid, index=item.index)
    return Failure(error=error, detail=detail, task_guid=item.task_guid)


def diagnose(state: AuctionState, item: Work, strategy_filters: Sequence[Filter] = ()) -> Failure:
    """The failure for `item` on the current state (a full scan: only called when nothing fits)."""
    if not state.slots:
        return failure_for(item, NO_CELLS, "0 cells present")
    chain = filter_chain(item, strategy_filters)
    rejected: dict[int, list] = {}
    furthest = -1
    problems: set[str] | None = None
    fitting = 0
    first_resource = next(i for i, f in enumerate(chain) if f.resource)
    for slot in state.slots:
        stage = len(chain)
        for i, f in enumerate(chain):
            if f.rejects(slot, item):
                stage = i
                rejected.setdefault(i, []).append(slot)
                break
        if stage == len(chain):
            fitting += 1
        if stage >= first_resource:
            lacking = slot.lacking(item.memory_mb, item.disk_mb)
            problems = lacking if problems is None else problems & lacking
        furthest = max(furthest, stage)
    if furthest >= first_resource:
        error = "insufficient resources: " + ", ".join(sorted(problems or ()))
        if not problems:
            # Every compatible cell fits on resources alone: a strategy declined them all.
            error = "insufficient resources"
    else:
        error = chain[furthest].error(item)
    parts = [chain[i].summary(cells, item) for i, cells in sorted(rejected.items())]
    detail = f"{fitting}/{len(state.slots)} cells fit"
    if parts:
        detail += ": " + ", ".join(parts)
    return failure_for(item, error, detail)
