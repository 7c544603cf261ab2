"""A Vendue cluster on real network hosts on one machine: LocalCluster's components, each on its host.

    with MultiHostCluster(cells=3) as cluster:          # needs root and `ip` (see unavailable_reason)
        cluster.bbs_url                                  # https://198.18.N.2:PORT
        cluster.partition("cell-1"); cluster.heal("cell-1")
        cluster.cut("auctioneer-1", "control")           # with separate_auctioneers=True
        cluster.instance_processes("web")                # host -> index -> pids, read from the namespaces

Hosts (netns.py, one network namespace each, on one bridge):
- `control`: PostgreSQL; both BBS replicas, unless `separate_bbs`, which puts them on hosts `bbs-1` and
  `bbs-2` (so that one replica alone can be cut off from the database); both auctioneers too, unless
  `separate_auctioneers`, which puts them on hosts `auctioneer-1` and `auctioneer-2` (so that the leader
  alone can be cut off from the BBS and its database while it still reaches every cell);
- on transport nats, a NATS cluster of three servers, "nats", "nats-2" and "nats-3", on hosts `nats-1`,
  `nats-2` and `nats-3` (client port 4222, routes on 6222 between all three over mutual TLS: what a NATS
  deployment past one machine looks like, common/transport/nats_server.py `cluster_servers`); every
  component is given all three URLs and moves to another server when its own goes;
- one host per cell, named as the cell (`cell-0`, ...), running its rep with the process executor; or, with
  `sim_cells_per_process` (the benchmarks: tests/bench/e2e_hosts.py), one host per rep process of simulated
  cells, named as the process (`rep-0`, ...);
- with `executor="container"`, the cells' reps run the container executor (rep/container_executor.py):
  each makes its CNI bridge, veths and iptables rules in its host's namespace, on a /24 of its own in
  198.19.0.0/16 that is not the hosts' network (tests/support/containers.py `free_subnets`), and maps
  instance ports on its host's address; a host `registry` runs the test registry (plain HTTP,
  tests/support/oci_registry.py) on its address, `cluster.registry`, which the BBS and the reps are told
  is insecure (`--insecure-registry`).

Every component binds its host's address, never loopback, with TLS on: its certificate carries that
address. Everything else is LocalCluster's (deploy/cluster.py): the plan of arguments, certificates, key
ring, ready files, the embedded PostgreSQL (durable, as `vendue up --ha` runs it), stop order, kill and
restart; this class only says where each component runs (`_address`, `_on_host`). The tests talk to the
cluster from the root namespace over the bridge, as its admin (`verify`, `http_client`).

`close()` (also on a failed start, and from `with`) heals the network, stops the cluster, kills whatever
is left in the namespaces, removes the containers the reps left (runc's state, overlay mounts, their
namespaces: none of them lives in a host's namespace), the namespaces, the veths, the bridge and the data
dir; it returns the pids it had to kill (a clean stop leaves none). A run killed before that is swept by
the next one (netns.py `sweep`, and `sweep_data_dirs` for its reps' containers and cgroups and its files).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from common.procutil import pid_alive
from common.transport.nats_server import ROUTE_PORT, NatsServer, NatsServerError, cluster_servers
from deploy.cluster import FIRST_OF, ClusterError, LocalCluster
from rep.isolation import sweep_rep
from tests.e2e.conftest import proc_environ
from tests.support.containers import free_subnets
from tests.support.oci_registry import Registry, oci_registry

from .hosts import Host
from .netns import (
    PREFIX,
    Network,
    NetworkError,
    dead_tag,
    established_peers,
    firewall_unavailable_reason,
    ip,
    new_tag,
    sweep,
)

T = TypeVar("T")
CONTROL = "control"
DATA_PREFIX = "vendue-hosts-"  # + the tag (pid in hex + 2 random hex digits) + "-" + mkdtemp's suffix
OUR_DATA_DIR = re.compile(r"^vendue-hosts-([0-9a-f]+)-")
# The NATS cluster on transport nats: each server's name (as `kill`, `restart` and `host_of` take it) and
# its host. Every server listens on the usual ports, each on its own host.
NATS_HOSTS = {"nats": "nats-1", "nats-2": "nats-2", "nats-3": "nats-3"}
NATS_CLIENT_PORT = 4222
REGISTRY = "registry"  # the container cluster's registry host
EXECUTORS = ("process", "container")


def unavailable_reason() -> str | None:
    """Why the hosts' network cannot be had here (None: it can): network namespaces cannot be made
    (`namespaces_unavailable_reason`), or the hosts could not reach each other over the bridge (a firewall
    like Docker's and no `iptables` to let the bridge's traffic pass: netns.firewall_unavailable_reason).
    The firewall is looked at every time: it can change while the tests run (Docker starting)."""
    return namespaces_unavailable_reason() or firewall_unavailable_reason()


@functools.cache
def namespaces_unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here (None: they can): not Linux, not root, no `ip`, or root
    without the capability (a container not given CAP_SYS_ADMIN), found by making one and removing it."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CI runs as root)"
    if shutil.which("ip") is None:
        return "needs `ip` from iproute2 (apt-get install iproute2)"
    probe = f"{PREFIX}{new_tag()}-probe"  # swept like any namespace of ours if this process dies now
    try:
        ip("netns", "add", probe)
    except NetworkError as exc:
        return f"cannot make a network namespace here, root as it is: {exc}"
    ip("netns", "del", probe, check=False)
    return None


def sweep_data_dirs() -> list[Path]:
    """Remove the data dirs of clusters whose process is gone (killed before its teardown), with what their
    reps left outside them (rep/isolation.py `sweep_rep`: cgroups, instance directories, and a container
    rep's runc containers, overlay mounts on the data dir and container namespaces, which outlive the
    hosts' namespaces). Their hosts' processes are killed first (netns.py `sweep`): a rep is never swept
    while it runs."""
    dead = [path for path in Path(tempfile.gettempdir()).glob(f"{DATA_PREFIX}*")
            if (match := OUR_DATA_DIR.match(path.name)) and dead_tag(match[1])]
    if dead:
        sweep()
    for path in dead:
        for rep_dir in sorted((path / "cells").iterdir()) if (path / "cells").is_dir() else []:
            with contextlib.suppress(Exception):  # what one rep left must not keep the others' there
                sweep_rep(rep_dir)
        shutil.rmtree(path, ignore_errors=True)
    return dead


class MultiHostCluster(LocalCluster):
    def __init__(
        self,
        cells: int = 3,
        zones: int = 1,
        *,
        separate_auctioneers: bool = False,
        separate_bbs: bool = False,
        transport: str = "http",
        executor: str = "process",
        bbs_args: Sequence[str] = (),
        auctioneer_args: Sequence[str] = (),
        rep_args: Sequence[str] = (),
        **options: Any,
    ) -> None:
        """Two BBS replicas and two auctioneers on an embedded PostgreSQL, and `cells` reps in `zones`
        zones (round-robin) with `executor` ("process" or "container": see the module doc); `options`: the
        rest of LocalCluster's (cell sizes, env, encryption, and `sim_cells_per_process`: simulated cells,
        that many per rep process, each process on its host)."""
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        sweep_data_dirs()
        data_dir = Path(tempfile.mkdtemp(prefix=f"{DATA_PREFIX}{new_tag()}-"))
        data_dir.chmod(0o755)  # PostgreSQL's own user must reach its files (the server runs as it under root)
        # Picked again once the hosts' network is made (start), to keep clear of it; these pass LocalCluster's
        # check until then.
        subnets = free_subnets(cells) if executor == "container" else ()
        try:
            super().__init__(data_dir, cells=cells, zones=zones, executor=executor, bbs_args=bbs_args,
                             auctioneer_args=auctioneer_args, rep_args=rep_args, transport=transport, ha=True,
                             container_subnets=subnets, **options)
        except BaseException:
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        self.separate_auctioneers = separate_auctioneers
        self.separate_bbs = separate_bbs
        # The NATS cluster's servers by name (NATS_HOSTS), once started; "nats" is also `nats_server`.
        self.nats_servers: dict[str, NatsServer] = {}
        self.network: Network | None = None
        self.hosts: dict[str, Host] = {}
        self.registry: Registry | None = None  # the container cluster's, once started
        self._registry_context: contextlib.ExitStack = contextlib.ExitStack()

    # --- the layout -------------------------------------------------------------------------------------

    def host_names(self) -> list[str]:
        bbs = ["bbs-1", "bbs-2"] if self.separate_bbs else []
        auctioneers = ["auctioneer-1", "auctioneer-2"] if self.separate_auctioneers else []
        nats = list(NATS_HOSTS.values()) if self.transport == "nats" else []
        registry = [REGISTRY] if self.executor == "container" else []
        return [CONTROL, *bbs, *auctioneers, *nats, *registry, *self._rep_hosts()]

    def _rep_hosts(self) -> list[str]:
        """One host per rep process: `cell-<i>` per cell, or with `sim_cells_per_process` (simulated cells,
        many per rep, for the benchmarks) `rep-<k>`, as LocalCluster names those processes."""
        if not self.sim_cells_per_process:
            return [f"cell-{i}" for i in range(self.cells)]
        return [f"rep-{k}" for k in range(-(-self.cells // self.sim_cells_per_process))]

    def host_of(self, component: str) -> str:
        """The host a component runs on: "bbs", "bbs-2", "auctioneer", "auctioneer-2", "postgres",
        "nats", "nats-2", "nats-3" or a cell id."""
        name = FIRST_OF.get(component, component)
        if name.startswith("cell-") or (self.sim_cells_per_process and name.startswith("rep-")):
            return name
        if name in self.reps:  # a simulated cell: the host of the rep process that hosts it
            return self.reps[name].component
        if name in ("auctioneer", "auctioneer-2") and self.separate_auctioneers:
            return "auctioneer-1" if name == "auctioneer" else "auctioneer-2"
        if name in ("bbs", "bbs-2") and self.separate_bbs:
            return "bbs-1" if name == "bbs" else "bbs-2"
        if name in NATS_HOSTS and self.transport == "nats":
            return NATS_HOSTS[name]
        if name in ("bbs", "bbs-2", "auctioneer", "auctioneer-2", "postgres"):
            return CONTROL
        raise KeyError(f"no component {component!r} in this cluster")

    def host(self, name: str) -> Host:
        if name not in self.hosts:
            raise KeyError(f"no host {name!r} (hosts: {', '.join(self.hosts)})")
        return self.hosts[name]

    # --- where LocalCluster's components run --------------------------------------------------------------

    def _address(self, name: str) -> str:
        return self.host(self.host_of(name)).address

    def _on_host(self, name: str, start: Callable[[], T]) -> T:
        return self.host(self.host_of(name)).run(start)

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> MultiHostCluster:
        """Build the network (sweeping what dead runs left), then start the cluster on it; everything is
        removed again when that fails."""
        try:
            self.network = Network.create(self.host_names())
            for name, link in self.network.hosts.items():
                self.hosts[name] = Host(name, link.address, self.network.namespace_path(name))
            self.postgres_clients = (str(self.network.subnet),)
            if self.executor == "container":
                self._start_registry()
            super().start(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _start_registry(self) -> None:
        """The registry on its host, and the reps' bridges on subnets that are not the hosts' network."""
        assert self.network is not None
        self.container_subnets = tuple(free_subnets(self.cells, avoid=[self.network.subnet]))
        host = self.host(REGISTRY)
        workdir = self.data_dir / "registry"
        self.registry = host.run(lambda: self._registry_context.enter_context(
            oci_registry(workdir, address=host.address)))
        for args in (self.bbs_args, self.rep_args):  # the BBS pins image refs: it asks the registry too
            args += ["--insecure-registry", self.registry.host]

    def _sweep_reps(self) -> None:
        """LocalCluster's, each rep's on its host: a container rep's CNI DEL and egress rules are in its
        host's namespace."""
        if self.isolation != "cgroups":
            return
        for component in self._components.values():
            if not (component.cells and component.data_dir):
                continue
            sweep_one = functools.partial(sweep_rep, Path(component.data_dir))
            host = self.hosts.get(component.name)
            if host is not None:
                host.run(sweep_one)
            else:
                sweep_one()

    def _start_nats(self, timeout: float) -> None:
        """Transport nats: the three servers of NATS_HOSTS, each on its host, routed to one another; every
        component gets all three URLs. (A cluster needs TLS: an insecure one gets LocalCluster's single
        server.)"""
        if self.transport != "nats" or self.nats_url or self.insecure:
            super()._start_nats(timeout)
            return
        places = {name: (self._address(name), NATS_CLIENT_PORT, ROUTE_PORT) for name in NATS_HOSTS}
        self.nats_servers = cluster_servers(
            places, certs_dir=self.certs_dir, directory=self.data_dir / "nats"
        )
        self.nats_server = self.nats_servers["nats"]
        deadline = time.monotonic() + timeout
        try:
            for name, server in self.nats_servers.items():
                self._on_host(name, lambda server=server: server.start(max(1.0, deadline - time.monotonic())))
        except NatsServerError as exc:
            raise ClusterError(f"the NATS cluster did not start: {exc}") from None
        self.nats_url = ",".join(server.url for server in self.nats_servers.values())

    def stop(self) -> None:
        """LocalCluster's (which stops the first NATS server), and the other NATS servers."""
        try:
            super().stop()
        finally:
            for server in self.nats_servers.values():
                server.stop()

    def __enter__(self) -> MultiHostCluster:
        if self.network is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> list[int]:
        """Heal, stop every component (LocalCluster's order), kill what is left in the namespaces, remove
        the network and the data dir. Returns the pids that were still there to kill. Idempotent."""
        leftovers: list[int] = []
        try:
            if self.network is not None:
                with contextlib.suppress(Exception):
                    self.network.heal_all()  # a partitioned rep reports its stops instead of hanging on them
            self.stop()
        finally:
            with contextlib.suppress(Exception):  # before the hosts' kill, which would count it a leftover
                self._registry_context.close()
            self.registry = None
            if self.network is not None:
                leftovers = self.network.close()
            if self.executor == "container":
                # A container lives in namespaces of its own, out of reach of the hosts' kill: whatever a
                # failed stop left, now that no rep runs.
                with contextlib.suppress(Exception):
                    self._sweep_reps()
            for host in self.hosts.values():
                host.close()
            self.hosts.clear()
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return leftovers

    # --- faults -----------------------------------------------------------------------------------------

    def _net(self) -> Network:
        if self.network is None:
            raise ClusterError("the cluster is not started")
        return self.network

    def partition(self, host: str) -> None:
        """Cut `host` off from everything (its link down)."""
        self._net().partition(host)

    def heal(self, host: str) -> None:
        self._net().heal(host)

    def cut(self, a: str, b: str) -> None:
        """Hosts `a` and `b` cannot reach each other; both reach everyone else."""
        self._net().cut(a, b)

    def mend(self, a: str, b: str) -> None:
        self._net().mend(a, b)

    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        """LocalCluster's, and "postgres" and each NATS server too."""
        server = self._server(component)
        if server is None:
            super().kill(component, sig)
            return
        if server.proc is None:
            raise ClusterError(f"{component} was never started")
        with contextlib.suppress(ProcessLookupError):
            server.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            server.proc.wait(timeout=30.0)

    def restart(self, component: str, timeout: float = 30.0) -> None:
        """LocalCluster's, and "postgres" (its data kept) and each NATS server too, on their host."""
        if component == "postgres" and self.postgres is not None:
            server = self.postgres.server
            server.stop()
            self._on_host("postgres", server.start_again)
        elif component in NATS_HOSTS:
            nats = self._server(component)
            nats.stop()
            self._on_host(component, lambda: nats.start(timeout=timeout))
        else:
            super().restart(component, timeout)

    def _server(self, component: str) -> Any:
        """The PostgreSQL or NATS server behind `component` (None for the Vendue components)."""
        if component == "postgres":
            if self.postgres is None:
                raise ClusterError("no PostgreSQL in this cluster")
            return self.postgres.server
        if component in NATS_HOSTS:
            server = self.nats_servers.get(component) or (self.nats_server if component == "nats" else None)
            if server is None:
                raise ClusterError(f"no NATS server {component!r} in this cluster")
            return server
        return None

    # --- the real processes ---------------------------------------------------------------------------

    def host_pids(self, host: str) -> list[int]:
        """Every live process on the host (its namespace's, `ip netns pids`)."""
        return self._net().pids(host)

    def nats_clients(self) -> dict[str, set[str]]:
        """Component (launcher name) -> the NATS servers (NATS_HOSTS names) its process holds a connection
        to, read from the kernel's socket tables: a connection to a server cut off stays there until the
        client gives it up. A component with none is left out."""
        servers = {self.host(host).address: name for name, host in NATS_HOSTS.items() if host in self.hosts}
        found: dict[str, set[str]] = {}
        for component, pid in self.pids().items():
            for address, port in established_peers(pid):
                if port == NATS_CLIENT_PORT and address in servers:
                    found.setdefault(component, set()).add(servers[address])
        return found

    def instance_processes(self, process_guid: str) -> dict[str, dict[int, list[int]]]:
        """host -> INSTANCE_INDEX -> pids of the live processes whose environment says they are an instance
        of `process_guid`: what really runs, read from every namespace, whatever the BBS or a rep says. A
        container's processes are in a namespace of their own: they count on the host of their runc."""
        on_host = {pid: host for host in self.hosts for pid in self.host_pids(host)}
        found: dict[str, dict[int, list[int]]] = {}
        for entry in os.listdir("/proc"):
            env = proc_environ(int(entry)) if entry.isdigit() else {}
            if env.get("PROCESS_GUID") != process_guid or "INSTANCE_INDEX" not in env:
                continue
            pid = int(entry)
            if (host := _host_of(pid, on_host)) is not None and pid_alive(pid):
                found.setdefault(host, {}).setdefault(int(env["INSTANCE_INDEX"]), []).append(pid)
        return found


def _host_of(pid: int, on_host: dict[int, str]) -> str | None:
    """The host of `pid` or of its nearest ancestor on a host (`on_host`: pid -> host); None: not ours."""
    for _ in range(64):  # deeper than any tree of ours
        if pid in on_host:
            return on_host[pid]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # after the name, which may hold anything: state, ppid
        if pid <= 1:
            return None
    return None
