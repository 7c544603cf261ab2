"""Wire models: the bodies of every API between client, BBS, auctioneer and rep (pydantic v2).

These are the boundary. Request bodies forbid unknown fields so a typo is a 422 naming the field, not
a silently ignored setting. Every integer, string and list they carry is bounded (docs/limits.md). Field
names follow docs/architecture.md "Wire names".

HTTP API (JSON; every list endpoint answers {"items": [...]}; errors are FastAPI's 422 shape
{"detail": [{"loc": [...], "msg": ..., "type": ...}]} or {"detail": "text"} for 404/409):

BBS (`vendue bbs`, default http://127.0.0.1:8889)
  (HTTPS and the authorization table of docs/security.md; plain HTTP only on loopback or --insecure)
  GET    /ping                                   -> {"ok": true, "ready": bool, "insecure": bool}
  GET    /livez, /readyz                         -> 200 while serving; /readyz 503 {"ready": false, "reason"}
  GET    /metrics                                -> prometheus text
  POST   /v1/desired_lrps            DesiredLRPCreate   -> 201 DesiredLRP (409 if it exists)
  GET    /v1/desired_lrps                               -> {"items": [DesiredLRP]}
  GET    /v1/desired_lrps/{process_guid}                -> DesiredLRP (404)
  PATCH  /v1/desired_lrps/{process_guid}   DesiredLRPUpdate -> DesiredLRP
  DELETE /v1/desired_lrps/{process_guid}                -> 204 (its actual LRPs are stopped and removed)
  GET    /v1/actual_lrps?process_guid=&cell_id=&state=&presence=  -> {"items": [ActualLRP]}
  GET    /v1/actual_lrps/summary?process_guid=           -> ActualLRPSummary (counts only: cheap to poll)
  POST   /v1/lifecycle          HostLifecycle  -> HostLifecycleResult   (the reports of every cell of a rep
                                                   process: one request per round per process)
  POST   /v1/placement_failures          PlacementFailures -> 204   (the auctioneer, once per auction: what it
                                                   could not place and what each cell accepted;
                                                   409 for a fencing_token older than the lease's)
  POST   /v1/auctions                AuctionReport      -> 204   (the auctioneer, once per auction: a
                                                   PlacementFailures with its durations, counts and
                                                   placement explanations; published as the event
                                                   auction_completed, without the last; 409 as above)
  GET    /v1/actual_lrps/{process_guid}/{index}/placement -> PlacementExplanation (404 when unknown: they
                                                   are kept in the BBS's memory, bounded)
  POST   /v1/tasks                   TaskCreate         -> 201 Task (409 if it exists)
  GET    /v1/tasks?state=&domain=                       -> {"items": [Task]}
  GET    /v1/tasks/{task_guid}                          -> Task
  POST   /v1/tasks/{task_guid}/cancel                   -> Task (failed, "cancelled")
  DELETE /v1/tasks/{task_guid}                          -> 204 (a COMPLETED task: resolve and delete)
  PUT    /v1/cells                   CellPresences      -> HeartbeatAnswer (the heartbeats of every cell of a
                                                   rep process; a presence lives for the TTL; the
                                                   answer names the cells cordoned)
  GET    /v1/cells?all=                                 -> {"items": [CellPresence]} (present cells, with the
                                                   capacity of their last heartbeat; all=true: expired too)
  POST   /v1/cells/{cell_id}/cordon|uncordon|drain      -> CellPresence (the cell's state after; 404 unknown):
                                                   cordon: no new work; drain: cordon and move its
                                                   instances away make-before-break; uncordon ends both
  DELETE /v1/cells/{cell_id}                            -> 204 (forget a cell that is gone: everything it held
                                                   is placed again; 409 while it is present, 404 unknown)
  POST   /v1/rebalance           RebalanceRequest       -> RebalancePlan (the moves planned, with reason and
                                                   gain; unless dry_run, queued to run make-before-break)
  GET    /v1/rebalance                                  -> RebalanceStatus (moves queued, in flight, finished)
  GET    /v1/events?app=&cell=&type=...                 -> text/event-stream of Event (SSE; `id:` per event;
                                                   Last-Event-ID: what was missed, or a `resync` event)
  GET    /ui                                            -> the dashboard page (admin, reader, its session
                                                   cookie)
  GET    /ui/login?token=                               -> 303 to /ui with a reader session cookie (403: bad
                                                   token)
  POST   /v1/leases/{name}           LeaseRequest       -> Lease (acquire or renew; held=false: another owner)
  GET    /v1/leases/{name}                              -> Lease (the current holder; 404 if none)
  DELETE /v1/leases/{name}?owner=O&token=T              -> 204 (the holder gives it up; 409 if not the holder)
  POST   /v1/tokens                  TokenCreate        -> 201 TokenCreated (the secret, shown this once)
  GET    /v1/tokens                                     -> {"items": [TokenInfo]}
  DELETE /v1/tokens/{token_id}                          -> 204 (revoked; 404 if unknown)
  POST   /v1/tokens/verify           TokenVerify        -> TokenIdentity (404: unknown, expired or revoked)

Auctioneer (`vendue auctioneer`, default http://127.0.0.1:8890; HTTPS and its table as the BBS)
  POST   /v1/lrps    [LRPStartRequest]   -> 202 {"accepted": n}
  POST   /v1/tasks   [TaskStartRequest]  -> 202 {"accepted": n}
  GET    /ping -> {"ok": true, "insecure": bool} (over NATS also "ready"; 503 while NATS is down),
  GET    /livez, /readyz (503 {"ready": false, "reason"}), GET /metrics
  GET    /v1/stats -> {auctions, lrps_placed, lrps_failed, tasks_placed, tasks_failed,
                       requests_made: {bbs, rep_state, rep_work}, last_state_fetch_seconds,
                       last_auction_seconds, leader, fencing_token, stale_token_refusals,
                       last_auction_at, ...} (counters the benchmark reads)
  A standby (not holding the "auctioneer" lease) forwards POST /v1/lrps and /v1/tasks to the holder.

Rep (`vendue rep`): one API for the N >= 1 cells of the process; `rep_url` (every cell's presence names
it) is the process's root URL, and the bodies name the cells they concern. NATS carries the same bodies
(common/transport/subjects.py).
  GET    /livez                                          -> {"ok": true}
  GET    /ping, /readyz                                  -> {"ok": true, "insecure": bool}; 503 with the
                                                            reason while it cannot take work (NATS down)
  GET    /state?lrps=counts|full&cells=a,b               -> every live cell, or those named: counts (the
                                                            default) HostCellStates, their bids; full
                                                            HostCellDetails, each bid with its rep's view
  POST   /work                 HostWork                  -> HostWorkResult (per cell: the part it rejects);
                                                            409 under a stale or unknown fencing token
  POST   /stop                 StopInstances             -> 202 Found (the instance guids it holds)
  POST   /cancel               CancelTasks               -> 202 Found (the task guids it holds)
  POST   /evacuate             EvacuateCells (optional)  -> 202 {"evacuating": [cell_id]} (none named: all)
  POST   /cordon               CordonCells               -> Found (the cell ids it hosts; the BBS, when the
                                                            operator cordons, drains or uncordons a cell)
  GET    /cells                                          -> {"items": [{cell_id, rep_url, zone}]}
  GET    /metrics                                        -> prometheus text
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .accepted_work import LRPS_PATTERN, TASKS_PATTERN
from .labels import validate_label_expression
from .objective import validate_objective
from .urls import MAX_URL_CHARS, http_url, http_url_or_none

GUID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
Guid = Annotated[str, Field(pattern=GUID_PATTERN)]
MegaBytes = Annotated[int, Field(ge=1, le=1_048_576)]
DEFAULT_STACK = "cflinuxfs4"
DEFAULT_DOMAIN = "vendue"

# --- limits: every integer, string and list a request carries is bounded (a 422 names the field) -----
# Integers are bounded to what the store holds: beyond, the database refuses the write (a 500) instead of
# the API refusing the request.
INT32_MAX = 2**31 - 1  # PostgreSQL INTEGER: instance indices, exit statuses, lease tokens, counts, sizes
INT64_MAX = 2**63 - 1  # BIGINT, and SQLite's widest integer: fencing tokens
# A command is argv (no shell). Linux refuses to exec any argument or environment string over 128 KiB
# (MAX_ARG_STRLEN), and a character is up to 4 bytes of UTF-8: past these, a process could never start.
MAX_ARGV = 256
MAX_ARG_CHARS = 32_768
MAX_ENV = 1_000  # Linux's ~2 MiB for argv and env together holds far fewer large ones (the body cap first)
MAX_ENV_NAME_CHARS = 256
MAX_TAGS = 64  # placement tags, volume drivers, stacks, volumes, devices, affinity rules, labels
MAX_NAME_CHARS = 128  # a tag, a zone, a volume, a label key, an owner, a rep's id
MAX_LABEL_CHARS = 256  # a label value
MAX_TEXT_CHARS = 4_096  # free text: a crash reason, a placement error, a failure reason
MAX_RESULT_CHARS = 10_240  # a task's result (Diego reads at most 10 KB of a task's result file)


def _no_nul(text: str) -> str:
    # No C string (argv, env) holds one, and no PostgreSQL text column: a NUL reaching the store is a 500.
    if "\0" in text:
        raise ValueError("contains a NUL character")
    return text


def _no_nul_or_none(text: str | None) -> str | None:
    return None if text is None else _no_nul(text)


def _program(argv: list[str]) -> list[str]:
    if argv and not argv[0]:
        raise ValueError("the command's first element (the program to run) is empty")
    return argv


def _environment(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"invalid environment variable name {name[:64]!r}: empty, or holding '=' or NUL")
    return env


def _nul_replaced(text: str) -> str:
    """What a process printed or said may hold NUL, which no database text column takes: kept, visibly."""
    return text.replace("\0", "\ufffd") if "\0" in text else text


StoreInt = Annotated[int, Field(ge=0, le=INT32_MAX)]  # an index, a count: what an INTEGER column holds
ExitStatus = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]  # negative: the signal that ended it
FencingToken = Annotated[int, Field(ge=0, le=INT64_MAX)]
Port = Annotated[int, Field(ge=0, le=65_535)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)]
Names = Annotated[list[Name], Field(max_length=MAX_TAGS)]
Labels = Annotated[
    dict[Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)],
         Annotated[str, Field(max_length=MAX_LABEL_CHARS), AfterValidator(_no_nul)]],
    Field(max_length=MAX_TAGS),
]
Stack = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_no_nul)]
# What a process printed or said (a crash reason, a failure, a placement error): a NUL is kept as U+FFFD.
ProcessText = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_nul_replaced)]
# A host a rep reports an instance at: a DNS name or an address (IPv6 with its zone).
Host = Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9.:%_\[\]-]*$")]
Argument = Annotated[str, Field(max_length=MAX_ARG_CHARS), AfterValidator(_no_nul)]
# A command may be empty for an LRP (the sim executor runs nothing; the process executor reports the
# instance crashed, "has no command"): the tests and the benchmarks desire such LRPs. An empty program
# name, or a NUL anywhere, is refused.
Command = Annotated[list[Argument], Field(max_length=MAX_ARGV), AfterValidator(_program)]
Environment = Annotated[
    dict[Annotated[str, Field(max_length=MAX_ENV_NAME_CHARS)], Argument],
    Field(max_length=MAX_ENV),
    AfterValidator(_environment),
]


class Strict(BaseModel):
    """Request bodies: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """Responses and peer messages: tolerate fields added by newer peers."""

    model_config = ConfigDict(extra="ignore")


