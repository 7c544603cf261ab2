"""Plain records the BBS logic works on (one per table row), and their wire (JSON) forms.

The store reads and writes these; the pure decision functions take and return them. Times are float
seconds since the epoch inside the BBS and ISO datetimes on the wire.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypedDict

# The states as the wire models' enums name them (common.models ActualState, Presence, TaskState:
# records_test.py checks they agree), as plain strings: rows are compared with them in the hot loops of
# convergence and the lifecycle, where a str compared with a StrEnum member costs up to twice as much.
ActualStateName = Literal["UNCLAIMED", "CLAIMED", "RUNNING", "CRASHED"]
PresenceName = Literal["ORDINARY", "EVACUATING", "SUSPECT"]
TaskStateName = Literal["PENDING", "RUNNING", "COMPLETED", "RESOLVING"]
UNCLAIMED: Final = "UNCLAIMED"
CLAIMED: Final = "CLAIMED"
RUNNING: Final = "RUNNING"
CRASHED: Final = "CRASHED"
ORDINARY: Final = "ORDINARY"
EVACUATING: Final = "EVACUATING"
SUSPECT: Final = "SUSPECT"
PENDING: Final = "PENDING"
TASK_RUNNING: Final = "RUNNING"
COMPLETED: Final = "COMPLETED"
RESOLVING: Final = "RESOLVING"

ActualKey = tuple[str, int, str]  # (process_guid, index, presence): the actual_lrps primary key
AUCTIONEER_LEASE = "auctioneer"  # auctioneer/leadership.py takes it through the lease API
RESCHEDULE, KEEP_REPLICAS = "reschedule", "keep-replicas"  # a desired LRP's on_cell_loss (bbs/cell_loss.py)


# An epoch only has to be unique: a random per-process prefix and a counter are, and cost no system
# call (uuid4 reads the kernel's random source each time: a tenth of a 10,000-instance desire).
_EPOCH_PREFIX = uuid.uuid4().hex[:20]
_epoch_counter = itertools.count()


def new_epoch() -> str:
    return f"{_EPOCH_PREFIX}{next(_epoch_counter):012x}"


def iso(ts: float | None) -> str | None:
    return None if ts is None else _iso(ts)


@functools.lru_cache(maxsize=8192)
def _iso(ts: float) -> str:
    # Cached: rows written together share their timestamps, and a 10,000-row listing formats each.
    return datetime.fromtimestamp(ts, UTC).isoformat()


class PortMapping(TypedDict):
    """One of an instance's ports, as the BBS keeps and serves it (common.models.PortMapping)."""

    container_port: int
    host_port: int


# What the records keep of a request body, as JSON data: one key per field of the wire model (records_test.py
# checks they agree), typed for mypy at no cost at run time (a TypedDict is a dict). Not total: a row
# written by an older BBS may lack a field added since. Read them as `d["k"] if "k" in d else default`, not
# with d.get("k", default): mypy checks the key of a subscription, never that of a .get (PEP 589 lets .get
# take any key), and the two cost the same.


class HealthCheckData(TypedDict, total=False):
    """common.models.HealthCheck."""

    type: Literal["port", "process", "http"]
    timeout_s: float
    path: str
    interval_s: float
    invocation_timeout_s: float
    failure_threshold: int


class DesiredDefinition(TypedDict, total=False):
    """A desired LRP's definition: its DesiredLRPCreate body (common.models)."""

    process_guid: str
    domain: str
    instances: int
    command: list[str]
    env: dict[str, str]
    ports: list[int]
    health_check: HealthCheckData
    on_cell_loss: Literal["reschedule", "keep-replicas"]
    exec_enabled: bool
    # common.models.PlacementFields: what the placement engine reads (placement/wire.py)
    memory_mb: int
    disk_mb: int
    stack: str
    placement_tags: list[str]
    volume_drivers: list[str]
    strategy: str | None
    objective: str | None
    source_blob: str | None
    artifacts: list[dict[str, Any]]
    image: dict[str, Any] | None  # common/models/image.py; its credentials sealed (bbs/store/sealing.py)
    labels_match: str
    volumes: list[dict[str, Any]]
    ingress_ip: bool
    devices: list[dict[str, Any]]
    affinity: list[dict[str, Any]]
    diego: str | None  # the Diego message it was desired with (bbs/diego), sealed with command and env


