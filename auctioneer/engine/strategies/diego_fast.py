"""Diego's auction, fast: the same answers as `diego_reference`, without scoring every cell.

The reference scores every feasible cell for every item: O(cells) per placement, O(cells × items) per
batch. Here each zone keeps its cells in *pools* (same totals and same compatibility signature) and each
pool keeps its distinct cell states in a sorted list ordered by load key; cells in the same state form
one *bucket*. Why that suffices:

- Within a pool the totals are equal, so a cell's score for any item is its load key
  (mean used fraction + starting weight × starting [+ bin-pack weight × index]) plus an offset that
  depends only on the item, plus 1000 × instances of the process on the cell. The lowest-key fitting
  bucket holding a cell without the process is therefore the winner among such cells, up to
  floating-point rounding; buckets whose key lies within EPS of it are compared by exact score, computed
  by the very function the reference uses, so ties and near-ties resolve identically.
- Cells already holding the process (at most its instance count) carry +1000 per instance; they are
  scored exactly, one by one, only when they could still win.
- Every cell in a bucket has the same exact score, and members are kept in position order, so a bucket
  answers with its lowest-position member that does not hold the process — the reference's tie-break.
- Each pool keeps upper bounds of its free memory, disk and containers (tightened by every full scan
  that finds nothing, and valid because reservations only ever take), so "nothing fits here" is usually
  O(1): a batch larger than the cluster fails fast.

Work the index does not cover falls back to the reference code path: LRPs with request filters
(labels, volumes, ingress IP, devices), and tasks when a bin-pack weight is set. A miss is diagnosed with
numpy over all cells and cached per requirement until the state changes.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable

import numpy as np
from sortedcontainers import SortedList

from ..diagnosis import failure_for
from ..filters import COMPATIBILITY, RESOURCES, Work, request_filters
from ..scoring import lrp_score, task_score
from ..state import AuctionState, CellSlot
from ..types import Failure, LRPStart, TaskStart
from .diego_reference import DiegoReference

# Far above float64 rounding of scores (≲ 1e-12 here), far below any real score difference that matters.
EPS = 1e-9
HOLDER_MARGIN = 1000.0 - 1e-6


def _state_key(slot: CellSlot) -> tuple[int, int, int, int]:
    return (slot.avail_m, slot.avail_d, slot.avail_c, slot.starting)


class Bucket:
    """Cells of one pool in one identical state: identical scores for every item."""

    __slots__ = ("key", "state", "members")

    def __init__(self, key: float, state: tuple[int, int, int, int]) -> None:
        self.key = key
        self.state = state
        self.members: list[int] = []  # cell positions, ascending (kept with insort: buckets are small)


class Pool:
    """The cells of one zone that share totals and compatibility, ordered by load."""

    __slots__ = ("zone", "representative", "total", "order", "buckets", "bucket_of", "ub_m", "ub_d", "ub_c")

    def __init__(self, zone: str, representative: CellSlot) -> None:
        self.zone = zone
        self.representative = representative
        self.total = (representative.total_m, representative.total_d, representative.total_c)
        self.order: SortedList = SortedList()  # (load key, state) of each non-empty bucket
        self.buckets: dict[tuple[int, int, int, int], Bucket] = {}
        self.bucket_of: dict[int, Bucket] = {}
        self.ub_m = self.ub_d = self.ub_c = 0


class DiegoFast(DiegoReference):
    name = "diego"

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.sw = self.config.starting_container_weight
        self.bw = self.config.bin_pack_first_fit_weight
        self.pools: list[Pool] = []
        self.pool_of: list[Pool] = [None] * len(state.slots)  # type: ignore[list-item]
        self.zone_pools: dict[str, list[Pool]] = {z: [] for z in state.zone_names}
        for zone in state.zone_names:
            by_signature: dict[tuple, Pool] = {}
            for slot in state.zone_slots[zone]:
                signature = (slot.total_m, slot.total_d, slot.total_c, slot.stacks, slot.tags,
                             slot.optional_tags, slot.drivers)
                if self.bw:
                    signature += (slot.zone_pos,)  # the bin-pack term makes every cell's key its own
                pool = by_signature.get(signature)
                if pool is None:
                    pool = by_signature[signature] = Pool(zone, slot)
                    self.pools.append(pool)
                    self.zone_pools[zone].append(pool)
                self.pool_of[slot.pos] = pool
                self._insert(pool, slot)
                pool.ub_m = max(pool.ub_m, slot.avail_m)
                pool.ub_d = max(pool.ub_d, slot.avail_d)
                pool.ub_c = max(pool.ub_c, slot.avail_c)
        self.compatible: dict[tuple, set[int]] = {}  # requirement -> ids of compatible pools
        n = len(state.slots)
        # Free memory, disk and containers per cell, for the vectorised diagnosis.
        self.free_m = np.array([s.avail_m for s in state.slots], dtype=np.int64).reshape(n)
        self.free_d = np.array([s.avail_d for s in state.slots], dtype=np.int64).reshape(n)
        self.free_c = np.array([s.avail_c for s in state.slots], dtype=np.int64).reshape(n)
        self.compat_stage: dict[tuple, np.ndarray] = {}
        self.diagnoses: dict[tuple, tuple[int, str, str]] = {}
        state.on_reserve(self._on_reserve)

    # --- index maintenance ----------------------------------------------------------------------

    def _load_key(self, slot: CellSlot) -> float:
        tm, td, tc = slot.total_m or 1, slot.total_d or 1, slot.total_c or 1
        return ((tm - slot.avail_m) / tm + (td - slot.avail_d) / td + (tc - slot.avail_c) / tc) / 3.0 \
            + slot.starting * self.sw + slot.zone_pos * self.bw

    def _insert(self, pool: Pool, slot: CellSlot) -> None:
        state = _state_key(slot)
        bucket = pool.buckets.get(state)
        if bucket is None:
            bucket = pool.buckets[state] = Bucket(self._load_key(slot), state)
            pool.order.add((bucket.key, state))
        insort(bucket.members, slot.pos)
        pool.bucket_of[slot.pos] = bucket

    def _on_reserve(self, slot: CellSlot) -> None:
        pool = self.pool_of[slot.pos]
        bucket = pool.bucket_of[slot.pos]
        bucket.members.remove(slot.pos)
        if not bucket.members:
            pool.order.remove((bucket.key, bucket.state))
            del pool.buckets[bucket.state]
        self._insert(pool, slot)
        pos = slot.pos
        self.free_m[pos] = slot.avail_m
        self.free_d[pos] = slot.avail_d
        self.free_c[pos] = slot.avail_c

    # --- picking --------------------------------------------------------------------------------

    def _compatible_pools(self, item: Work) -> set[int]:
        requirement = (item.stack, item.placement_tags, item.volume_drivers)
        found = self.compatible.get(requirement)
        if found is None:
            found = {
                id(pool) for pool in self.pools
                if not any(f.rejects(pool.representative, item) for f in COMPATIBILITY)
            }
            self.compatible[requirement] = found
        return found

    def _best_in_pool(self, pool: Pool, item: Work, holders: dict[int, int], score_of) -> tuple[float, int] | None:
        """(exact score, position) of the pool's winner for the item, or None if nothing fits."""
        m, d = item.memory_mb, item.disk_mb
        if m > pool.ub_m or d > pool.ub_d or pool.ub_c < 1:
            return None
        slots = self.state.slots
        best: tuple[float, int] | None = None
        best_key = bound = 0.0
        max_m = max_d = max_c = 0
        complete = True
        for key, cell_state in pool.order:
            if best is not None and key > bound:
                complete = False
                break
            am, ad, ac, _starting = cell_state
            if am > max_m:
                max_m = am
            if ad > max_d:
                max_d = ad
            if ac > max_c:
                max_c = ac
            if am < m or ad < d or ac < 1:
                continue
            members = pool.buckets[cell_state].members
            pos = members[0]
            if pos in holders:
                pos = next((p for p in members if p not in holders), None)
            if pos is None:
                continue  # every cell in this state holds the process: scored below, with its +1000s
            candidate = (score_of(slots[pos]), pos)
            if best is None:
                best, best_key, bound = candidate, key, key + EPS
            elif candidate < best:
                best = candidate
        if complete and best is None:
            # Nothing in this pool fits and we have seen every cell state: tighten the bounds.
            pool.ub_m, pool.ub_d, pool.ub_c = max_m, max_d, max_c
        # A cell holding the process scores at least the pool's lowest key + 1000 (+ the same item
        # offset as the best): look at holders only when that could still beat the best found.
        if holders and (best is None or best_key - pool.order[0][0] >= HOLDER_MARGIN):
            for pos in holders:
                slot = slots[pos]
                if self.pool_of[pos] is pool and slot.fits(m, d):
                    candidate = (score_of(slot), pos)
                    if best is None or candidate < best:
                        best = candidate
        return best

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        if request_filters(item):
            return super().pick_lrp(item)
        compatible = self._compatible_pools(item)
        holders = self.state.proc_cells.get(item.process_guid, {})
        pg, m, d, sw, bw = item.process_guid, item.memory_mb, item.disk_mb, self.sw, self.bw

        def score_of(slot: CellSlot) -> float:
            return lrp_score(slot, m, d, pg, sw, bw)

        slots = self.state.slots
        for group in self.state.zone_groups(pg):
            # Within a group the reference keeps the first lowest score met: zone order, then cell order.
            best: tuple[float, int, int, int] | None = None  # (score, zone rank, index in zone, position)
            for rank, zone in enumerate(group):
                for pool in self.zone_pools[zone]:
                    if id(pool) not in compatible:
                        continue
                    found = self._best_in_pool(pool, item, holders, score_of)
                    if found is not None:
                        score, pos = found
                        candidate = (score, rank, slots[pos].zone_pos, pos)
                        if best is None or candidate < best:
                            best = candidate
            if best is not None:
                return slots[best[3]]
        return None

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        if self.bw:
            return super().pick_task(item)  # the LRP index carries the bin-pack term; tasks do not
        compatible = self._compatible_pools(item)
        holders = self.state.task_cells
        m, d, sw = item.memory_mb, item.disk_mb, self.sw

        def score_of(slot: CellSlot) -> float:
            return task_score(slot, m, d, sw)

        best: tuple[float, int] | None = None
        for pool in self.pools:
            if id(pool) in compatible:
                found = self._best_in_pool(pool, item, holders, score_of)
                if found is not None and (best is None or found < best):
                    best = found
        return None if best is None else self.state.slots[best[1]]

    # --- diagnosis --------------------------------------------------------------------------------

    def diagnose(self, item: Work) -> Failure:
        if request_filters(item) or not self.state.slots:
            return super().diagnose(item)
        requirement = (item.stack, item.placement_tags, item.volume_drivers, item.memory_mb, item.disk_mb)
        cached = self.diagnoses.get(requirement)
        if cached is None or cached[0] != self.state.version:
            error, detail = self._diagnose_vectorised(item)
            cached = self.diagnoses[requirement] = (self.state.version, error, detail)
        return failure_for(item, cached[1], cached[2])

    def _compat_stages(self, item: Work) -> np.ndarray:
        """Per cell: index of the first compatibility filter rejecting it, or len(COMPATIBILITY)."""
        requirement = (item.stack, item.placement_tags, item.volume_drivers)
        stages = self.compat_stage.get(requirement)
        if stages is None:
            stages = np.full(len(self.state.slots), len(COMPATIBILITY), dtype=np.int8)
            for pool in self.pools:
                stage = next((i for i, f in enumerate(COMPATIBILITY) if f.rejects(pool.representative, item)),
                             len(COMPATIBILITY))
                if stage < len(COMPATIBILITY):
                    positions = [p for p, owner in enumerate(self.pool_of) if owner is pool]
                    stages[positions] = stage
            self.compat_stage[requirement] = stages
        return stages

    def _diagnose_vectorised(self, item: Work) -> tuple[str, str]:
        """The same error and breakdown as diagnosis.diagnose, from arrays instead of a cell loop."""
        slots = self.state.slots
        stages = self._compat_stages(item)
        compatible = stages == len(COMPATIBILITY)
        am, ad, ac = self.free_m, self.free_d, self.free_c
        lack_m = am < item.memory_mb
        lack_d = ad < item.disk_mb
        lack_c = ac < 1
        rejected: list[tuple[object, Iterable[int]]] = []
        for i, f in enumerate(COMPATIBILITY):
            positions = np.flatnonzero(stages == i)
            if positions.size:
                rejected.append((f, positions))
        first_m = compatible & lack_m
        first_d = compatible & ~lack_m & lack_d
        first_c = compatible & ~lack_m & ~lack_d & lack_c
        for f, mask in zip(RESOURCES, (first_m, first_d, first_c), strict=True):
            positions = np.flatnonzero(mask)
            if positions.size:
                rejected.append((f, positions))
        fitting = int(np.count_nonzero(compatible & ~lack_m & ~lack_d & ~lack_c))
        if compatible.any():
            problems = [name for name, lack in (("containers", lack_c), ("disk", lack_d), ("memory", lack_m))
                        if lack[compatible].all()]
            error = "insufficient resources: " + ", ".join(problems) if problems else "insufficient resources"
        else:
            error = COMPATIBILITY[int(stages.max())].error(item)
        parts = [f.summary([slots[p] for p in positions], item) for f, positions in rejected]
        detail = f"{fitting}/{len(slots)} cells fit"
        if parts:
            detail += ": " + ", ".join(parts)
        return error, detail


__all__ = ["DiegoFast"]