class ModificationTag(Open):
    epoch: str = Field(max_length=64)
    index: StoreInt = 0


# --- desired LRPs ---------------------------------------------------------------------------------


class HealthCheck(Strict):
    type: Literal["port", "process", "http"] = "port"
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    path: Annotated[str, Field(max_length=MAX_URL_CHARS), AfterValidator(_no_nul)] = "/"


def _label_expression(text: str) -> str:
    if text:
        validate_label_expression(text)  # ValueError -> 422 naming the field (parses are cached)
    return text


@lru_cache(maxsize=4096)
def _valid_objective(text: str) -> None:
    validate_objective(text)  # a ValueError is not cached: bad input is rare, good input repeats


def _objective(text: str | None) -> str | None:
    # Every DesiredLRP on the wire passes here (10,000 instances in one Work are 10,000 of them):
    # None means the default preset and needs no parse; any text is parsed once.
    if text is not None:
        _valid_objective(text)
    return text


LabelExpression = Annotated[str, Field(max_length=1024), AfterValidator(_label_expression)]


class VolumeRequestModel(Strict):
    name: Name
    size_mb: int = Field(default=0, ge=0, le=1_048_576 * 16)
    label_match: LabelExpression = ""
    ephemeral: bool = False


class DeviceRequestModel(Strict):
    kind: Name
    count: int = Field(default=1, ge=1, le=64)