class TaskDefinition(TypedDict, total=False):
    """A task's definition: its TaskCreate body (common.models)."""

    task_guid: str
    domain: str
    command: list[str]
    env: dict[str, str]
    memory_mb: int
    disk_mb: int
    stack: str
    placement_tags: list[str]
    volume_drivers: list[str]
    artifacts: list[dict[str, Any]]
    image: dict[str, Any] | None  # common/models/image.py; its credentials sealed (bbs/store/sealing.py)
    completion_callback_url: str | None
    diego: str | None  # the Diego message it was desired with (bbs/diego), sealed with command and env


class ResourcesData(TypedDict):
    """common.models.ResourcesModel."""

    memory_mb: int
    disk_mb: int
    containers: int


class StoredPresence(TypedDict, total=False):
    """A cell's last heartbeat: its CellPresence body without what the BBS sets itself (expires_at,
    cordoned, draining, state: bbs/operations/cells.py BBS_CELL_FIELDS)."""

    cell_id: str
    zone: str
    rep_url: str
    stacks: list[str]
    total: ResourcesData
    placement_tags: list[str]
    optional_placement_tags: list[str]
    volume_drivers: list[str]
    labels: dict[str, str]
    evacuating: bool
    boot_id: str
    rep_id: str
    insecure: bool
    isolation: str
    available: ResourcesData | None
    instances: int
    starting: int
    host: dict[str, Any] | None  # common.models.HostMetricsModel
    cached_blobs: list[str]


@dataclass(slots=True)
class DesiredRecord:
    process_guid: str
    domain: str
    instances: int
    definition: DesiredDefinition  # the DesiredLRPCreate body, as JSON data
    created_at: float
    mod_epoch: str
    mod_index: int = 0
    on_cell_loss: str = RESCHEDULE  # also a column: a convergence pass reads it without the definition
    version: int = 1  # the definition's version (bbs/operations/versions.py): a new definition, the next

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.definition,
            "process_guid": self.process_guid,
            "domain": self.domain,
            "instances": self.instances,
            "on_cell_loss": self.on_cell_loss,
            "created_at": iso(self.created_at),
            "modification_tag": {"epoch": self.mod_epoch, "index": self.mod_index},
            "version": self.version,
        }


@dataclass(slots=True, frozen=True)
class DesiredSize:
    """A desired LRP as a convergence pass sees it: how many instances, without the definition (a
    pass reads every desired LRP, and decoding 5,000 definitions each time cost more than the rest)."""

    process_guid: str
    domain: str
    instances: int
    on_cell_loss: str = RESCHEDULE


@dataclass(slots=True)
class ActualRecord:
    process_guid: str
    index: int
    presence: PresenceName = ORDINARY
    domain: str = ""
    state: ActualStateName = UNCLAIMED
    instance_guid: str = ""
    cell_id: str = ""
    zone: str = ""
    host: str = ""
    ports: list[PortMapping] = field(default_factory=list)
    address: str = ""
    crash_count: int = 0
    crash_reason: str = ""
    since: float = 0.0  # when the state last changed
    placement_error: str = ""
    mod_epoch: str = ""
    mod_index: int = 0
    auctioned_at: float = 0.0  # internal: the last time this instance was sent to the auctioneer
    version: int = 1  # the definition version it runs: the one its claim named (its start request's)

    @property
    def key(self) -> ActualKey:
        return (self.process_guid, self.index, self.presence)

    def to_wire(self) -> dict[str, Any]:
        return {
            "process_guid": self.process_guid,
            "index": self.index,
            "domain": self.domain,
            "instance_guid": self.instance_guid,
            "cell_id": self.cell_id,
            "zone": self.zone,
            "state": self.state,
            "presence": self.presence,
            "host": self.host,
            "ports": self.ports,
            "address": self.address,
            "crash_count": self.crash_count,
            "crash_reason": self.crash_reason,
            "since": iso(self.since),
            "placement_error": self.placement_error,
            "modification_tag": {"epoch": self.mod_epoch, "index": self.mod_index},
            "version": self.version,
        }


