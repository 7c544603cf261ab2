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

Pools are the classes of equivalent cells the compatibility filters keep (`CellColumns.classes`), split
further by zone and totals, so a pool is compatible with an item or not as a whole, and a bucket's
state is held against the resource filters' thresholds (`least_free`) once for all its cells.

- The cache term (beyond Diego: a cluster's cache weight, for an app naming a source blob) lowers the
  score of the cells caching the blob by the weight. Each pool's winner without it is then compared with
  the pool's fitting cells that cache the blob, scored exactly (`scoring.cached_lrp_score`): no other
  cell can win, as a cell without the blob scores what it scored without the term. A pool's cells are
  found per blob in an index built on the first such item (`_holders`).

Work the
pools do not cover falls back to the reference code path: LRPs with request filters (labels, volumes,
ingress IP, devices), and tasks when a bin-pack weight is set. A miss is diagnosed by the filters'
vectorised forms (`FastPicker`).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Hashable
from math import inf
from typing import NamedTuple

import numpy as np
from sortedcontainers import SortedList

from ..filters import COMPATIBILITY, Work, has_room, least_free, request_filters
from ..filters.compatibility import compatibility_requirement
from ..scoring import LOCALITY_OFFSET, cached_lrp_score, lrp_score, task_score, uses_cache
from ..slot import CellSlot
from ..state import AuctionState
from ..work import LRPStart, TaskStart
from .base import FastPicker
from .diego_reference import DiegoReference

# Far above float64 rounding of scores (≲ 1e-12 here), far below any real score difference that matters.
EPS = 1e-9
# Rounding grows with the score's size (1000 × instances of the process): a relative allowance on top.
REL = 1e-13
# A level of at most this many cells is scored directly rather than looked for in the load order.
DIRECT = 8
UNLIMITED = inf  # a search's budget when it may look at every cell state
TASKS = None  # the level-index key of tasks (their count term is tasks on the cell)
EMPTY: dict = {}  # never written to
NO_CELLS = np.zeros(0, dtype=np.int64)  # never written to
LOAD = ("diego_fast", "load")  # the key of the cells' load column (CellColumns.derived)
# More cells of a pool caching an app's blob than this are judged over columns (numpy), fewer one by one.
VECTOR = 64

CellState = tuple[int, int, int, int]  # free memory, disk, containers, and starting containers


def _state_of(slot: CellSlot) -> CellState:
    return (slot.avail_m, slot.avail_d, slot.avail_c, slot.starting)


def _near(approx: float) -> float:
    """The highest approximate score that may still beat, once scored exactly, one of `approx`."""
    return approx + EPS + abs(approx) * REL


class Bucket:
    """Cells of one pool in one identical state: identical scores for every item."""

    __slots__ = ("load", "state", "members")

    def __init__(self, load: float, state: CellState) -> None:
        self.load = load
        self.state = state
        self.members: list[int] = []  # cell positions, ascending (kept with insort: buckets are small)


class Pool:
    """The cells of one zone that share totals and compatibility, ordered by load."""

    __slots__ = ("zone", "representative", "order", "buckets", "bucket_of", "most_free", "positions")

    def __init__(self, zone: str, representative: CellSlot) -> None:
        self.zone = zone
        self.representative = representative
        self.order: SortedList = SortedList()  # (load, state) of each non-empty bucket
        self.buckets: dict[CellState, Bucket] = {}
        self.bucket_of: dict[int, Bucket] = {}
        # Upper bounds of any cell's free memory, disk and containers: reservations only ever take.
        self.most_free = [0, 0, 0]
        self.positions: list[int] = []  # every cell of the pool, ascending


class Levels:
    """The cells of one pool grouped by their count of one process's instances (or of tasks)."""

    __slots__ = ("sets", "held", "zero")

    def __init__(self) -> None:
        self.sets: dict[int, set[int]] = {}  # count ≥ 1 -> positions (no empty sets)
        self.held = 0  # cells with a count ≥ 1
        self.zero: set[int] | None = None  # cells with a count of 0, once asked for (then kept current)


# A pool's best cell for an item: (exact score, position), compared as the reference breaks ties. A plain
# tuple, unpacked into named locals where read: one is made per candidate, and a class is slower to make.
Winner = tuple[float, int]


class LevelBest(NamedTuple):
    winner: Winner | None
    approx: float  # the winner's approximate score (load + LOCALITY_OFFSET × level); inf: no winner


class RanLong(Exception):
    """A search in load order looked at more buckets and cells than its budget before finishing."""


# What one item's search reads in every pool: (the least free memory, disk and containers a cell must have,
# the key of its count — the process guid, or TASKS —, each cell's count of it by position, holding cells
# only, and the item's score function). A plain tuple, unpacked into named locals where read.
Search = tuple[tuple[int, int, int], "str | None", dict[int, int], Callable[[CellSlot], float]]


class DiegoFast(FastPicker, DiegoReference):
    name = "diego"

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.starting_weight = self.config.starting_container_weight
        self.bin_pack_weight = self.config.bin_pack_first_fit_weight
        self.pools: list[Pool] = []
        self.pool_of: list[Pool] = [None] * len(state.slots)  # type: ignore[list-item]  # all set below
        self.zone_pools: dict[str, list[Pool]] = {z: [] for z in state.zone_names}
        compatibility_classes = [self.cells.classes(f).class_of for f in COMPATIBILITY]
        for zone in state.zone_names:
            by_signature: dict[tuple, Pool] = {}
            for slot in state.zone_slots[zone]:
                signature: tuple = (slot.total_m, slot.total_d, slot.total_c,
                                    *(int(class_of[slot.pos]) for class_of in compatibility_classes))
                if self.bin_pack_weight:
                    signature += (slot.zone_pos,)  # the bin-pack term makes every cell's load its own
                pool = by_signature.get(signature)
                if pool is None:
                    pool = by_signature[signature] = Pool(zone, slot)
                    self.pools.append(pool)
                    self.zone_pools[zone].append(pool)
                self.pool_of[slot.pos] = pool
                pool.positions.append(slot.pos)
                self._insert(pool, slot)
                most_free = pool.most_free
                most_free[0] = max(most_free[0], slot.avail_m)
                most_free[1] = max(most_free[1], slot.avail_d)
                most_free[2] = max(most_free[2], slot.avail_c)
        self.smallest_pool = min((len(pool.positions) for pool in self.pools), default=0)
        # compatibility requirement -> the compatible pools (hashed by identity: a pool defines no equality),
        # and the same by the id of an ask (an app's instances share one, alive as long as the auction)
        self.compatible: dict[Hashable, set[Pool]] = {}
        self.compatible_by_ask: dict[int, set[Pool]] = {}
        # process guid (TASKS for tasks) -> pool -> its cells by count; built once the process holds nearly
        # as many cells as a pool has (before, every pool has many cells without it), then kept current
        self.levels: dict[str | None, dict[Pool, Levels]] = {}
        # source blob -> pool -> its cells caching the blob, ascending; built on the first item asking
        self.holders: dict[str, dict[Pool, np.ndarray]] | None = None
        # process guid -> its instances per cell position, for the apps whose items weigh the cache term
        # (kept current through `state.on_count`): holders are judged by whole arrays
        self.count_columns: dict[str, np.ndarray] = {}
        state.on_reserve(self._on_reserve)
        state.on_count(self._on_count)

    # --- index maintenance ----------------------------------------------------------------------

    def _load(self, slot: CellSlot) -> float:
        """The part of the cell's score that is the same for every item (its totals being the pool's)."""
        total_m, total_d, total_c = slot.total_m or 1, slot.total_d or 1, slot.total_c or 1
        used = ((total_m - slot.avail_m) / total_m + (total_d - slot.avail_d) / total_d
                + (total_c - slot.avail_c) / total_c) / 3.0
        return used + slot.starting * self.starting_weight + slot.zone_pos * self.bin_pack_weight

    def _insert(self, pool: Pool, slot: CellSlot) -> None:
        state = _state_of(slot)
        bucket = pool.buckets.get(state)
        if bucket is None:
            bucket = pool.buckets[state] = Bucket(self._load(slot), state)
            pool.order.add((bucket.load, state))
        insort(bucket.members, slot.pos)
        pool.bucket_of[slot.pos] = bucket

    def _on_reserve(self, slot: CellSlot) -> None:
        pool = self.pool_of[slot.pos]
        bucket = pool.bucket_of[slot.pos]
        bucket.members.remove(slot.pos)
        if not bucket.members:
            pool.order.remove((bucket.load, bucket.state))
            del pool.buckets[bucket.state]
        self._insert(pool, slot)

    def _on_count(self, slot: CellSlot, key: str | None, count: int) -> None:
        if key is not None:
            column = self.count_columns.get(key)
            if column is not None:
                column[slot.pos] = count
        index = self.levels.get(key)
        if index is None:
            return
        pos = slot.pos
        pool = self.pool_of[pos]
        levels = index.get(pool)
        if levels is None:
            levels = index[pool] = Levels()
        sets = levels.sets
        if count > 1:
            below = sets[count - 1]
            below.discard(pos)
            if not below:
                del sets[count - 1]
        else:
            levels.held += 1
            if levels.zero is not None:
                levels.zero.discard(pos)
        level = sets.get(count)
        if level is None:
            sets[count] = {pos}
        else:
            level.add(pos)

    def _level_index(self, key: str | None, counts: dict[int, int]) -> dict[Pool, Levels]:
        index = self.levels.get(key)
        if index is None:
            index = self.levels[key] = {}
            pool_of = self.pool_of
            for pos, count in counts.items():
                pool = pool_of[pos]
                levels = index.get(pool)
                if levels is None:
                    levels = index[pool] = Levels()
                level = levels.sets.get(count)
                if level is None:
                    levels.sets[count] = {pos}
                else:
                    level.add(pos)
                levels.held += 1
        return index

    def _search(self, need: tuple[int, int, int], count_key: str | None, counts: dict[int, int],
                score_of: Callable[[CellSlot], float]) -> Search:
        if count_key not in self.levels and counts and len(counts) + DIRECT >= self.smallest_pool:
            self._level_index(count_key, counts)  # the process holds nearly as many cells as a pool has
        return (need, count_key, counts, score_of)

    # --- picking --------------------------------------------------------------------------------

    def _compatible_pools(self, item: Work) -> set[Pool]:
        """The pools whose cells pass the compatibility filters (all of a pool's cells alike)."""
        found = self.compatible_by_ask.get(id(item.ask))
        if found is None:
            requirement = compatibility_requirement(item)
            found = self.compatible.get(requirement)
            if found is None:
                found = {
                    pool for pool in self.pools
                    if all(f.admits(self.cells, item)[pool.representative.pos] for f in COMPATIBILITY)
                }
                self.compatible[requirement] = found
            self.compatible_by_ask[id(item.ask)] = found
        return found

    def _best_in_pool(self, pool: Pool, search: Search) -> Winner | None:
        """The pool's winner for the item, or None if nothing fits.

        A cell's score is its bucket's load + an offset that depends only on the item (equal totals)
        + LOCALITY_OFFSET × its count of the process, up to rounding. The cells with the pool's lowest
        count (its lowest *level*) are looked for in load order; when that level is small, or that search
        runs long because the level's cells are rare among the least loaded, the level is scored
        directly instead. Cells of higher levels are looked at only while their +1000s could still win.
        Until the process holds nearly as many cells as a pool has (no levels yet), its lowest level is 0
        everywhere and has many cells; the levels are built only if a search for one of them runs long.
        """
        _need, count_key, counts, _score_of = search
        if not counts:
            return self._scan(pool, search, 0, None, inf, UNLIMITED)
        index = self.levels.get(count_key)
        searched = False
        if index is None:
            try:
                return self._scan(pool, search, 0, None, inf, len(pool.positions) - len(counts) + DIRECT)
            except RanLong:
                index = self._level_index(count_key, counts)
                searched = True  # level 0 (the lowest) was just looked for in load order, at length
        levels = index.get(pool)
        if levels is None:  # no cell of the pool holds the process
            return self._scan(pool, search, 0, None, inf, UNLIMITED)
        # The lowest level of the pool, and its cells (None: count 0, not materialised).
        if levels.held < len(pool.positions):
            lowest, cells, size = 0, levels.zero, len(pool.positions) - levels.held
        else:
            lowest = min(levels.sets)
            cells = levels.sets[lowest]
            size = len(cells)
        if size > DIRECT and not searched:
            try:
                return self._scan(pool, search, lowest, None, inf, size + DIRECT)
            except RanLong:
                pass  # the level's cells are few among the least loaded: score them directly
        if cells is None:
            cells = levels.zero = {pos for pos in pool.positions if pos not in counts}
        best = self._best_in_level(pool, cells, lowest, search)
        if best.winner is not None and pool.order[0][0] + LOCALITY_OFFSET * (lowest + 1) > _near(best.approx):
            return best.winner  # no cell of a higher level can come close
        return self._scan(pool, search, lowest + 1, best.winner, best.approx, UNLIMITED)

    def _best_in_level(self, pool: Pool, cells: set[int], level: int, search: Search) -> LevelBest:
        """The best fitting cell among `cells` (all of one level)."""
        slots = self.state.slots
        bucket_of = pool.bucket_of
        (need_m, need_d, need_c), _count_key, _counts, score_of = search
        fitting: list[tuple[float, Bucket, int]] = []
        lowest_load = inf
        for pos in cells:
            slot = slots[pos]
            # has_room, inlined: this runs per cell
            if slot.avail_m >= need_m and slot.avail_d >= need_d and slot.avail_c >= need_c:
                bucket = bucket_of[pos]
                fitting.append((bucket.load, bucket, pos))
                if bucket.load < lowest_load:
                    lowest_load = bucket.load
        if not fitting:
            return LevelBest(None, inf)
        # Near-ties are scored exactly; cells in one state score alike, so only the first of each.
        bound = lowest_load + EPS
        first: dict[Bucket, int] = {}
        for load, bucket, pos in fitting:
            if load <= bound and first.get(bucket, pos) >= pos:
                first[bucket] = pos
        winner = min((score_of(slots[pos]), pos) for pos in first.values())
        return LevelBest(winner, lowest_load + LOCALITY_OFFSET * level)

    def _scan(self, pool: Pool, search: Search, floor: int, best: Winner | None, best_approx: float,
              budget: float) -> Winner | None:
        """The best fitting cell of count ≥ `floor` (None: none fits), searched in load order, starting
        from `best` (whose approximate score is `best_approx`); raises RanLong once more than `budget`
        buckets and cells were looked at."""
        slots = self.state.slots
        buckets = pool.buckets
        (need_m, need_d, need_c), _count_key, counts, score_of = search
        bound = _near(best_approx) if best is not None else inf
        base = LOCALITY_OFFSET * floor  # every cell not yet looked at scores at least its load + base
        seen_free = [0, 0, 0]  # the most free memory, disk and containers of the states looked at
        complete = True
        for load, cell_state in pool.order:
            if load + base > bound:
                complete = False
                break
            free_m, free_d, free_c, _starting = cell_state
            if free_m > seen_free[0]:
                seen_free[0] = free_m
            if free_d > seen_free[1]:
                seen_free[1] = free_d
            if free_c > seen_free[2]:
                seen_free[2] = free_c
            budget -= 1
            if free_m < need_m or free_d < need_d or free_c < need_c:  # has_room, inlined: per cell state
                if budget < 0:
                    raise RanLong
                continue
            members = buckets[cell_state].members
            if counts:
                pos = members[0]
                count = counts.get(pos, 0)
                if count != floor:  # the first member is not of the lowest count: look at them all
                    budget -= len(members)
                    if budget < 0:
                        raise RanLong
                    lowest = self._lowest_member(members, counts, floor)
                    if lowest is None:
                        continue  # every member is of the level already scored directly
                    pos, count = lowest
                elif budget < 0:
                    raise RanLong
                approx = load + LOCALITY_OFFSET * count
            else:
                pos = members[0]
                approx = load
            if approx > bound:
                continue
            candidate = (score_of(slots[pos]), pos)
            if best is None or candidate < best:
                best = candidate
            if approx < best_approx:
                best_approx = approx
                bound = _near(best_approx)
        if complete:
            # Every cell state was seen: the bounds are the pool's current maxima.
            pool.most_free = seen_free
        return best

    @staticmethod
    def _lowest_member(members: list[int], counts: dict[int, int], floor: int) -> tuple[int, int] | None:
        """(position, count) of a bucket's best cell of count ≥ `floor`: the lowest count, then the
        lowest position; None when every member's count is below `floor`."""
        found: tuple[int, int] | None = None
        for pos in members:
            count = counts.get(pos, 0)
            if count == floor:
                return pos, count
            if count > floor and (found is None or count < found[1]):
                found = (pos, count)
        return found

    def _holders(self, blob: str) -> dict[Pool, np.ndarray]:
        """The cells caching `blob`, by pool (positions ascending)."""
        if self.holders is None:
            found: dict[str, dict[Pool, list[int]]] = {}
            for slot in self.state.slots:
                for held in slot.cached_blobs:
                    found.setdefault(held, {}).setdefault(self.pool_of[slot.pos], []).append(slot.pos)
            self.holders = {b: {pool: np.array(cells, dtype=np.int64) for pool, cells in pools.items()}
                            for b, pools in found.items()}
        return self.holders.get(blob, EMPTY)

    def _count_column(self, process: str, counts: dict[int, int]) -> np.ndarray:
        column = self.count_columns.get(process)
        if column is None:
            column = self.count_columns[process] = np.zeros(len(self.state.slots), dtype=np.int64)
            for pos, count in counts.items():
                column[pos] = count
        return column

    def _cached_best(self, pool: Pool, found: Winner, holders: np.ndarray, search: Search, blob: str | None,
                     weight: float, score_of: Callable[[CellSlot], float]) -> Winner:
        """The pool's winner with the cache term: its winner without it (`found`) or one of its fitting
        cells caching the blob (`holders`), whichever scores lowest with the term (ties: position).

        Each holder is first judged by its approximate score (its load + LOCALITY_OFFSET × its count − the
        weight, the item's offset being the pool's), over columns when they are many, and scored exactly
        only when that could come within reach of the best so far: as `_scan` does."""
        slots = self.state.slots
        (need_m, need_d, need_c), count_key, counts, _plain = search
        pos = found[1]
        best = (score_of(slots[pos]), pos)
        best_approx = self._load(slots[pos]) + LOCALITY_OFFSET * counts.get(pos, 0)
        if blob in slots[pos].cached_blobs:
            best_approx -= weight
        bound = _near(best_approx)
        if len(holders) <= VECTOR:
            bucket_of = pool.bucket_of
            for pos in holders.tolist():
                slot = slots[pos]
                if slot.avail_m < need_m or slot.avail_d < need_d or slot.avail_c < need_c:
                    continue
                approx = bucket_of[pos].load + LOCALITY_OFFSET * counts.get(pos, 0) - weight
                if approx > bound:
                    continue
                candidate = (score_of(slot), pos)
                if candidate < best:
                    best = candidate
                if approx < best_approx:
                    best_approx = approx
                    bound = _near(best_approx)
            return best
        cells = self.cells
        approxes = cells.derived(LOAD, self._load)[holders] - weight
        if counts:
            assert count_key is not None  # LRPs' counts: a process's
            approxes += LOCALITY_OFFSET * self._count_column(count_key, counts)[holders]
        near = ((approxes <= bound) & (cells.avail_m[holders] >= need_m) & (cells.avail_d[holders] >= need_d)
                & (cells.avail_c[holders] >= need_c)).nonzero()[0]
        for i in near.tolist():
            approx = float(approxes[i])
            if approx > bound:
                continue
            pos = int(holders[i])
            candidate = (score_of(slots[pos]), pos)
            if candidate < best:
                best = candidate
            if approx < best_approx:
                best_approx = approx
                bound = _near(best_approx)
        return best

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        if request_filters(item):
            return super().pick_lrp(item)
        compatible = self._compatible_pools(item)
        ask = item.ask
        process, memory_mb, disk_mb = item.process_guid, ask.memory_mb, ask.disk_mb
        starting_weight, bin_pack_weight = self.starting_weight, self.bin_pack_weight

        def score_of(slot: CellSlot) -> float:
            return lrp_score(slot, memory_mb, disk_mb, process, starting_weight, bin_pack_weight)

        blob, cache_weight = ask.source_blob, self.config.cache_weight
        holders = self._holders(blob) if blob is not None and uses_cache(blob, cache_weight) else None

        def cached_score_of(slot: CellSlot) -> float:
            return cached_lrp_score(slot, memory_mb, disk_mb, process, starting_weight, bin_pack_weight, blob,
                                    cache_weight)

        search = self._search(least_free(item), process, self.state.holding(process), score_of)
        need = search[0]
        slots = self.state.slots
        scored = self.candidates  # a placement trace's: each pool's best is a candidate
        room = self.room  # zone_room.zone_groups, with the sizes already read
        if room is None:
            groups = self.state.zone_groups(process)
        else:
            groups = room.zone_groups(process, memory_mb, disk_mb)
        if scored is not None:
            self.groups_seen = groups
        for group in groups:
            # Within a group the reference keeps the first lowest score met: zone order, then cell order.
            best: tuple[float, int, int, int] | None = None  # (score, zone rank, index in zone, position)
            for rank, zone in enumerate(group):
                for pool in self.zone_pools[zone]:
                    # Some cell of the pool may fit only if the resource filters admit its bounds.
                    if pool not in compatible or not has_room(pool.most_free, need):
                        continue
                    found = self._best_in_pool(pool, search)
                    if found is not None:
                        if holders is not None:
                            found = self._cached_best(pool, found, holders.get(pool, NO_CELLS), search,
                                                      blob, cache_weight, cached_score_of)
                        score, position = found
                        candidate = (score, rank, slots[position].zone_pos, position)
                        if scored is not None:
                            scored.append(candidate)
                        if best is None or candidate < best:
                            best = candidate
            if best is not None:
                return slots[best[3]]  # its position
        return None

    def runners_up(self, item: LRPStart, winner: CellSlot, n: int) -> list[int]:
        """Positions of up to `n` other fitting cells of the winner's pool, least loaded first (cells in one
        state by position, as the tie-break goes): what a placement trace shows beside each pool's best,
        which is all the pick scored. A bounded look (at most 2n cell states), and no scoring: the trace
        scores them only if asked."""
        pool = self.pool_of[winner.pos]
        need = least_free(item)
        found: list[int] = []
        for looked, (_key, cell_state) in enumerate(pool.order):
            if len(found) >= n or looked >= 2 * n:
                break
            if not has_room(cell_state, need):
                continue
            for pos in pool.buckets[cell_state].members:
                if len(found) >= n:
                    break
                if pos != winner.pos:
                    found.append(pos)
        return found

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        if self.bin_pack_weight:
            return super().pick_task(item)  # the LRP index carries the bin-pack term; tasks do not
        compatible = self._compatible_pools(item)
        ask = item.ask
        memory_mb, disk_mb, starting_weight = ask.memory_mb, ask.disk_mb, self.starting_weight

        def score_of(slot: CellSlot) -> float:
            return task_score(slot, memory_mb, disk_mb, starting_weight)

        search = self._search(least_free(item), TASKS, self.state.task_cells, score_of)
        need, *_ = search
        best: Winner | None = None
        for pool in self.pools:
            if pool not in compatible or not has_room(pool.most_free, need):
                continue
            found = self._best_in_pool(pool, search)
            if found is not None and (best is None or found < best):
                best = found
        if best is None:
            return None
        _score, position = best
        return self.state.slots[position]


__all__ = ["DiegoFast"]