class AffinityRuleModel(Strict):
    expression: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_label_expression)]
    weight: float = Field(default=1.0, ge=-100, le=100)


# The placement strategies, in the design's order: the engine registers a picker for each (placement/).
StrategyName = Literal["diego", "dea", "loadmark", "service", "objective", "binpack", "random"]
STRATEGY_NAMES: tuple[str, ...] = get_args(StrategyName)


class PlacementFields(Strict):
    """What the placement engine reads of an LRP, shared by DesiredLRP and the auction request."""

    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    placement_tags: Names = Field(default_factory=list)
    volume_drivers: Names = Field(default_factory=list)
    strategy: StrategyName | None = None
    objective: Annotated[str | None, Field(max_length=1024), AfterValidator(_objective)] = None
    source_blob: Annotated[str | None, Field(max_length=MAX_URL_CHARS), AfterValidator(_no_nul_or_none)] = (
        None
    )
    labels_match: LabelExpression = ""
    volumes: list[VolumeRequestModel] = Field(default_factory=list, max_length=MAX_TAGS)
    ingress_ip: bool = False
    devices: list[DeviceRequestModel] = Field(default_factory=list, max_length=MAX_TAGS)
    affinity: list[AffinityRuleModel] = Field(default_factory=list, max_length=MAX_TAGS)


