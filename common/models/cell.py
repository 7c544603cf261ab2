"""Cells: their presences (the reps' heartbeats, PUT /v1/cells), bids (CellState) and detail."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from ..urls import MAX_URL_CHARS, http_url
from .fields import (
    DEFAULT_STACK,
    INT32_MAX,
    MAX_NAME_CHARS,
    Guid,
    Labels,
    Name,
    Names,
    Open,
    StoreInt,
    no_nul,
)


class ResourcesModel(Open):
    memory_mb: int
    disk_mb: int
    containers: int


# A rep's reading of its host, bounded so a stored heartbeat always serialises (docs/limits.md).
MAX_HOST_MEASURE = 1e9
HostMeasure = Annotated[float, Field(ge=0, lt=MAX_HOST_MEASURE, allow_inf_nan=False)]
MAX_CORES = 4096
# Digests a cell may list as cached (a rep lists its most recently used 64: rep/cell.py REPORTED_BLOBS).
MAX_CACHED_BLOBS = 1_024
CachedBlob = Annotated[str, Field(max_length=MAX_URL_CHARS)]


class HostMetricsModel(Open):
    swap_used_mb: HostMeasure = 0.0
    swap_total_mb: HostMeasure = 0.0
    mem_used_mb: HostMeasure | None = None
    mem_total_mb: HostMeasure | None = None
    disk_used_mb: HostMeasure | None = None
    disk_total_mb: HostMeasure | None = None
    load5: HostMeasure = 0.0
    cores: Annotated[int, Field(ge=1, le=MAX_CORES)] = 1


class CellPresence(Open):
    cell_id: Guid
    zone: Name
    # The root URL of the rep process hosting the cell (rep/api.py): http(s), where the BBS sends stops.
    rep_url: Annotated[str, AfterValidator(http_url)]
    stacks: Names = Field(default_factory=lambda: [DEFAULT_STACK])
    total: ResourcesModel
    placement_tags: Names = Field(default_factory=list)
    optional_placement_tags: Names = Field(default_factory=list)
    volume_drivers: Names = Field(default_factory=list)
    labels: Labels = Field(default_factory=dict)
    evacuating: bool = False
    expires_at: datetime | None = None  # set by the BBS: now + TTL at the last heartbeat
    # New each time the rep starts: a cell heartbeating with a new boot id lost whatever it held before,
    # so the BBS places that work again at once instead of waiting for a presence that never expires.
    boot_id: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(no_nul)] = ""
    # The rep process hosting this cell: `rep_url` is its root URL (shared by every cell it hosts: the
    # auctioneer asks each process once per auction), `rep_id` its name (the CN of its certificate), which
    # names its NATS subjects vendue.rep.<rep_id>.work|stop|cancel.
    rep_id: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(no_nul)] = ""
    # Its rep serves plain HTTP with authorization off (--insecure, or no TLS files on loopback): said loudly.
    insecure: bool = False
    # How its rep isolates instances (rep/isolation.py): "cgroup-v1" or "cgroup-v2" (own uid and cgroup
    # each) then "disk:ext4" or "disk:poll" (disk_mb a filesystem each, or measured), "none" (as the rep's
    # own user: --isolation none), "sim" (simulated); "" from a rep too old to say.
    isolation: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(no_nul)] = ""
    # What the cell had left and held when it sent this heartbeat (counts it keeps: no per-instance work),
    # so that `vendue cells` reads capacity from the BBS alone. None/0 from a rep too old to say.
    available: ResourcesModel | None = None
    instances: StoreInt = 0  # LRP instances held (starting, running or stopping)
    starting: StoreInt = 0  # of which starting
    # The host's load as the load-mark strategy reads it (real cells; None from simulated ones and reps too
    # old to say), so that the BBS's rebalance planner judges loadmark apps by their hosts' swap and load
    # average as the auction does (placement/rebalance/load_mark.py).
    host: HostMetricsModel | None = None
    # The source blobs cached on the cell (CellOffers.cached_blobs), so that the BBS's rebalance planner
    # scores objective apps with the cache term the auction uses.
    cached_blobs: list[CachedBlob] = Field(default_factory=list, max_length=MAX_CACHED_BLOBS)
    # Set by the BBS from its own state (whatever a rep sends is ignored): an operator's `vendue cells
    # cordon|drain` (no new work; draining: its instances are moved away make-before-break), and
    # "present" or "suspect" (its presence expired; listed only with GET /v1/cells?all=true).
    cordoned: bool = False
    draining: bool = False
    state: Literal["present", "suspect"] = "present"

    @field_validator("total")
    @classmethod
    def _sizes(cls, total: ResourcesModel) -> ResourcesModel:
        # Not on ResourcesModel itself: a bid's `available` goes below zero when a cell is overcommitted.
        for name in ("memory_mb", "disk_mb", "containers"):
            if not 0 <= getattr(total, name) <= INT32_MAX:
                raise ValueError(f"{name} must be between 0 and {INT32_MAX}")
        return total

    @field_validator("available")
    @classmethod
    def _left(cls, available: ResourcesModel | None) -> ResourcesModel | None:
        for name in ("memory_mb", "disk_mb", "containers"):
            if available is not None and not -INT32_MAX <= getattr(available, name) <= INT32_MAX:
                raise ValueError(f"{name} must be between {-INT32_MAX} and {INT32_MAX}")
        return available


class CellLRP(Open):
    """An instance a cell holds, as its rep reports it in detail (CellDetail.lrps)."""

    process_guid: str
    index: int
    instance_guid: str
    memory_mb: int
    disk_mb: int
    state: Literal["reserved", "starting", "running", "stopping"] = "running"
    pid: int | None = None  # the instance's OS process (process executor), for demos and tests


class CellTask(Open):
    task_guid: str
    memory_mb: int
    disk_mb: int


class CellVolume(Open):
    """A volume a cell offers; `holder` is "process_guid/index" of the instance owning an ephemeral one."""

    name: str
    size_mb: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    ephemeral: bool = False
    holder: str | None = None


class CellOffers(Open):
    """What a cell offers that only some strategies place against: host load metrics (the load-mark
    strategy), volumes, free ingress IPs and devices (the service strategy), cached source blobs (the
    objective strategy). A rep that offers none of them sends no offers at all (CellState.offers None)."""

    host: HostMetricsModel | None = None
    volumes: list[CellVolume] = Field(default_factory=list)
    ingress_ips: list[str] = Field(default_factory=list)  # free ingress IPs
    devices: dict[str, int] = Field(default_factory=dict)  # free devices by kind
    # source blobs its host caches, the most recently used first
    cached_blobs: list[CachedBlob] = Field(default_factory=list, max_length=MAX_CACHED_BLOBS)


class CellState(Open):
    """A rep's bid: what the auctioneer schedules against, and nothing else (GET {rep_url}/state?lrps=counts
    and the NATS state reply: asked of every cell every auction, so every field here costs a thousand
    cells' worth of writing and parsing per auction). Who serves the cell and what it holds instance by
    instance are the rep's own view, CellDetail."""

    cell_id: str
    zone: str
    stacks: list[str] = Field(default_factory=lambda: [DEFAULT_STACK])
    total: ResourcesModel
    available: ResourcesModel
    starting_containers: int = 0
    placement_tags: list[str] = Field(default_factory=list)
    optional_placement_tags: list[str] = Field(default_factory=list)
    volume_drivers: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    evacuating: bool = False
    cordoned: bool = False  # the operator's cordon or drain, as the BBS told the rep (CellPresence.cordoned)
    # What it holds: instances per process guid, not one entry per instance (scheduling needs only these
    # counts, and a full cell's 250 instance entries cost more to write and parse than the rest).
    lrp_counts: dict[str, int] = Field(default_factory=dict)  # reserved, starting or running
    stopping_counts: dict[str, int] = Field(default_factory=dict)  # being stopped: hold resources only
    tasks: list[CellTask] = Field(default_factory=list)
    offers: CellOffers | None = None  # None: a rep that offers nothing only some strategies read


class CellDetail(Open):
    """One cell as its rep sees it (GET {rep_url}/state?lrps=full): its bid, plus who serves it and what it
    holds instance by instance. For operators, tests and the BBS's probes; never fetched per auction."""

    bid: CellState
    rep_url: str
    insecure: bool = False  # its rep serves plain HTTP with authorization off (CellPresence.insecure)
    isolation: str = ""  # how its rep isolates instances (CellPresence.isolation)
    fencing_token: int = 0  # the highest auctioneer fencing token this rep has seen for the cell
    # the tokens it took work under, once each, in order (tests check no two leaders placed under one)
    accepted_fencing_tokens: list[int] = Field(default_factory=list)
    lrps: list[CellLRP] = Field(default_factory=list)  # every instance it holds, with its pid


class CellPresences(Open):
    """The heartbeats of several cells hosted by one rep process, in one request."""

    cells: list[CellPresence] = Field(max_length=10_000)


class HeartbeatAnswer(Open):
    """The BBS's answer to PUT /v1/cells: the cells among those reported that the operator cordoned (or
    drains). Their rep refuses work for them (an auction may have started before the cordon)."""

    cordoned: list[str] = Field(default_factory=list)
