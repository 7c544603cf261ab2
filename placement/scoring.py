"""Diego's cell score for one piece of work; lower wins.

score = mean(used memory, disk, container fractions after placing) + weight × starting containers
        + 1000 × instances of the same process on the cell (tasks: 1000 × tasks on the cell)
        + bin-pack weight × the cell's index in its zone (LRPs only)
        - cache weight when the cell's host caches the app's source blob (LRPs only; beyond Diego, off at 0)

Both engines call these very functions, in this very order of floating-point operations, so that
equal inputs give bit-for-bit equal scores and the engines can be compared exactly. The cache term is a
scorer of its own (`cache_locality`, as Kubernetes' ImageLocality is one plugin), added to Diego's score
by `cached_lrp_score` only when a cluster sets a weight and the app names a blob: otherwise the engines
call `lrp_score` alone and Diego's scores stay his, bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .slot import CellSlot

LOCALITY_OFFSET = 1000.0


class ScoredCell(Protocol):
    """What the LRP score reads of a cell: a CellSlot, or a placement trace's snapshot of one
    (placement_trace.py), scored by these very functions."""

    avail_m: int
    avail_d: int
    avail_c: int
    total_m: int
    total_d: int
    total_c: int
    starting: int
    zone_pos: int
    proc_counts: dict[str, int]
    cached_blobs: frozenset[str]


def resource_score(slot: ScoredCell, memory_mb: int, disk_mb: int, starting_weight: float) -> float:
    """Mean used fraction of memory, disk and containers once the work is placed, plus the starting
    containers' weight."""
    used_m = 1.0 - (slot.avail_m - memory_mb) / (slot.total_m or 1)
    used_d = 1.0 - (slot.avail_d - disk_mb) / (slot.total_d or 1)
    used_c = 1.0 - (slot.avail_c - 1) / (slot.total_c or 1)
    return (used_m + used_d + used_c) / 3.0 + slot.starting * starting_weight


def lrp_score(slot: ScoredCell, memory_mb: int, disk_mb: int, process_guid: str, starting_weight: float,
              bin_pack_weight: float) -> float:
    return (
        resource_score(slot, memory_mb, disk_mb, starting_weight)
        + LOCALITY_OFFSET * slot.proc_counts.get(process_guid, 0)
        + slot.zone_pos * bin_pack_weight
    )


def cache_locality(slot: ScoredCell, source_blob: str | None, weight: float) -> float:
    """Minus `weight` on a cell whose host caches the app's source blob (it starts without a download),
    else 0: lower wins, as in the rest of Diego's score."""
    if source_blob is not None and source_blob in slot.cached_blobs:
        return -weight
    return 0.0


def cached_lrp_score(slot: ScoredCell, memory_mb: int, disk_mb: int, process_guid: str,
                     starting_weight: float, bin_pack_weight: float, source_blob: str | None,
                     cache_weight: float) -> float:
    """Diego's score plus the cache term: what both engines score with when `uses_cache` holds."""
    return (lrp_score(slot, memory_mb, disk_mb, process_guid, starting_weight, bin_pack_weight)
            + cache_locality(slot, source_blob, cache_weight))


def uses_cache(source_blob: str | None, cache_weight: float) -> bool:
    """Whether an app's score has the cache term: a weight is set and it names a blob."""
    return bool(cache_weight) and source_blob is not None


def task_score(slot: CellSlot, memory_mb: int, disk_mb: int, starting_weight: float) -> float:
    return (
        resource_score(slot, memory_mb, disk_mb, starting_weight)
        + LOCALITY_OFFSET * slot.task_count
    )


def lrp_score_components(
    slot: ScoredCell,
    memory_mb: int,
    disk_mb: int,
    process_guid: str,
    starting_weight: float,
    bin_pack_weight: float,
    source_blob: str | None = None,
    cache_weight: float = 0.0,
) -> dict[str, float]:
    """The parts of `lrp_score` (`cached_lrp_score` with the cache term), for `explain`. `cached` (1 or 0)
    says whether the cell holds the app's source blob, weighted or not; absent when the app names none."""
    parts = {
        "memory_used": 1.0 - (slot.avail_m - memory_mb) / (slot.total_m or 1),
        "disk_used": 1.0 - (slot.avail_d - disk_mb) / (slot.total_d or 1),
        "containers_used": 1.0 - (slot.avail_c - 1) / (slot.total_c or 1),
        "starting": slot.starting * starting_weight,
        "same_process": LOCALITY_OFFSET * slot.proc_counts.get(process_guid, 0),
        "bin_pack": slot.zone_pos * bin_pack_weight,
    }
    if source_blob is not None:
        parts["cached"] = 1.0 if source_blob in slot.cached_blobs else 0.0
    if uses_cache(source_blob, cache_weight):
        parts["cache_locality"] = cache_locality(slot, source_blob, cache_weight)
        parts["score"] = cached_lrp_score(slot, memory_mb, disk_mb, process_guid, starting_weight,
                                          bin_pack_weight, source_blob, cache_weight)
    else:
        parts["score"] = lrp_score(slot, memory_mb, disk_mb, process_guid, starting_weight, bin_pack_weight)
    return parts