# What happens to an LRP's instances when their cell's presence expires (bbs/cell_loss.py): `reschedule`,
# Diego's, replaces them at once (SUSPECT until the replacement runs); `keep-replicas`, the seeds' service
# scheduler's, waits out the BBS's cell-loss grace and check, then moves only apps with a single instance.
OnCellLoss = Literal["reschedule", "keep-replicas"]


class DesiredLRPCreate(PlacementFields):
    process_guid: Guid
    domain: Guid = DEFAULT_DOMAIN
    instances: int = Field(default=1, ge=0, le=10_000)
    command: Command = Field(default_factory=list)
    env: Environment = Field(default_factory=dict)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [8080], max_length=16)
    health_check: HealthCheck = Field(default_factory=HealthCheck)
    on_cell_loss: OnCellLoss = "reschedule"


class DesiredLRP(DesiredLRPCreate):
    model_config = ConfigDict(extra="ignore")
    created_at: datetime
    modification_tag: ModificationTag


class DesiredLRPUpdate(Strict):
    instances: int | None = Field(default=None, ge=0, le=10_000)
    on_cell_loss: OnCellLoss | None = None
    # Optimistic update: when given, the update applies only if the tag still matches (else 409).
    modification_tag: ModificationTag | None = None


# --- actual LRPs ----------------------------------------------------------------------------------


class ActualState(StrEnum):
    UNCLAIMED = "UNCLAIMED"
    CLAIMED = "CLAIMED"
    RUNNING = "RUNNING"
    CRASHED = "CRASHED"


class Presence(StrEnum):
    ORDINARY = "ORDINARY"
    EVACUATING = "EVACUATING"
    SUSPECT = "SUSPECT"


class PortMapping(Open):
    container_port: Port
    host_port: Port


class ActualLRP(Open):
    process_guid: str
    index: int
    domain: str = DEFAULT_DOMAIN
    instance_guid: str = ""
    cell_id: str = ""
    zone: str = ""
    state: ActualState = ActualState.UNCLAIMED
    presence: Presence = Presence.ORDINARY
    host: str = ""
    ports: list[PortMapping] = Field(default_factory=list)
    address: str = ""
    crash_count: int = 0
    crash_reason: str = ""
    since: datetime
    placement_error: str = ""
    modification_tag: ModificationTag


class ActualLRPSummary(Open):
    """Counts of actual LRPs (GET /v1/actual_lrps/summary): what a poller needs without the rows."""

    total: int = 0
    by_state: dict[str, int] = Field(default_factory=dict)  # ORDINARY instances by state
    by_presence: dict[str, int] = Field(default_factory=dict)


# --- tasks ----------------------------------------------------------------------------------------


class TaskState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    RESOLVING = "RESOLVING"


class TaskCreate(Strict):
    task_guid: Guid
    domain: Guid = DEFAULT_DOMAIN
    command: Annotated[Command, Field(min_length=1)]
    env: Environment = Field(default_factory=dict)
    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    placement_tags: Names = Field(default_factory=list)
    volume_drivers: Names = Field(default_factory=list)
    # http(s) only; the BBS also refuses link-local and cloud metadata addresses (common/urls.py).
    completion_callback_url: Annotated[str | None, AfterValidator(http_url_or_none)] = None


class Task(TaskCreate):
    model_config = ConfigDict(extra="ignore")
    state: TaskState = TaskState.PENDING
    cell_id: str = ""
    failed: bool = False
    failure_reason: str = ""
    exit_status: ExitStatus | None = None
    result: str = ""
    rejection_count: int = 0
    created_at: datetime
    updated_at: datetime
    first_completed_at: datetime | None = None


