"""Plain data the placement engine works on: cells (bids) and work in, assignments and failures out.

The engine does no I/O and knows nothing of pydantic or the wire; callers (the auctioneer service,
`vendue simulate`) convert their models into these dataclasses at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_STACK = "cflinuxfs4"


@dataclass(slots=True)
class Resources:
    memory_mb: int
    disk_mb: int
    containers: int


@dataclass(slots=True, frozen=True)
class RunningInstance:
    """An LRP instance a cell already holds (prefill, or reported by the rep)."""

    process_guid: str
    index: int
    memory_mb: int = 0
    disk_mb: int = 0
    # Service strategy: an instance that is being stopped but still holds its slot for a while.
    delayed_shutdown: bool = False


@dataclass(slots=True, frozen=True)
class HostMetrics:
    """What the load-mark strategy reads of a host; totals fall back to the cell's totals."""

    swap_used_mb: float = 0.0
    swap_total_mb: float = 0.0
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    disk_used_mb: float | None = None
    disk_total_mb: float | None = None
    load5: float = 0.0
    cores: int = 1


def host_metrics_from(source: object) -> HostMetrics:
    """HostMetrics from any object with the same attribute names (a wire or workload model)."""
    return HostMetrics(**{name: getattr(source, name) for name in HostMetrics.__dataclass_fields__})


@dataclass(slots=True, frozen=True)
class Volume:
    """A volume a cell can offer (service strategy). `holder` names the instance owning an ephemeral one."""

    name: str
    size_mb: int
    labels: dict[str, str] = field(default_factory=dict)
    ephemeral: bool = False
    holder: str | None = None  # "process_guid/index" of the instance whose ephemeral volume this is


@dataclass(slots=True, frozen=True)
class VolumeRequest:
    name: str
    size_mb: int = 0
    label_match: str = ""  # a label expression, see common/labels.py
    ephemeral: bool = False


@dataclass(slots=True, frozen=True)
class DeviceRequest:
    kind: str
    count: int = 1


@dataclass(slots=True, frozen=True)
class AffinityRule:
    """Soft preference: `weight` > 0 attracts to cells whose labels match `expression`, < 0 repels."""

    expression: str
    weight: float = 1.0


@dataclass(slots=True)
class Cell:
    """One cell's bid: what it has in total, what is left, and what it holds."""

    cell_id: str
    zone: str
    total: Resources
    available: Resources
    stacks: tuple[str, ...] = (DEFAULT_STACK,)
    placement_tags: frozenset[str] = frozenset()
    optional_placement_tags: frozenset[str] = frozenset()
    volume_drivers: frozenset[str] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    starting_containers: int = 0
    # What the cell holds comes in either form, or both (they add up): one entry per instance (`lrps`,
    # what a simulator or a test knows), or instances per process guid (`lrp_counts` and
    # `stopping_counts`, what a rep reports). Scheduling reads only the counts per process, so the
    # counts form saves making and counting back one object per instance: 250,000 at full scale.
    lrps: list[RunningInstance] = field(default_factory=list)
    lrp_counts: dict[str, int] = field(default_factory=dict)  # reserved, starting or running
    stopping_counts: dict[str, int] = field(default_factory=dict)  # being stopped: hold their slot only
    tasks: list[str] = field(default_factory=list)
    host: HostMetrics | None = None
    volumes: list[Volume] = field(default_factory=list)
    ingress_ips: list[str] = field(default_factory=list)  # free ingress IPs
    devices: dict[str, int] = field(default_factory=dict)  # free devices by kind
    advertised_at: float | None = None  # dea: when this advertisement was made (epoch seconds)
    expires_at: float | None = None  # dea: advertisement is stale after this
    cached_blobs: frozenset[str] = frozenset()


# Not frozen, though never changed once made: a frozen dataclass sets each field through
# object.__setattr__, some 10x a plain store, and an auction makes one of these per instance
# (18 fields, 250,000 instances at full scale). Without `frozen` they are not hashable either.
@dataclass(slots=True)
class LRPStart:
    """A request to start one instance (index) of a long-running process. Treat as immutable."""

    process_guid: str
    index: int
    memory_mb: int
    disk_mb: int
    stack: str = DEFAULT_STACK
    placement_tags: tuple[str, ...] = ()
    volume_drivers: tuple[str, ...] = ()
    domain: str = ""
    strategy: str | None = None  # overrides the batch's strategy for this LRP
    objective: str | None = None  # objective strategy: expression or preset name
    total_instances: int = 0  # the LRP's desired instance count (0: unknown, the engine counts the batch)
    source_blob: str | None = None
    # service strategy
    labels_match: str = ""
    volumes: tuple[VolumeRequest, ...] = ()
    ingress_ip: bool = False
    devices: tuple[DeviceRequest, ...] = ()
    affinity: tuple[AffinityRule, ...] = ()
    previous_cell: str | None = None  # a restarting instance stays here while the cell still fits

    @property
    def key(self) -> tuple[str, int]:
        return (self.process_guid, self.index)


@dataclass(slots=True, frozen=True)
class TaskStart:
    task_guid: str
    memory_mb: int
    disk_mb: int
    stack: str = DEFAULT_STACK
    placement_tags: tuple[str, ...] = ()
    volume_drivers: tuple[str, ...] = ()
    domain: str = ""


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
    loadmark: LoadMarkConfig = LoadMarkConfig()
    now: float | None = None  # dea: the time advertisements are judged against (None: never stale)


STRATEGIES = ("diego", "dea", "loadmark", "service", "objective", "binpack", "random")
ENGINES = ("fast", "reference")
