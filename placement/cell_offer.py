"""What one cell offers an auction (its bid): what it has in total, what is left, and what it holds.

The engine's view of a rep's `common.models.CellState` (with its `CellOffers`), a simulator's cell or
the BBS's heartbeat of a cell: placement/wire.py makes one from each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ask import DEFAULT_STACK


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


@dataclass(slots=True)
class CellOffer:
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