# --- cells ----------------------------------------------------------------------------------------


class ResourcesModel(Open):
    memory_mb: int
    disk_mb: int
    containers: int


class HostMetricsModel(Open):
    swap_used_mb: float = 0.0
    swap_total_mb: float = 0.0
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    disk_used_mb: float | None = None
    disk_total_mb: float | None = None
    load5: float = 0.0
    cores: int = 1


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
    boot_id: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)] = ""
    # The rep process hosting this cell: `rep_url` is its root URL (shared by every cell it hosts: the
    # auctioneer asks each process once per auction), `rep_id` its name (the CN of its certificate), which
    # names its NATS subjects vendue.rep.<rep_id>.work|stop|cancel.
    rep_id: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)] = ""
    # Its rep serves plain HTTP with authorization off (--insecure, or no TLS files on loopback): said loudly.
    insecure: bool = False
    # How its rep isolates instances (rep/isolation.py): "cgroup-v1" or "cgroup-v2" (own uid and cgroup
    # each), "none" (as the rep's own user: --isolation none), "sim" (simulated); "" from a rep too old to
    # say.
    isolation: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)] = ""
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
    cached_blobs: list[Annotated[str, Field(max_length=MAX_URL_CHARS)]] = Field(
        default_factory=list, max_length=1_024
    )
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
    cached_blobs: list[str] = Field(default_factory=list)  # source blobs cached here


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


# --- auctions -------------------------------------------------------------------------------------


class LRPStartRequest(Open):
    """BBS -> auctioneer: start these indices of this desired LRP (one request, all indices)."""

    desired: DesiredLRP
    indices: list[StoreInt] = Field(min_length=1, max_length=10_000)  # DesiredLRPCreate.instances at most


class TaskStartRequest(Open):
    task: Task


class LRPWork(Open):
    """Auctioneer -> rep: run this instance. The rep claims it in the BBS before starting it."""

    desired: DesiredLRP
    index: int


class WorkResult(Open):
    """The part of one cell's work the rep rejected (not enough room, stale token, evacuating)."""

    rejected_lrps: list[LRPWork] = Field(default_factory=list)
    rejected_tasks: list[Task] = Field(default_factory=list)
    reason: str = ""


# The most items one rep request may carry (cells, desired LRPs, instances per group, tasks, stops): far
# above what an auction sends one process (the auctioneer splits a process's work past 10,000 items),
# and a bound on what a body can make the rep allocate.
MAX_ITEMS = 100_000
CellIds = Annotated[list[Guid], Field(max_length=10_000)]


class HostCellStates(Open):
    """GET {rep_url}/state[?lrps=counts] (and the reply on vendue.cells.state): the bids of the live cells
    of one rep process, or of those the request named that it hosts."""

    cells: list[CellState] = Field(default_factory=list)


class HostCellDetails(Open):
    """GET {rep_url}/state?lrps=full: the same cells as HostCellStates, each in detail (CellDetail)."""

    cells: list[CellDetail] = Field(default_factory=list)


class HostLRPGroup(Strict):
    """Instances of one desired LRP for one cell: `desired` is its position in HostWork.desired."""

    desired: int = Field(ge=0, le=MAX_ITEMS)
    indices: list[StoreInt] = Field(max_length=MAX_ITEMS)


class HostCellWork(Strict):
    lrp_groups: list[HostLRPGroup] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks: list[Task] = Field(default_factory=list, max_length=MAX_ITEMS)


class HostWork(Strict):
    """POST {rep_url}/work (and vendue.rep.<rep_id>.work): the work of one or more cells of one rep process,
    in one request. Each desired LRP is written (and validated) once however many of the cells get its
    instances; cells name it by position. Every part was placed under `fencing_token` (the auctioneer
    lease's token: a rep refuses an older or unknown one)."""

    desired: list[DesiredLRP] = Field(default_factory=list, max_length=MAX_ITEMS)
    cells: dict[Guid, HostCellWork] = Field(max_length=10_000)
    fencing_token: FencingToken = 0

    @model_validator(mode="after")
    def _references_exist(self) -> HostWork:
        for cell_id, work in self.cells.items():
            for i, group in enumerate(work.lrp_groups):
                if group.desired >= len(self.desired):
                    raise ValueError(
                        f"cells.{cell_id}.lrp_groups.{i}.desired: {group.desired} names no entry of"
                        f" `desired` ({len(self.desired)} entries)"
                    )
        return self

    def instances(self, cell_id: str) -> list[tuple[DesiredLRP, int]]:
        """One cell's LRP instances as (desired LRP, index), group by group."""
        desired = self.desired
        return [(desired[g.desired], index) for g in self.cells[cell_id].lrp_groups for index in g.indices]


