"""The local cluster's topology: which components there are, their arguments and their ports, decided up
front from the launcher's options (`plan`). Pure decisions: nothing here starts a process or writes a file.

Where a component serves is the launcher's to say (`url`: loopback, or a host's address in
tests/cluster/multihost.py), so the plan takes it as a function.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from common.procutil import free_port

# Timings for a laptop (docs/architecture.md's defaults are 10 s / 5 s / 10 min): convergence acts within ~1
# s and an evacuating cell gives up after 30 s. The presence TTL stays at 10 s: on a busy 2-core machine a
# shorter one lets heartbeats that queue behind a large write expire healthy cells, and every false expiry
# costs a round of replacements.
DEFAULT_PRESENCE_TTL_S = 10.0
DEFAULT_CONVERGENCE_INTERVAL_S = 1.0
DEFAULT_EVACUATION_TIMEOUT_S = 30.0
# With ha=True the first BBS and auctioneer keep their single-cluster names; "-1" names them too.
FIRST_OF = {"bbs-1": "bbs", "auctioneer-1": "auctioneer"}
LOOPBACK = "127.0.0.1"


# The container executor's cells (`vendue up --executor container`): each rep gets its own share of this
# as its bridge's subnet, a /24 (room for a cell's 250 containers) while there is room for one each, else an
# equal smaller share. The rep's own default is 10.244.0.0/22, for one rep on a host.
DEFAULT_CONTAINER_SUBNET = "10.244.0.0/16"
CELL_SUBNET_PREFIX = 24
SMALLEST_CELL_SUBNET_PREFIX = 29  # 8 addresses: the rep's smallest --container-subnet


class ClusterError(RuntimeError):
    """A component did not start, or the cluster is not in the state an operation needs."""


@dataclass
class RepProcess:
    """One cell as the launcher knows it. Simulated cells hosted by one process share `proc`."""

    cell_id: str
    zone: str
    url: str
    proc: subprocess.Popen[bytes]
    component: str = ""  # the launcher's name for the process hosting this cell


@dataclass(frozen=True)
class SimRepProcess:
    """A `vendue rep --sim` process planned by the caller (`LocalCluster(sim_reps=[...])`) instead of the
    launcher: its cells named, sized and labelled as the caller likes (the simulator's cell groups)."""

    name: str  # the launcher's name for the process, e.g. "rep-g0"
    # The rep's flags that name and describe its cells (--cell-id, --cells, --zone, --memory-mb, --stack,
    # ...); the launcher adds the rest: --data-dir, the BBS URLs, the executor, timings, security, rep_args.
    args: tuple[str, ...]
    cells: tuple[tuple[str, str], ...]  # (cell_id, zone) of every cell it hosts
    cell_prefix: str = ""  # hosting many cells: the prefix of their ids (its certificate names it)


@dataclass
class Component:
    name: str  # "bbs", "auctioneer", "cell-0", or "rep-0" for a process hosting many simulated cells
    args: list[str]  # the component's arguments, without --port/--ready-file
    port: int  # 0 until the first start for reps; then kept
    cells: list[tuple[str, str]] = field(default_factory=list)  # (cell_id, zone) this process hosts
    # A process hosting many simulated cells: its certificate names the prefix of their ids (every cell it
    # may ever host) rather than each one. Empty: the certificate names exactly `cells`.
    cell_prefix: str = ""
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def data_dir(self) -> str | None:
        """The component's --data-dir (None without one)."""
        return self.args[self.args.index("--data-dir") + 1] if "--data-dir" in self.args else None


@dataclass(frozen=True)
class Options:
    """What the plan depends on: the launcher's options, as LocalCluster took them."""

    data_dir: Path
    cells: int
    zones: int
    executor: str
    isolation: str
    cell_memory_mb: int | None
    cell_disk_mb: int | None
    cell_containers: int
    bbs_args: Sequence[str]
    auctioneer_args: Sequence[str]
    rep_args: Sequence[str]
    sim_cells_per_process: int | None
    sim_reps: Sequence[SimRepProcess]
    ha: bool
    container_subnets: Sequence[str] = ()  # the container executor's: cell i's bridge subnet


@dataclass
class Plan:
    components: dict[str, Component]
    bbs_urls: list[str]  # every BBS replica's URL (the first is the BBS's)
    auctioneer_urls: list[str]
    diego_urls: list[str]  # where each BBS replica serves Diego's API (bbs/diego), in the same order


def is_bbs(name: str) -> bool:
    return name == "bbs" or name.startswith("bbs-")


def free_port_besides(taken: set[int]) -> int:
    port = free_port()
    while port in taken:
        port = free_port()
    return port


def split_container_subnet(subnet: str, cells: int) -> list[str]:
    """Cell i's bridge subnet out of the cluster's `subnet`: reps sharing a host must not share one (each
    has its own bridge, and two bridges holding the same subnet would route each other's containers
    nowhere). ValueError naming --container-subnet when there is not room enough."""
    try:
        network = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise ValueError(f"--container-subnet: expected an IPv4 subnet (CIDR, e.g. "
                         f"{DEFAULT_CONTAINER_SUBNET}), got {subnet!r}: {exc}") from None
    prefix = max(network.prefixlen + max(cells - 1, 0).bit_length(), CELL_SUBNET_PREFIX)
    if prefix > SMALLEST_CELL_SUBNET_PREFIX:
        smallest = ipaddress.IPv4Network(f"0.0.0.0/{SMALLEST_CELL_SUBNET_PREFIX}").num_addresses
        room = network.num_addresses // smallest
        raise ValueError(f"--container-subnet: {subnet} has room for {room} cell(s) of at least "
                         f"/{SMALLEST_CELL_SUBNET_PREFIX}, not {cells}: give a larger one")
    return [str(share) for share, _ in zip(network.subnets(new_prefix=prefix), range(cells), strict=False)]


def address_args(component: Component, address: str) -> list[str]:
    """The flags binding a component to its address (none for loopback, every component's default)."""
    if address == LOOPBACK:
        return []
    return ["--listen", address, *(["--advertise-host", address] if component.cells else [])]


def plan(options: Options, url: Callable[[str, int], str]) -> Plan:
    """Every component's arguments and the fixed ports of the BBS and the auctioneer; `url(name, port)` is
    where component `name` listening on `port` is reached."""
    o = options
    components: dict[str, Component] = {}
    pairs = 2 if o.ha else 1
    ports: list[int] = []
    for _ in range(3 * pairs):
        ports.append(free_port_besides(set(ports)))
    suffixes = [f"-{i + 1}" if i else "" for i in range(pairs)]
    bbs_urls = [url(f"bbs{suffix}", port) for suffix, port in zip(suffixes, ports[:pairs], strict=True)]
    auctioneer_urls = [url(f"auctioneer{suffix}", port)
                       for suffix, port in zip(suffixes, ports[pairs:2 * pairs], strict=True)]
    diego_urls = [url(f"bbs{suffix}", port) for suffix, port in zip(suffixes, ports[2 * pairs:], strict=True)]
    for i, suffix in enumerate(suffixes):
        # Pair i's auctioneer tries its own BBS first; every BBS starts auctions on its own auctioneer
        # until a lease holder is known.
        own_first = ",".join(bbs_urls[i:] + bbs_urls[:i])
        components[f"bbs{suffix}"] = Component(f"bbs{suffix}", [
            "bbs", "--data-dir", str(o.data_dir / f"bbs{suffix}"),
            "--auctioneer-url", auctioneer_urls[i],
            "--presence-ttl", str(DEFAULT_PRESENCE_TTL_S),
            "--convergence-interval", str(DEFAULT_CONVERGENCE_INTERVAL_S),
            "--diego-listen", urlsplit(diego_urls[i]).netloc,
            *o.bbs_args,
        ], ports[i])
        components[f"auctioneer{suffix}"] = Component(f"auctioneer{suffix}", [
            "auctioneer", "--bbs-url", own_first, *o.auctioneer_args,
        ], ports[pairs + i])

    common = [
        "--bbs-url", ",".join(bbs_urls), "--executor", o.executor,
        *(["--isolation", o.isolation] if o.isolation else []),
        "--presence-ttl", str(DEFAULT_PRESENCE_TTL_S),
        "--evacuation-timeout", str(DEFAULT_EVACUATION_TIMEOUT_S),
    ]
    sizes = [  # the caller's sim reps size their cells themselves
        *(["--memory-mb", str(o.cell_memory_mb)] if o.cell_memory_mb is not None else []),
        *(["--disk-mb", str(o.cell_disk_mb)] if o.cell_disk_mb is not None else []),
        "--containers", str(o.cell_containers),
    ]
    cells_dir = o.data_dir / "cells"
    if o.sim_reps:
        for rep in o.sim_reps:
            components[rep.name] = Component(rep.name, [
                "rep", *rep.args, "--data-dir", str(cells_dir / rep.name), *common, *o.rep_args,
            ], 0, list(rep.cells), cell_prefix=rep.cell_prefix)
    elif o.sim_cells_per_process:
        common += sizes
        # `vendue rep --sim --cells K --cell-id P` names its cells P-0..P-(K-1), zones z(i % Z).
        per = o.sim_cells_per_process
        for k, first in enumerate(range(0, o.cells, per)):
            count = min(per, o.cells - first)
            name, prefix = f"rep-{k}", f"sim{k}"
            hosted = [(f"{prefix}-{i}", f"z{i % o.zones}") for i in range(count)]
            # One cell per process is named exactly --cell-id and sits in --zone.
            naming = (
                ["--cells", str(count), "--zones", str(o.zones), "--cell-id", prefix]
                if count > 1
                else ["--cell-id", hosted[0][0], "--zone", hosted[0][1]]
            )
            components[name] = Component(
                name, ["rep", *naming, "--data-dir", str(cells_dir / name), *common, *o.rep_args], 0, hosted,
                cell_prefix=f"{prefix}-" if count > 1 else "",
            )
    else:
        common += sizes
        for i in range(o.cells):
            cell_id, zone = f"cell-{i}", f"z{i % o.zones}"
            subnet = ["--container-subnet", o.container_subnets[i]] if i < len(o.container_subnets) else []
            components[cell_id] = Component(cell_id, [
                "rep", "--cell-id", cell_id, "--zone", zone,
                "--data-dir", str(cells_dir / cell_id), *common, *subnet, *o.rep_args,
            ], 0, [(cell_id, zone)])
    return Plan(components, bbs_urls, auctioneer_urls, diego_urls)
