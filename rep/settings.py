"""The rep's settings: `VENDUE_*` environment variables, overridden by `vendue rep` flags."""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.limits import RequestLimitOptions
from common.logging import LogFormat
from common.models import DEFAULT_STACK, GUID_PATTERN
from common.models.artifact import DIGEST_PATTERN
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

    bbs_url: str = Field(default="http://127.0.0.1:8889",
                         description="The BBS URL, or several comma-separated replicas to fail over between.")
    # nats: also serve state, work, stop and cancel over NATS (the HTTP API stays up: the CLI and the
    # evacuation check use it; heartbeats and reports to the BBS stay HTTP).
    transport: Transport = Field(default="http",
                                 description="http or nats: also serve state and work over NATS.")
    nats_url: str = Field(default="nats://127.0.0.1:4222",  # may carry credentials: nats://user:pass@host:port
                          description="NATS server(s), credentials allowed; token: VENDUE_NATS_TOKEN.")
    nats_token: str | None = Field(default=None, json_schema_extra={"flag": None})  # a secret: env only
    cell_id: str | None = Field(  # default: derived from the hostname (or cell-<i> for a sim host)
        default=None, description="Cell id (default: from the hostname).")
    # The process's name (CellPresence.rep_id, NATS subjects vendue.rep.<rep_id>.*): its certificate's CN
    # when it has one; else this; else the cell id of a one-cell rep, or the --cell-id prefix of a sim host
    # (rep/main.py rep_id_of).
    rep_id: str | None = Field(default=None, pattern=GUID_PATTERN, description="The process's name (NATS "
                               "subjects; default: the cell id, or the sim prefix).")
    zone: str = Field(default="z0", description="Availability zone.")
    zones: int | None = Field(default=None, ge=1, description="Sim: spread the cells over z0..z{Z-1}.")
    listen: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=1800, ge=0, le=65535, description="Port; 0 binds a free one.")
    advertise_host: str = Field(default="127.0.0.1", description="Host in rep and app URLs.")
    # None: the process executor offers the machine (rep/capacity.py) less these reserves, the sim its
    # SIM_DEFAULT_*.
    memory_mb: int | None = Field(default=None, ge=1, description="Memory to offer, MB (default: MemTotal "
                                  "of /proc/meminfo less --memory-reserve-mb; sim 64 GB).")
    disk_mb: int | None = Field(default=None, ge=1, description="Disk to offer, MB (default: the size of the "
                                "filesystem holding the instance directories less --disk-reserve-mb; sim "
                                "256 GB).")
    memory_reserve_mb: int = Field(default=0, ge=0,
                                   description="Memory kept back from the default --memory-mb, MB.")
    disk_reserve_mb: int = Field(default=1024, ge=0,
                                 description="Disk kept back from the default --disk-mb, MB.")
    containers: int = Field(default=250, ge=1, description="Container slots.")
    stacks: list[str] = Field(default_factory=lambda: [DEFAULT_STACK],
                              description="Supported stack, repeatable.",
                              json_schema_extra={"flag": "--stack"})
    placement_tags: list[str] = Field(default_factory=list,
                                      description="Placement tag of this cell, repeatable.",
                                      json_schema_extra={"flag": "--tag"})
    optional_placement_tags: list[str] = Field(default_factory=list,
                                               description="Optional placement tag, repeatable.",
                                               json_schema_extra={"flag": "--optional-tag"})
    volume_drivers: list[str] = Field(default_factory=list, description="Volume driver, repeatable.",
                                      json_schema_extra={"flag": "--volume-driver"})
    labels: dict[str, str] = Field(default_factory=dict, description="Cell label k=v, repeatable.",
                                   json_schema_extra={"flag": "--label"})
    executor: Literal["process", "sim", "container"] = Field(
        default="process", description="process, container (an image's instances in containers, runc and "
        "CNI: docs/containers.md) or sim (--sim).")
    # Container executor (rep/container_executor.py, rep/cni.py): the cell's bridge network. Reps sharing a
    # host need subnets of their own.
    container_subnet: str = Field(default="10.244.0.0/22", description="Container executor: the subnet of "
                                  "the cell's bridge its containers take addresses from (CIDR).")
    container_egress: Literal["allow", "deny"] = Field(
        default="allow", description="Container executor: whether containers may reach beyond their host.")
    insecure_registries: list[str] = Field(
        default_factory=list, description="Container executor: a registry HOST:PORT pulled from over plain "
        "http, repeatable.", json_schema_extra={"flag": "--insecure-registry"})
    cni_path: Path = Field(default=Path("/usr/lib/cni"), description="Container executor: where the CNI "
                           "plugins' binaries are (bridge, host-local, portmap, loopback).")
    container_init: Path = Field(default=Path("/usr/bin/tini-static"), description="Container executor: the "
                                 "static init run as each container's pid 1, the app its child (Debian's "
                                 "tini-static): it forwards signals and reaps orphans.")
    registry_ca: Path | None = Field(default=None, description="Container executor: a CA bundle (PEM) "
                                     "trusted, beside the system's, for registries over https.")
    cells: int = Field(default=1, ge=1, description="Sim: simulated cells in this process.")
    sim_start_delay: float = Field(default=0.05, ge=0, description="Sim start, s.")
    # Reports wait up to this long to travel together (rep/outbox.py): the claims of work arriving in
    # pieces reach the BBS in one request (and a simulated instance's promised running report with them).
    report_linger: float = Field(default=0.1, ge=0, le=5,
                                 description="Lifecycle reports gather this long, s.")
    sim_crash_rate: float = Field(default=0.0, ge=0, description="Sim crashes per s.")
    # A sim host has no artifact cache: these stand for one, so that tests and benchmarks can have warm
    # cells (the cache term: docs/placement.md).
    sim_cached_blobs: list[Annotated[str, Field(pattern=DIGEST_PATTERN)]] = Field(
        default_factory=list, description="Sim: a digest (sha256:...) its cells say their host caches, "
        "repeatable.", json_schema_extra={"flag": "--sim-cached-blob"})
    presence_ttl: float = Field(default=10.0, gt=0, description="Presence TTL, s; beat TTL/3.")
    evacuation_timeout: float = Field(default=600.0, ge=0, description="Drain limit, s.")
    stop_grace: float = Field(default=10.0, ge=0, description="SIGTERM->SIGKILL grace, s.")
    # Process executor (rep/isolation.py): each instance under its own uid, in its own cgroup (memory =
    # memory_mb, pids, CPU shares), in its own directory under instances_dir; or "none": as the rep's own
    # user, with RLIMIT_DATA = memory_mb (memory_limit) as its only limit.
    isolation: Literal["cgroups", "none"] = Field(
        default="cgroups", description="Process executor: cgroups (needs root: each instance under its own "
        "uid, in its own cgroup) or none (apps run as the rep's own user, unisolated).")
    # rep/disk_quota.py: with cgroups, each instance's directory a loop-mounted ext4 filesystem of disk_mb
    # where the host allows it (auto), else (or with poll) measured every disk_check_interval.
    disk_quota: Literal["auto", "poll"] = Field(
        default="auto", description="Process executor with cgroups: auto (each instance's disk_mb a "
        "filesystem of its own, a loop-mounted ext4 image, where the host allows; else measured) or poll "
        "(measured every --disk-check-interval, stopped when over).")
    app_uid_range: str = Field(default=DEFAULT_UID_RANGE, description="Uids (gid = uid) given to instances, "
                               "LO-HI.")
    pids_limit: int = Field(default=1024, ge=1, description="Processes and threads per instance.")
    cgroup_parent: str | None = Field(
        default=None, description="Put the instances' cgroups under this one, absolute from each hierarchy's "
        "root (default: the rep's own cgroup + /vendue).")
    instances_dir: Path | None = Field(
        default=None, description="Where instance directories live. Default with cgroups: "
        "/var/lib/vendue/instances/<key>/<cell>/ (<key> from the data dir), reachable by the apps' users "
        "whatever the data dir's parents; with --isolation none: <data-dir>/<cell>/containers/.")
    cgroup_fs: Path = Field(default=CGROUP_FS, json_schema_extra={"hidden": True},  # a flag for tests
                            description="Where the cgroup hierarchies are mounted.")
    memory_limit: bool = Field(default=True,
                               description="--isolation none: cap each child's RLIMIT_DATA at its memory_mb.")
    # Process executor: an instance's output.log and output.log.1 together (rep/output_log.py), and how
    # often every instance's directory is measured against its disk_mb (rep/disk_usage.py).
    log_cap_mb: int = Field(default=10, ge=1, description="An instance's output.log and output.log.1 "
                            "together, MB; the older half rotates away.")
    disk_check_interval: float = Field(default=2.0, gt=0, description="Measure every instance's directory "
                                       "against its disk_mb this often, s; also on exit.")
    data_dir: Path = Field(default=Path(".vendue"), description="Container directories.")
    # Process executor: one content-addressed artifact cache for every cell of this host
    # (rep/artifact_cache.py, docs/artifacts.md "The cell's cache").
    cache_dir: Path | None = Field(default=None, description="Artifact cache (default: <data-dir>/cache).")
    cache_mb: int = Field(default=10_240, ge=1, description="Artifact cache size, MB; least recently used "
                          "blobs no running instance uses are evicted past it.")
    artifact_ca: Path | None = Field(default=None, description="A CA bundle (PEM) trusted, beside the "
                                     "system's, for artifacts fetched from https URLs.")
    ready_file: Path | None = Field(default=None, description="Write {url, pid} here once serving.")
    http_timeout: float = Field(default=10.0, gt=0, description="Seconds per call to the BBS.")
    log_level: str = Field(default="info", description="debug, info, warning, error.")
    log_format: LogFormat | None = Field(  # common/logging.py: None picks by whether stderr is a terminal
        default=None, description="json (one object per line) or console (for a terminal) (default: console "
        "on a terminal, else json).")

    @field_validator("app_uid_range")
    @classmethod
    def _uid_range(cls, value: str) -> str:
        parse_uid_range(value)
        return value

    @field_validator("container_subnet")
    @classmethod
    def _subnet(cls, value: str) -> str:
        network = ipaddress.ip_network(value, strict=True)  # ValueError names what is wrong
        if network.version != 4 or network.prefixlen > 29:
            raise ValueError(f"expected an IPv4 subnet of 8 addresses or more, got {value}")
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