class HostWorkResult(Open):
    """Each cell's WorkResult. A cell of the request that is not (or no longer) hosted here is absent:
    none of its work was taken."""

    cells: dict[str, WorkResult] = Field(default_factory=dict)


class InstanceStop(Strict):
    cell_id: Guid
    process_guid: str = Field(min_length=1, max_length=128)
    instance_guid: str = Field(min_length=1, max_length=128)


class StopInstances(Strict):
    """POST {rep_url}/stop (and vendue.rep.<rep_id>.stop): stop these instances (the BBS, in one batch)."""

    instances: list[InstanceStop] = Field(min_length=1, max_length=MAX_ITEMS)


class TaskCancel(Strict):
    cell_id: Guid
    task_guid: str = Field(min_length=1, max_length=128)


class CancelTasks(Strict):
    """POST {rep_url}/cancel (and vendue.rep.<rep_id>.cancel): cancel these tasks (the BBS, in one batch)."""

    tasks: list[TaskCancel] = Field(min_length=1, max_length=MAX_ITEMS)


class CellCordon(Strict):
    cell_id: Guid
    cordoned: bool


class CordonCells(Strict):
    """POST {rep_url}/cordon (and vendue.rep.<rep_id>.cordon): the operator cordoned (or drains) these cells,
    or uncordoned them (the BBS, at once; every heartbeat's answer says it again). Answered with Found: the
    cell ids hosted there."""

    cells: list[CellCordon] = Field(min_length=1, max_length=10_000)


class Found(Open):
    """The answer to a stop or a cancel: the guids (instance or task) the rep held and now stops."""

    found: list[str] = Field(default_factory=list)


class EvacuateCells(Strict):
    """POST {rep_url}/evacuate: the cells to evacuate (none named: every cell of the process)."""

    cells: CellIds | None = None


class LRPPlacementFailure(Open):
    process_guid: Guid
    index: StoreInt
    error: ProcessText
    detail: ProcessText = ""


class TaskPlacementFailure(Open):
    task_guid: Guid
    error: ProcessText
    detail: ProcessText = ""


# A token of AcceptedWork is at most a guid (128), a colon, ten digits and a space.
MAX_ACCEPTED_CHARS = MAX_ITEMS * 140


class AcceptedWork(Open):
    """What one cell accepted in an auction, in common/accepted_work.py's compact form: `lrps` is
    "process_guid:index" tokens, `tasks` task guids, each separated by single spaces."""

    lrps: Annotated[str, Field(max_length=MAX_ACCEPTED_CHARS, pattern=LRPS_PATTERN)] = ""
    tasks: Annotated[str, Field(max_length=MAX_ACCEPTED_CHARS, pattern=TASKS_PATTERN)] = ""


class PlacementFailures(Open):
    """The auctioneer's report of one auction (POST /v1/placement_failures): what it could not place, and
    what each cell accepted. The BBS keeps the second until the cells' claims arrive, so that work a
    present cell accepted is not auctioned again however late its claim is (bbs/placements.py)."""

    # An auction of 250,000 instances that cannot fit reports every one (the bulk body cap allows it).
    lrps: list[LRPPlacementFailure] = Field(default_factory=list, max_length=MAX_ITEMS * 10)
    tasks: list[TaskPlacementFailure] = Field(default_factory=list, max_length=MAX_ITEMS)
    accepted: dict[Guid, AcceptedWork] = Field(default_factory=dict, max_length=10_000)  # by cell id
    # The auctioneer lease's token the auction ran under: the BBS refuses (409) a report from an older term.
    fencing_token: FencingToken = 0


# --- why an instance is where it is (placement/placement_trace.py) ------------------------

MAX_EXPLANATIONS = 10_000  # per auction report: the auctioneer's --explanations is at most this


class ScoredCandidate(Open):
    """One cell an auction scored for an instance, as it stood then: Diego's score and its parts."""

    cell_id: Guid
    zone: Name
    zone_index: StoreInt  # the cell's index in its zone: the last tie-break
    components: dict[Name, float] = Field(default_factory=dict, max_length=32)
    chosen: bool = False


