"""What every strategy provides: a picker that chooses one cell for one piece of work.

A picker is built once per auction over the shared `AuctionState`, told the batch (`note_batch`) and
asked, item by item in batch order, for a cell. It never reserves: the scheduler does, and tells every
picker's indexes through `state.on_reserve`. `filters` are the strategy's own filters beyond the common chain
(they feed the
failure breakdown); `diagnose` explains a miss.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..diagnosis import diagnose
from ..filters import Filter, Work, filter_chain
from ..state import AuctionState, CellSlot
from ..types import Failure, LRPStart, TaskStart


class Picker:
    name = "base"
    filters: Sequence[Filter] = ()

    def __init__(self, state: AuctionState) -> None:
        self.state = state
        self.config = state.config

    def note_batch(self, batch: Sequence[LRPStart | TaskStart]) -> None:
        """Told the auction's whole batch, in placing order, before the first pick; a strategy that
        plans across the batch keeps what it needs (the Diego strategy: what each zone is owed)."""

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:  # pragma: no cover - interface
        raise NotImplementedError

    def pick_task(self, item: TaskStart) -> CellSlot | None:  # pragma: no cover - interface
        raise NotImplementedError

    def diagnose(self, item: Work) -> Failure:
        return diagnose(self.state, item, self.filters)

    def chain(self, item: Work) -> tuple[Filter, ...]:
        return filter_chain(item, self.filters)

    def feasible_slots(self, item: Work, slots: Sequence[CellSlot] | None = None) -> list[CellSlot]:
        """Every cell (in input order) that passes the whole filter chain: the exhaustive way."""
        chain = self.chain(item)
        out = []
        for slot in self.state.slots if slots is None else slots:
            for f in chain:
                if f.rejects(slot, item):
                    break
            else:
                out.append(slot)
        return out
