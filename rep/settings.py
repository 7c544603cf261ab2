"""The rep's settings: `VENDUE_*` environment variables, overridden by `vendue rep` flags."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.limits import RequestLimitOptions
from common.logging import LogFormat
from common.models import DEFAULT_STACK, GUID_PATTERN
from common.tls import TLSOptions
from common.transport import Transport

from .app_users import DEFAULT_RANGE as DEFAULT_UID_RANGE
from .app_users import parse_uid_range
from .cgroups import CGROUP_FS

# A simulated cell is not the machine: give it room for a full load of default-sized containers
# (250 x 256 MB memory, 250 x 1 GB disk) instead of copying this host's sizes into every one of them.
SIM_DEFAULT_MEMORY_MB = 64 * 1024
SIM_DEFAULT_DISK_MB = 256 * 1024


class RepSettings(TLSOptions, RequestLimitOptions, BaseSettings):
    """TLSOptions: `--tls-cert/--tls-key/--tls-ca` (VENDUE_TLS_*) and `--insecure` (VENDUE_INSECURE); see
    docs/security.md. With TLS files the rep's name (rep_id) is its certificate's CN."""

    model_config = SettingsConfigDict(env_prefix="VENDUE_", extra="ignore")

    bbs_url: str = "http://127.0.0.1:8889"
    # nats: also serve state, work, stop and cancel over NATS (the HTTP API stays up: the CLI and the
    # evacuation check use it; heartbeats and reports to the BBS stay HTTP).
    transport: Transport = "http"
    nats_url: str = "nats://127.0.0.1:4222"  # may carry credentials: nats://user:pass@host:port
    nats_token: str | None = None
    cell_id: str | None = None  # default: derived from the hostname (or cell-<i> for a sim host)
    # The process's name (CellPresence.rep_id, NATS subjects vendue.rep.<rep_id>.*): its certificate's CN
    # when it has one; else this; else the cell id of a one-cell rep, or the --cell-id prefix of a sim host
    # (rep/main.py rep_id_of).
    rep_id: str | None = Field(default=None, pattern=GUID_PATTERN)
    zone: str = "z0"
    zones: int | None = Field(default=None, ge=1)  # sim host: spread cells over z0..z{zones-1}
    listen: str = "127.0.0.1"
    port: int = Field(default=1800, ge=0, le=65535)
    advertise_host: str = "127.0.0.1"
    # None: the process executor offers the machine (rep/capacity.py) less these reserves, the sim its
    # SIM_DEFAULT_*.
    memory_mb: int | None = Field(default=None, ge=1)
    disk_mb: int | None = Field(default=None, ge=1)
    memory_reserve_mb: int = Field(default=0, ge=0)
    disk_reserve_mb: int = Field(default=1024, ge=0)
    containers: int = Field(default=250, ge=1)
    stacks: list[str] = Field(default_factory=lambda: [DEFAULT_STACK])
    placement_tags: list[str] = Field(default_factory=list)
    optional_placement_tags: list[str] = Field(default_factory=list)
    volume_drivers: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    executor: Literal["process", "sim"] = "process"
    cells: int = Field(default=1, ge=1)
    sim_start_delay: float = Field(default=0.05, ge=0)
    # Reports wait up to this long to travel together (rep/outbox.py): a claim and the running report
    # of an instance that starts within it reach the BBS in one request.
    report_linger: float = Field(default=0.1, ge=0, le=5)
    sim_crash_rate: float = Field(default=0.0, ge=0)
    presence_ttl: float = Field(default=10.0, gt=0)
    evacuation_timeout: float = Field(default=600.0, ge=0)
    stop_grace: float = Field(default=10.0, ge=0)
    # Process executor (rep/isolation.py): each instance under its own uid, in its own cgroup (memory =
    # memory_mb, pids, CPU shares), in its own directory under instances_dir; or "none": as the rep's own
    # user, with RLIMIT_DATA = memory_mb (memory_limit) as its only limit.
    isolation: Literal["cgroups", "none"] = "cgroups"
    app_uid_range: str = DEFAULT_UID_RANGE
    pids_limit: int = Field(default=1024, ge=1)
    cgroup_parent: str | None = (
        None  # absolute from each hierarchy's root; default: the rep's own cgroup/vendue
    )
    instances_dir: Path | None = None  # default /var/lib/vendue/instances (isolated)
    cgroup_fs: Path = CGROUP_FS  # where the cgroup hierarchies are mounted (a hidden flag, for tests)
    memory_limit: bool = True  # --isolation none: cap each child's RLIMIT_DATA at the LRP's memory_mb
    # Process executor: an instance's output.log and output.log.1 together (rep/output_log.py), and how
    # often every instance's directory is measured against its disk_mb (rep/disk_usage.py).
    log_cap_mb: int = Field(default=10, ge=1)
    disk_check_interval: float = Field(default=2.0, gt=0)
    data_dir: Path = Path(".vendue")
    ready_file: Path | None = None
    http_timeout: float = Field(default=10.0, gt=0)
    log_level: str = "info"
    log_format: LogFormat | None = None  # common/logging.py: None picks by whether stderr is a terminal

    @field_validator("app_uid_range")
    @classmethod
    def _uid_range(cls, value: str) -> str:
        parse_uid_range(value)
        return value

    @field_validator("cgroup_parent")
    @classmethod
    def _cgroup_parent(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or ".." in value.split("/")):
            raise ValueError(f"expected an absolute cgroup path without '..' (e.g. /vendue), got {value!r}")
        return value


def default_cell_id() -> str:
    """The hostname, made a valid guid (letters, digits, `_.-`; starting with a letter or digit)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname()).strip("-_.") or "cell"
    return name[:100]