class ZoneVisit(Open):
    """A zone in the order the auction tried them for an instance: groups of equal instance count of the
    process (and, for an app with a share per zone, equal room), the earlier group first."""

    zone: Name
    group: StoreInt
    instances: StoreInt | None = None  # of the process in the zone then (None: one group, not recorded)
    room: int | None = None  # instances of this size the zone had room for beyond what it is owed


class PlacementExplanation(Open):
    """Why one LRP instance went where it did in its latest auction, or why nothing could take it:
    for a placed one the candidates (best first) with their score components and what decided;
    for an unplaced one Diego's error and the per-filter breakdown (`detail`)."""

    process_guid: Guid
    index: StoreInt
    placed: bool
    cell_id: Guid | None = None
    strategy: Name | None = None
    error: ProcessText = ""
    detail: ProcessText = ""
    zones: list[ZoneVisit] = Field(default_factory=list, max_length=256)
    candidates: list[ScoredCandidate] = Field(default_factory=list, max_length=32)
    decided_by: ProcessText = ""  # score | zone order | cell index | only candidate | strategy
    zone_order: ProcessText = ""  # why the winner's zone came before the zones of later groups
    auctioned_at: float = 0.0  # epoch seconds: when the auction that decided this ended
    source: Literal["auction", "placement_error"] = "auction"  # the latter: only the stored error is known


class AuctionReport(PlacementFailures):
    """POST /v1/auctions, the auctioneer's one report per auction once its work is sent: what could not be
    placed and what each cell accepted (as PlacementFailures, fenced the same way), with the auction's
    durations and counts (published as `auction_completed`) and its placement explanations."""

    duration_s: float = Field(ge=0, le=86_400)
    fetch_states_s: float = Field(ge=0, le=86_400)
    lrps_placed: StoreInt = 0
    lrps_failed: StoreInt = 0
    tasks_placed: StoreInt = 0
    tasks_failed: StoreInt = 0
    finished_at: float = Field(default=0.0, ge=0)  # epoch seconds
    explanations: list[PlacementExplanation] = Field(default_factory=list, max_length=MAX_EXPLANATIONS)


# --- the rep's batched lifecycle report -----------------------------------------------------------


class InstanceRef(Open):
    process_guid: Guid
    index: StoreInt
    instance_guid: Guid


class RunningInstanceReport(InstanceRef):
    host: Host = "127.0.0.1"
    ports: list[PortMapping] = Field(default_factory=list, max_length=16)  # DesiredLRPCreate.ports at most


class CrashReport(InstanceRef):
    reason: ProcessText = ""


class TaskCompletion(Open):
    task_guid: Guid
    failed: bool = False
    failure_reason: ProcessText = ""
    exit_status: ExitStatus | None = None
    result: Annotated[str, Field(max_length=MAX_RESULT_CHARS), AfterValidator(_nul_replaced)] = ""


class CellLifecycle(Open):
    """Everything one cell has to tell the BBS this round, in one request."""

    claimed: list[InstanceRef] = Field(default_factory=list, max_length=MAX_ITEMS)
    running: list[RunningInstanceReport] = Field(default_factory=list, max_length=MAX_ITEMS)
    crashed: list[CrashReport] = Field(default_factory=list, max_length=MAX_ITEMS)
    removed: list[InstanceRef] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks_started: list[Guid] = Field(default_factory=list, max_length=MAX_ITEMS)
    tasks_completed: list[TaskCompletion] = Field(default_factory=list, max_length=MAX_ITEMS)


class LifecycleResult(Open):
    """What the BBS refused: the rep stops instances whose claim or report was refused."""

    refused: list[InstanceRef] = Field(default_factory=list)
    refused_tasks: list[str] = Field(default_factory=list)


class HostLifecycle(Open):
    """POST /v1/lifecycle: the lifecycle reports of the cells of one rep process, in one request."""

    cells: dict[Guid, CellLifecycle] = Field(max_length=10_000)


class HostLifecycleResult(Open):
    cells: dict[str, LifecycleResult] = Field(default_factory=dict)


class CellPresences(Open):
    """The heartbeats of several cells hosted by one rep process, in one request."""

    cells: list[CellPresence] = Field(max_length=10_000)


class HeartbeatAnswer(Open):
    """The BBS's answer to PUT /v1/cells: the cells among those reported that the operator cordoned (or
    drains). Their rep refuses work for them (an auction may have started before the cordon)."""

    cordoned: list[str] = Field(default_factory=list)


