"""Diego's auction, fast: the same answers as `diego_reference`, without scoring every cell.

The reference scores every feasible cell for every item: O(cells) per placement, O(cells × items) per
batch. Here each zone keeps its cells in *pools* (same totals and same compatibility signature) and each
pool keeps its distinct cell states in a sorted list ordered by load key; cells in the same state form
one *bucket*. Why that suffices:

- Within a pool the totals are equal, so a cell's score for any item is its load key
  (mean used fraction + starting weight × starting [+ bin-pack weight × index]) plus an offset that
  depends only on the item, plus 1000 × its count of the process (tasks: of tasks), up to
  floating-point rounding. Candidates whose approximate score lies within EPS of the lowest met are
  compared by exact score, computed by the very function the reference uses, so ties and near-ties
  resolve identically.
- The +1000s: each pool also keeps, per process (and one for tasks), its cells grouped by that count —
  *levels*, built on first use and kept current through `state.on_count`. A cell of level c scores at
  least the pool's lowest key + 1000 c, so the winner is searched for in the pool's lowest level, and in
  higher ones only while their +1000s could still win (a starting weight large enough to outweigh an
  instance, or nothing of the lowest level fits). The lowest level is looked for in load order; when it
  has few cells, or that search runs longer than the level has cells (its cells are rare among the
  least loaded: the app is on most of them), its cells are scored directly. An app with more instances
  than there are cells thus costs about as much per instance as a small one, instead of one exact score
  per cell already holding it.
- Every cell in a bucket has the same state, so a bucket answers with its member of the lowest count,
  then the lowest position — the reference's tie-break.
- Each pool keeps upper bounds of its free memory, disk and containers (tightened by every scan that
  sees every state, and valid because reservations only ever take), so "nothing fits here" is usually
  O(1): a batch larger than the cluster fails fast.

- Zones are visited exactly as the reference visits them (`zone_room.zone_groups`: by count of the
  process, then by room for the item), and within a group the first lowest score met wins, so the
  winner of each group is the (score, zone rank, index in zone) minimum over the group's pools.

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
from ..scoring import LOCALITY_OFFSET, lrp_score, task_score
from ..state import AuctionState, CellSlot
from ..types import Failure, LRPStart, TaskStart
from .diego_reference import DiegoReference
from .zone_room import zone_groups

# Far above float64 rounding of scores (≲ 1e-12 here), far below any real score difference that matters.
EPS = 1e-9
# Rounding grows with the score's size (1000 × instances of the process): a relative allowance on top.
REL = 1e-13
INF = float("inf")
# A level of at most this many cells is scored directly rather than looked for in the load order.
DIRECT = 8
TASKS = None  # the level-index key of tasks (their count term is tasks on the cell)
EMPTY: dict = {}  # never written to


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

    __slots__ = ("zone", "representative", "total", "order", "buckets", "bucket_of", "ub_m", "ub_d", "ub_c",
                 "positions")

    def __init__(self, zone: str, representative: CellSlot) -> None:
        self.zone = zone
        self.representative = representative
        self.total = (representative.total_m, representative.total_d, representative.total_c)
        self.order: SortedList = SortedList()  # (load key, state) of each non-empty bucket
        self.buckets: dict[tuple[int, int, int, int], Bucket] = {}
        self.bucket_of: dict[int, Bucket] = {}
        self.ub_m = self.ub_d = self.ub_c = 0
        self.positions: list[int] = []  # every cell of the pool, ascending


class Levels:
    """The cells of one pool grouped by their count of one process's instances (or of tasks)."""

    __slots__ = ("sets", "held", "zero")

    def __init__(self) -> None:
        self.sets: dict[int, set[int]] = {}  # count ≥ 1 -> positions (no empty sets)
        self.held = 0  # cells with a count ≥ 1
        self.zero: set[int] | None = None  # cells with a count of 0, once asked for (then kept current)


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
                pool.positions.append(slot.pos)
                self._insert(pool, slot)
                pool.ub_m = max(pool.ub_m, slot.avail_m)
                pool.ub_d = max(pool.ub_d, slot.avail_d)
                pool.ub_c = max(pool.ub_c, slot.avail_c)
        self.smallest_pool = min((len(pool.positions) for pool in self.pools), default=0)
        self.compatible: dict[tuple, set[int]] = {}  # requirement -> ids of compatible pools
        # process guid (TASKS for tasks) -> pool -> its cells by count; built once the process holds nearly
        # as many cells as a pool has (before, every pool has many cells without it), then kept current
        self.levels: dict[str | None, dict[Pool, Levels]] = {}
        n = len(state.slots)
        # Free memory, disk and containers per cell, for the vectorised diagnosis.
        self.free_m = np.array([s.avail_m for s in state.slots], dtype=np.int64).reshape(n)
        self.free_d = np.array([s.avail_d for s in state.slots], dtype=np.int64).reshape(n)
        self.free_c = np.array([s.avail_c for s in state.slots], dtype=np.int64).reshape(n)
        self.compat_stage: dict[tuple, np.ndarray] = {}
        self.diagnoses: dict[tuple, tuple[int, str, str]] = {}
        state.on_reserve(self._on_reserve)
        state.on_count(self._on_count)

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

    def _on_count(self, slot: CellSlot, key: str | None, n: int) -> None:
        index = self.levels.get(key)
        if index is None:
            return
        pos = slot.pos
        pool = self.pool_of[pos]
        levels = index.get(pool)
        if levels is None:
            levels = index[pool] = Levels()
        sets = levels.sets
        if n > 1:
            below = sets[n - 1]
            below.discard(pos)
            if not below:
                del sets[n - 1]
        else:
            levels.held += 1
            if levels.zero is not None:
                levels.zero.discard(pos)
        level = sets.get(n)
        if level is None:
            sets[n] = {pos}
        else:
            level.add(pos)

    def _level_index(self, key: str | None, counts: dict[int, int]) -> dict[Pool, Levels]:
        index = self.levels.get(key)
        if index is None:
            index = self.levels[key] = {}
            pool_of = self.pool_of
            for pos, n in counts.items():
                pool = pool_of[pos]
                levels = index.get(pool)
                if levels is None:
                    levels = index[pool] = Levels()
                level = levels.sets.get(n)
                if level is None:
                    levels.sets[n] = {pos}
                else:
                    level.add(pos)
                levels.held += 1
        return index

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

    def _best_in_pool(self, pool: Pool, m: int, d: int, key: str | None, counts: dict[int, int],
                      index: dict[Pool, Levels] | None, score_of) -> tuple[float, int] | None:
        """(exact score, position) of the pool's winner for the item, or None if nothing fits.

        A cell's score is its bucket's load key + an offset that depends only on the item (equal totals)
        + LOCALITY_OFFSET × its count of the process, up to rounding. The cells with the pool's lowest
        count (its lowest *level*) are looked for in load order; when that level is small, or that search
        runs long because the level's cells are rare among the least loaded, the level is scored
        directly instead. Cells of higher levels are looked at only while their +1000s could still win.
        Until the process holds nearly as many cells as a pool has (`index` None), its lowest level is 0
        everywhere and has many cells; the levels are built only if a search for one of them runs long.
        """
        if not counts:
            return self._scan(pool, m, d, EMPTY, 0, None, INF, INF, score_of)
        searched = False
        if index is None:
            found = self._scan(pool, m, d, counts, 0, None, INF, len(pool.positions) - len(counts) + DIRECT,
                               score_of)
            if found is not INF:
                return found
            index = self._level_index(key, counts)
            searched = True  # level 0 (the lowest) was just looked for in load order, at length
        levels = index.get(pool)
        if levels is None:  # no cell of the pool holds the process
            return self._scan(pool, m, d, EMPTY, 0, None, INF, INF, score_of)
        # The lowest level of the pool, and its cells (None: count 0, not materialised).
        if levels.held < len(pool.positions):
            lowest, cells, size = 0, levels.zero, len(pool.positions) - levels.held
        else:
            lowest = min(levels.sets)
            cells = levels.sets[lowest]
            size = len(cells)
        if size > DIRECT and not searched:
            found = self._scan(pool, m, d, counts, lowest, None, INF, size + DIRECT, score_of)
            if found is not INF:
                return found
            # The search ran long: the level's cells are few among the least loaded. Score them directly.
        if cells is None:
            cells = levels.zero = {p for p in pool.positions if p not in counts}
        best, low = self._best_in_level(pool, cells, lowest, m, d, score_of)
        if (
            best is not None
            and pool.order[0][0] + LOCALITY_OFFSET * (lowest + 1) > low + EPS + abs(low) * REL
        ):
            return best  # no cell of a higher level can come close
        return self._scan(pool, m, d, counts, lowest + 1, best, low, INF, score_of)

    def _best_in_level(self, pool: Pool, cells: set[int], level: int, m: int, d: int,
                       score_of) -> tuple[tuple[float, int] | None, float]:
        """The best fitting cell among `cells` (all of one level), and its approximate score."""
        slots = self.state.slots
        bucket_of = pool.bucket_of
        fitting: list[tuple[float, Bucket, int]] = []
        low = INF
        for pos in cells:
            slot = slots[pos]
            if slot.avail_m >= m and slot.avail_d >= d and slot.avail_c >= 1:
                bucket = bucket_of[pos]
                fitting.append((bucket.key, bucket, pos))
                if bucket.key < low:
                    low = bucket.key
        if not fitting:
            return None, INF
        # Near-ties are scored exactly; cells in one state score alike, so only the first of each.
        bound = low + EPS
        first: dict[Bucket, int] = {}
        for key, bucket, pos in fitting:
            if key <= bound and first.get(bucket, pos) >= pos:
                first[bucket] = pos
        best = min((score_of(slots[pos]), pos) for pos in first.values())
        return best, low + LOCALITY_OFFSET * level

    def _scan(self, pool: Pool, m: int, d: int, counts: dict[int, int], floor: int,
              best: tuple[float, int] | None, low: float, budget: float, score_of):
        """The best fitting cell of count ≥ `floor`, searched in load order, starting from `best`.

        `low` is the approximate score of `best` (load key + LOCALITY_OFFSET × count). Returns the
        winner (or None), or INF when more than `budget` buckets and cells were looked at first.
        """
        slots = self.state.slots
        buckets = pool.buckets
        bound = low + EPS + abs(low) * REL if best is not None else INF
        base = LOCALITY_OFFSET * floor  # every cell not yet looked at scores at least its key + base
        max_m = max_d = max_c = 0
        complete = True
        for key, cell_state in pool.order:
            if key + base > bound:
                complete = False
                break
            am, ad, ac, _starting = cell_state
            if am > max_m:
                max_m = am
            if ad > max_d:
                max_d = ad
            if ac > max_c:
                max_c = ac
            budget -= 1
            if am < m or ad < d or ac < 1:
                if budget < 0:
                    return INF
                continue
            members = buckets[cell_state].members
            pos = members[0]
            if counts:
                # The bucket's best cell: the lowest count ≥ floor, then the lowest position.
                n = counts.get(pos, 0)
                if n != floor:
                    pos = -1
                    count = 0
                    for p in members:
                        n = counts.get(p, 0)
                        if n == floor:
                            pos = p
                            break
                        if n > floor and (pos < 0 or n < count):
                            pos, count = p, n
                    else:
                        n = count if pos >= 0 else 0
                    budget -= len(members)
                if budget < 0:
                    return INF
                if pos < 0:
                    continue  # every member is of the level already scored directly
                approx = key + LOCALITY_OFFSET * n
            else:
                n = 0
                approx = key
            if approx > bound:
                continue
            candidate = (score_of(slots[pos]), pos)
            if best is None or candidate < best:
                best = candidate
            if approx < low:
                low = approx
                bound = low + EPS + abs(low) * REL
        if complete:
            # Every cell state was seen: the bounds are the pool's current maxima.
            pool.ub_m, pool.ub_d, pool.ub_c = max_m, max_d, max_c
        return best

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        if request_filters(item):
            return super().pick_lrp(item)
        compatible = self._compatible_pools(item)
        pg, m, d, sw, bw = item.process_guid, item.memory_mb, item.disk_mb, self.sw, self.bw
        counts = self.state.holding(pg)
        index = self.levels.get(pg)
        if index is None and counts and len(counts) + DIRECT >= self.smallest_pool:
            index = self._level_index(pg, counts)

        def score_of(slot: CellSlot) -> float:
            return lrp_score(slot, m, d, pg, sw, bw)

        slots = self.state.slots
        for group in zone_groups(self.room, self.state, item):
            # Within a group the reference keeps the first lowest score met: zone order, then cell order.
            best: tuple[float, int, int, int] | None = None  # (score, zone rank, index in zone, position)
            for rank, zone in enumerate(group):
                for pool in self.zone_pools[zone]:
                    if id(pool) not in compatible or m > pool.ub_m or d > pool.ub_d or pool.ub_c < 1:
                        continue
                    found = self._best_in_pool(pool, m, d, pg, counts, index, score_of)
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
        counts = self.state.task_cells
        index = self.levels.get(TASKS)
        if index is None and counts and len(counts) + DIRECT >= self.smallest_pool:
            index = self._level_index(TASKS, counts)
        m, d, sw = item.memory_mb, item.disk_mb, self.sw

        def score_of(slot: CellSlot) -> float:
            return task_score(slot, m, d, sw)

        best: tuple[float, int] | None = None
        for pool in self.pools:
            if id(pool) not in compatible or m > pool.ub_m or d > pool.ub_d or pool.ub_c < 1:
                continue
            found = self._best_in_pool(pool, m, d, TASKS, counts, index, score_of)
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
