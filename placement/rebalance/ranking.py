"""Cells kept in order of a score over a rule's run of searches, so that finding an app's target does not
score every cell again: the load-mark and strategy-margin rules' targets (bounded work).

A ranking holds the cells of one zone that apps asking alike (the same size, the same non-resource
asks) can run on, by a score they share (the load mark; Diego's score of a cell holding none of the
app). Entries go stale as moves change cells: a search scores a popped cell again, and every cell a move
changed is pushed again with its new score (its old entry is then found stale), so a search always meets
the cells in their current order.

A search asks two things of a cell. `fits`: can it take an instance of this size now (room, critical
marks, the tolerances)? One that cannot leaves the ranking until a move changes it: every app of the
ranking would find the same (the means it is judged against barely move meanwhile). `suits`: may this
app's instance go there (another cell than its own, none of its instances there)? One that does not is
passed over and stays; a search gives up after passing over `PATIENCE` cells, so a plan stays bounded
however many cells an app already runs on.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

from ..slot import CellSlot
from .strategy_scores import CellScore

PATIENCE = 64


class Ranking:
    def __init__(self, score: CellScore, slots: list[CellSlot]) -> None:
        self.score = score
        self.members = {s.pos for s in slots}
        self.heap: list[tuple[float, int, CellSlot]] = [(score(s), s.pos, s) for s in slots]
        heapq.heapify(self.heap)

    def changed(self, slot: CellSlot) -> None:
        if slot.pos in self.members:
            heapq.heappush(self.heap, (self.score(slot), slot.pos, slot))

    def best(
        self, below: float, fits: Callable[[CellSlot], bool], suits: Callable[[CellSlot], bool]
    ) -> tuple[float, CellSlot] | None:
        """The lowest-scoring cell that fits and suits, scoring below `below`, with its score (ties:
        position); None when there is none, or none before PATIENCE cells were passed over."""
        heap, seen = self.heap, set()
        aside: list[tuple[float, int, CellSlot]] = []
        try:
            while heap and len(aside) < PATIENCE:
                score, pos, slot = heap[0]
                now = self.score(slot)
                if now != score:
                    heapq.heapreplace(heap, (now, pos, slot))
                elif score >= below:
                    return None
                elif pos in seen or not fits(slot):
                    heapq.heappop(heap)  # a duplicate entry; or full: back when a move changes it
                elif suits(slot):
                    return score, slot
                else:
                    seen.add(pos)
                    aside.append(heapq.heappop(heap))
            return None
        finally:
            for entry in aside:
                heapq.heappush(heap, entry)


class Rankings:
    """The rankings of one rule's run, by key, each made on first use; told of every cell a move changes."""

    def __init__(self) -> None:
        self.by_key: dict[Hashable, Ranking] = {}

    def get(
        self, key: Hashable, score: Callable[[], CellScore], slots: Callable[[], list[CellSlot]]
    ) -> Ranking:
        """The ranking of `key`, made from `score()` and `slots()` the first time."""
        found = self.by_key.get(key)
        if found is None:
            found = self.by_key[key] = Ranking(score(), slots())
        return found

    def changed(self, *slots: CellSlot) -> None:
        for ranking in self.by_key.values():
            for slot in slots:
                ranking.changed(slot)