# --- events ---------------------------------------------------------------------------------------


# What GET /v1/events?type= accepts (and `vendue events --type`): every type the BBS publishes. `resync`:
# a Last-Event-ID the BBS cannot resume from (list again); cell_changed, auction_completed and
# convergence_completed feed the dashboard (/ui).
EVENT_TYPES = (
    "desired_lrp_created", "desired_lrp_changed", "desired_lrp_removed",
    "actual_lrp_created", "actual_lrp_changed", "actual_lrp_removed",
    "task_created", "task_changed", "task_removed",
    "cell_appeared", "cell_disappeared", "cell_removed", "cell_changed",
    "auction_completed", "convergence_completed", "resync",
    "rebalance_move_started", "rebalance_move_completed", "rebalance_move_abandoned",
)
EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]


class Event(Open):
    """One change, as sent on the BBS's SSE stream (`id: <id>`, `event: <type>`, `data: <json>`) and on
    NATS. `id`: `<epoch>-<seq>` of the BBS process that published it (bbs/events.py), what a client sends
    back as Last-Event-ID to resume."""

    # One of EVENT_TYPES; cell_changed: cordoned, drained or uncordoned, with the cell state as data.
    type: str
    data: dict
    at: datetime
    id: str = ""


# --- rebalancing ----------------------------------------------------------------------------------


class RebalanceRequest(Strict):
    """`POST /v1/rebalance` (`vendue rebalance`): plan the moves that restore balance; unless `dry_run`,
    carry them out make-before-break within the BBS's budget. `app`: only its instances; `max_moves`: at
    most this many (0: all found)."""

    dry_run: bool = False
    app: Guid | None = None
    max_moves: Annotated[int, Field(ge=0, le=100_000)] = 0


class RebalanceMove(Open):
    process_guid: str
    index: int
    from_cell: str
    to_cell: str
    from_zone: str
    to_zone: str
    reason: Literal["zone_spread", "cell_load", "load_mark", "strategy_margin"]
    detail: str
    gain: float
    outcome: Literal["completed", "abandoned", "skipped"] | None = None  # finished moves only
    why: str | None = None
    landed_on: str | None = None  # a completed move's: the cell its replacement runs on (the auction's pick)


class RebalancePlan(Open):
    dry_run: bool
    moves: list[RebalanceMove]


class RebalanceStatus(Open):
    queued: list[RebalanceMove]
    in_flight: list[RebalanceMove]
    finished: list[RebalanceMove]  # the latest, oldest first


# --- leases ---------------------------------------------------------------------------------------


class LeaseRequest(Strict):
    """Take or renew a lease (`POST /v1/leases/{name}`): the same owner renews and keeps its token."""

    owner: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)]
    # Where the holder answers: peers forward to it.
    url: Annotated[str, Field(max_length=MAX_URL_CHARS), AfterValidator(_no_nul)] = ""
    ttl_s: float = Field(gt=0, le=3600)


class Lease(Open):
    """A lease as it stands: `held` says whether the requester holds it (GET: whether it is unexpired).
    `token` is the fencing token; it grows with every change of holder."""

    held: bool
    owner: str
    url: str = ""
    token: StoreInt
    expires_at: float  # epoch seconds


# --- bearer tokens (people and scripts; components use their certificates) ----------------------------

TokenRole = Literal["admin", "reader"]  # a bearer token never stands for a component
TOKEN_ROLES: tuple[str, ...] = get_args(TokenRole)


class TokenCreate(Strict):
    """`POST /v1/tokens` (admin): a new bearer token for a person or a script."""

    role: TokenRole
    # Who it is for, shown in lists and logs.
    name: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)] = ""
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)  # None: never expires
    # api: a bearer token; login: a dashboard login link's, good for one login at /ui/login and nothing else
    # (a browser session is made by that login: `session`, never asked for here).
    purpose: Literal["api", "login"] = "api"


class TokenInfo(Open):
    """A token as listed: never its secret (only its hash is stored)."""

    id: str
    role: str
    name: str
    created_at: float
    expires_at: float | None = None
    revoked: bool = False
    purpose: str = "api"  # api, login or session (TokenCreate)


class TokenCreated(TokenInfo):
    """The answer to a create: the secret, shown this once."""

    token: str


class TokenVerify(Strict):
    """`POST /v1/tokens/verify` (components): who a bearer token a caller presented stands for."""

    token: str = Field(min_length=1, max_length=256)


class TokenIdentity(Open):
    role: str
    name: str
    id: str = ""
