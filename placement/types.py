"""What the placement engine answers (assignments and failures) and how it is configured.

What it is given is in ask.py (an app's ask of a cell), work.py (the instances and tasks to place) and
cell_offer.py (each cell's bid); placement/wire.py makes those from the wire's models.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)  # one per placed instance: not frozen, for the reason LRPStart is not
class LRPAssignment:
    process_guid: str
    index: int
    cell_id: str


@dataclass(slots=True, frozen=True)
class TaskAssignment:
    task_guid: str
    cell_id: str


@dataclass(slots=True, frozen=True)
class Failure:
    """Work no cell could take. `error` is Diego's string; `detail` the per-filter breakdown."""

    error: str
    detail: str = ""
    process_guid: str | None = None
    index: int | None = None
    task_guid: str | None = None


@dataclass(slots=True)
class AuctionResult:
    lrp_assignments: list[LRPAssignment] = field(default_factory=list)
    task_assignments: list[TaskAssignment] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class LoadMarkConfig:
    swap_weight: float = 1.0
    memory_weight: float = 0.2
    disk_weight: float = 0.5
    critical_load_mark: float = 300.0
    critical_memory: float = 0.80
    critical_swap: float = 0.50
    critical_disk: float = 0.85


@dataclass(slots=True, frozen=True)
class SchedulerConfig:
    strategy: str = "diego"
    engine: str = "fast"  # "fast" or "reference"
    seed: int = 0
    starting_container_weight: float = 0.25
    bin_pack_first_fit_weight: float = 0.0
    max_inflight_starts: int = 0  # 0: no limit (Diego's default)
    # Beyond Diego: subtracted from the diego strategy's score of a cell whose host caches the app's source
    # blob (scoring.cache_locality); 0, the default, keeps Diego's scores bit for bit.
    cache_weight: float = 0.0
    loadmark: LoadMarkConfig = LoadMarkConfig()
    now: float | None = None  # dea: the time advertisements are judged against (None: never stale)


ENGINES = ("fast", "reference")
