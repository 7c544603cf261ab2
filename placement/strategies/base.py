"""What every strategy provides: a picker that chooses one cell for one piece of work.

A picker is built once per auction over the shared `AuctionState`, told the batch (`note_batch`) and
asked, item by item in batch order, for a cell. It never reserves: the scheduler does, and tells every
picker's indexes through `state.on_reserve`. `filters` are the strategy's own filters beyond the
common chain (they feed the failure breakdown); `diagnose` explains a miss.

No picker checks a constraint itself: it asks the filters (filters/registry.py) which cells pass, in
their scalar form (`Picker.feasible_slots`, the reference engines) or their vectorised form
(`FastPicker.feasible_positions`, the fast engines), and the diagnosis reads the same filters.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..diagnosis import diagnose, failure_for
from ..filters import (
    Filter,
    RequestFilter,
    StaticFilter,
    Work,
    admitted,
    filter_chain,
    request_filters,
    requirement,
)
from ..slot import CellSlot
from ..state import AuctionState
from ..types import Failure
from ..work import LRPStart, TaskStart


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


class FastPicker(Picker):
    """A picker of the fast engine: feasibility and diagnosis from the filters' vectorised forms."""

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.cells = state.columns
        # the request filters an item asks for -> its chain's static filters and the others
        self._chains: dict[tuple[RequestFilter, ...], tuple[tuple[Filter, ...], tuple[Filter, ...]]] = {}
        # (request filters, requirement) -> the cells the chain's static filters admit
        self._static: dict[Hashable, np.ndarray] = {}
        # what the chain reads of an item -> (state version, error, detail): a batch larger than the
        # cluster fails many alike items on an unchanged state
        self.diagnoses: dict[Hashable, tuple[int, str, str]] = {}

    def feasible_positions(self, item: Work) -> np.ndarray:
        """Ascending positions of the cells passing the whole chain: `feasible_slots`, vectorised.

        Filters are a conjunction, so the static ones are applied first, as one mask cached per
        requirement (an item costs a dictionary look-up for them), then the others."""
        wanted = request_filters(item)
        parts = self._chains.get(wanted)
        if parts is None:
            chain = filter_chain(item, self.filters)
            parts = self._chains[wanted] = (tuple(f for f in chain if isinstance(f, StaticFilter)),
                                            tuple(f for f in chain if not isinstance(f, StaticFilter)))
        static, dynamic = parts
        key = (wanted, requirement(item, self.filters))
        mask = self._static.get(key)
        if mask is None:
            mask = self._static[key] = admitted(self.cells, item, static)
        for f in dynamic:
            mask = mask & f.admits(self.cells, item)
        return mask.nonzero()[0]  # ascending; np.flatnonzero's own way, less its Python wrapper

    def diagnose(self, item: Work) -> Failure:
        key = requirement(item, self.filters)
        cached = self.diagnoses.get(key)
        if cached is None or cached[0] != self.state.version:
            failure = diagnose(self.state, item, self.filters, vectorised=True)
            cached = self.diagnoses[key] = (self.state.version, failure.error, failure.detail)
        return failure_for(item, cached[1], cached[2])