def unclaimed(process_guid: str, index: int, domain: str, now: float) -> ActualRecord:
    """A fresh ORDINARY UNCLAIMED instance, about to be auctioned."""
    return ActualRecord(
        process_guid=process_guid,
        index=index,
        domain=domain,
        since=now,
        mod_epoch=new_epoch(),
        auctioned_at=now,
    )


def fresh_instances(desired: Iterable[DesiredRecord], now: float) -> list[ActualRecord]:
    """Every instance of newly desired LRPs, UNCLAIMED: what `unclaimed` gives for each index, built
    positionally (a 250,000-instance desire goes through here)."""
    return [
        ActualRecord(
            d.process_guid,
            index,
            ORDINARY,
            d.domain,
            UNCLAIMED,
            "",
            "",
            "",
            "",
            [],
            "",
            0,
            "",
            now,
            "",
            new_epoch(),
            0,
            now,
            d.version,
        )
        for d in desired
        for index in range(d.instances)
    ]


actual_key = operator.attrgetter("process_guid", "index", "presence")  # ActualRecord.key, without a call
_actual_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(ActualRecord)))


def _copy_actual(record: ActualRecord) -> ActualRecord:
    return ActualRecord(*_actual_fields(record))


def changed(record: ActualRecord, **changes: Any) -> ActualRecord:
    """A copy with `changes` applied and the modification tag bumped. (A shallow copy and setattr, not
    dataclasses.replace, which re-runs __init__ through its keyword machinery: a lifecycle round
    changes 10,000 records.)"""
    copy = _copy_actual(record)
    copy.mod_index = record.mod_index + 1
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


def claimed(
    record: ActualRecord,
    state: ActualStateName,
    instance_guid: str,
    cell_id: str,
    zone: str,
    now: float,
    host: str,
    ports: list[PortMapping],
    address: str,
    version: int = 1,
) -> ActualRecord:
    """`record` claimed by a cell: CLAIMED, or RUNNING when its running report came with the claim;
    placement error cleared, modification tag bumped, the version its claim names. Built positionally,
    like `fresh_instances`: a scale run claims 250,000 instances."""
    r = record
    return ActualRecord(
        r.process_guid, r.index, r.presence, r.domain, state, instance_guid, cell_id, zone, host, ports,
        address, r.crash_count, r.crash_reason, now, "", r.mod_epoch, r.mod_index + 1, r.auctioned_at,
        version,
    )


def reset_to_unclaimed(record: ActualRecord, now: float, **changes: Any) -> ActualRecord:
    """Back to UNCLAIMED ORDINARY, off any cell (crash counters kept), ready for an auction."""
    return changed(
        record,
        state=UNCLAIMED,
        presence=ORDINARY,
        instance_guid="",
        cell_id="",
        zone="",
        host="",
        ports=[],
        address="",
        since=now,
        placement_error="",
        auctioned_at=now,
        **changes,
    )


