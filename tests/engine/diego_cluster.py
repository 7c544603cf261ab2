"""Builders and measures for Diego's simulation scenarios (helpers for the tests beside this file).

Diego's simulation cells have 100 MB of memory, 100 MB of disk and 100 containers, in zones Z0 and Z1
alternating by cell; its work is 1 MB LRPs with 1 MB of disk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from placement import schedule
from placement.cell_offer import CellOffer, Resources, RunningInstance
from placement.testing import lrp_start
from placement.types import AuctionResult, SchedulerConfig
from placement.work import LRPStart, TaskStart

ENGINES = ("fast", "reference")


def diego_cell(i: int, prefill: Sequence[RunningInstance] = (), zones: int = 2, memory_mb: int = 100,
               disk_mb: int = 100, containers: int = 100, zone: str | None = None, **extra) -> CellOffer:
    used_m = sum(p.memory_mb for p in prefill)
    used_d = sum(p.disk_mb for p in prefill)
    return CellOffer(
        cell_id=f"cell-{i}",
        zone=zone if zone is not None else f"Z{i % zones}",
        total=Resources(memory_mb, disk_mb, containers),
        available=Resources(memory_mb - used_m, disk_mb - used_d, containers - len(prefill)),
        lrps=list(prefill),
        **extra,
    )


def unique_running(count: int, prefix: str, memory_mb: int = 1) -> list[RunningInstance]:
    """`count` instances of distinct apps already on a cell (Diego's generateUniqueLRPs)."""
    return [RunningInstance(f"{prefix}-{i}", 0, memory_mb, 1) for i in range(count)]


def unique_apps(count: int, memory_mb: int = 1, prefix: str = "app") -> list[LRPStart]:
    return [lrp_start(f"{prefix}-{i}", 0, memory_mb, 1) for i in range(count)]


def instances_of(process_guid: str, count: int, memory_mb: int = 1) -> list[LRPStart]:
    return [lrp_start(process_guid, i, memory_mb, 1) for i in range(count)]


def run(cells: Sequence[CellOffer], lrps: Sequence[LRPStart] = (), tasks: Sequence[TaskStart] = (),
        engine: str = "fast", strategy: str = "diego", **config) -> AuctionResult:
    return schedule(cells, lrps, tasks, SchedulerConfig(strategy=strategy, engine=engine, **config))


def placed_per_cell(result: AuctionResult) -> Counter[str]:
    """Instances this batch placed, per cell that received any (Diego's measure of evenness)."""
    return Counter(a.cell_id for a in result.lrp_assignments)


def spread(counts: Counter[str]) -> tuple[float, float]:
    """(largest distance from the mean, the mean) of the counts."""
    values = list(counts.values())
    mean = sum(values) / len(values)
    return max(abs(v - mean) for v in values), mean


def assert_even(result: AuctionResult, tolerance: float) -> None:
    counts = placed_per_cell(result)
    assert counts, "nothing was placed"
    worst, mean = spread(counts)
    assert worst <= tolerance, (
        f"uneven: a cell is {worst:.2f} from the mean {mean:.2f} (tolerance {tolerance}); "
        f"min {min(counts.values())}, max {max(counts.values())} over {len(counts)} cells"
    )