@dataclass(slots=True)
class TaskRecord:
    task_guid: str
    domain: str
    definition: TaskDefinition  # the TaskCreate body, as JSON data
    state: TaskStateName = PENDING
    cell_id: str = ""
    failed: bool = False
    failure_reason: str = ""
    exit_status: int | None = None
    result: str = ""
    rejection_count: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    first_completed_at: float | None = None
    auctioned_at: float = 0.0  # internal: the last time it was sent to the auctioneer (or callback tried)

    @property
    def callback_url(self) -> str:
        """Where its outcome is POSTed once completed ("" for none)."""
        definition = self.definition
        url = definition["completion_callback_url"] if "completion_callback_url" in definition else None
        return url or ""

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.definition,
            "task_guid": self.task_guid,
            "domain": self.domain,
            "state": self.state,
            "cell_id": self.cell_id,
            "failed": self.failed,
            "failure_reason": self.failure_reason,
            "exit_status": self.exit_status,
            "result": self.result,
            "rejection_count": self.rejection_count,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "first_completed_at": iso(self.first_completed_at),
        }


def completed(task: TaskRecord, now: float, **changes: Any) -> TaskRecord:
    return dataclasses.replace(
        task, state=COMPLETED, updated_at=now, first_completed_at=now, auctioned_at=now, **changes
    )


@dataclass(slots=True)
class CellRecord:
    cell_id: str
    presence: StoredPresence  # the CellPresence body as JSON data (without expires_at)
    expires_at: float
    disappeared: bool = False  # cell_disappeared was announced; the row stays to reach its rep
    # An operator's (vendue cells cordon|drain|uncordon): the BBS's state, kept apart from the presence a
    # heartbeat replaces, so that it survives the rep's restarts.
    cordoned: bool = False  # no new work is placed on it
    draining: bool = False  # its instances are moved away make-before-break (implies cordoned)

    @property
    def rep_url(self) -> str:
        """The root URL of the rep process hosting the cell."""
        return self.presence["rep_url"] if "rep_url" in self.presence else ""

    @property
    def rep_id(self) -> str:
        """The name of the rep process hosting the cell (its NATS subjects)."""
        return self.presence["rep_id"] if "rep_id" in self.presence else ""

    @property
    def zone(self) -> str:
        return self.presence["zone"] if "zone" in self.presence else ""

    @property
    def evacuating(self) -> bool:
        return self.presence["evacuating"] if "evacuating" in self.presence else False

    @property
    def boot_id(self) -> str:
        """The rep process's boot id at its last heartbeat (a new one: the rep restarted)."""
        return self.presence["boot_id"] if "boot_id" in self.presence else ""

    def present(self, now: float) -> bool:
        return self.expires_at >= now

    def to_wire(self, now: float | None = None) -> dict[str, Any]:
        """The cell state (CellPresence): its last heartbeat, the operator's flags, and whether it is present
        at `now` (default: present)."""
        state = "present" if now is None or self.present(now) else "suspect"
        return {**self.presence, "cell_id": self.cell_id, "expires_at": iso(self.expires_at),
                "cordoned": self.cordoned or self.draining, "draining": self.draining, "state": state}


@dataclass(slots=True, frozen=True)
class LeaseRecord:
    """One elected role: who holds it, its fencing token, until when (epoch s), where the holder answers."""

    name: str
    owner: str
    token: int
    expires_at: float
    url: str = ""


API_TOKEN = "api"  # a bearer token for the API
LOGIN_TOKEN = "login"  # a dashboard login link's: exchanged once at /ui/login, never a bearer token
SESSION_TOKEN = "session"  # a browser's, made by that exchange: a bearer token (as a cookie, GET only)
# Those a caller may present as a bearer token.
BEARER_PURPOSES = frozenset({API_TOKEN, SESSION_TOKEN})


@dataclass(slots=True, frozen=True)
class TokenRecord:
    """A bearer token as stored: never its secret, only the SHA-256 of it (hex)."""

    id: str
    name: str
    role: str
    secret_sha256: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    purpose: str = API_TOKEN

    def valid(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def to_wire(self) -> dict[str, Any]:
        """TokenInfo: what a list shows (the hash stays here too)."""
        return {"id": self.id, "role": self.role, "name": self.name, "created_at": self.created_at,
                "expires_at": self.expires_at, "revoked": self.revoked_at is not None,
                "purpose": self.purpose}
