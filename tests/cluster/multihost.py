"""A Vendue cluster on real network hosts on one machine: LocalCluster's components, each on its host.

    with MultiHostCluster(cells=3) as cluster:          # needs root and `ip` (see unavailable_reason)
        cluster.bbs_url                                  # https://198.18.N.2:PORT
        cluster.partition("cell-1"); cluster.heal("cell-1")
        cluster.cut("auctioneer-1", "control")           # with separate_auctioneers=True
        cluster.instance_processes("web")                # host -> index -> pids, read from the namespaces

Hosts (netns.py, one network namespace each, on one bridge):
- `control`: both BBS replicas, PostgreSQL, and NATS when the transport is nats; both auctioneers too,
  unless `separate_auctioneers`, which puts them on hosts `auctioneer-1` and `auctioneer-2` (so that the
  leader alone can be cut off from the BBS and its database while it still reaches every cell);
- one host per cell, named as the cell (`cell-0`, ...), running its rep with the process executor.

Every component binds its host's address, never loopback, with TLS on: its certificate carries that
address. Everything else is LocalCluster's (deploy/cluster.py): the plan of arguments, certificates, key
ring, ready files, the embedded PostgreSQL (durable, as `vendue up --ha` runs it), stop order, kill and
restart; this class only says where each component runs (`_address`, `_on_host`). The tests talk to the
cluster from the root namespace over the bridge, as its admin (`verify`, `http_client`).

`close()` (also on a failed start, and from `with`) heals the network, stops the cluster, kills whatever
is left in the namespaces, removes the namespaces, the veths, the bridge and the data dir; it returns the
pids it had to kill (a clean stop leaves none). A run killed before that is swept by the next one (netns.py
`sweep`, and `sweep_data_dirs` for its files).
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

import httpx

from deploy.cluster import FIRST_OF, ClusterError, LocalCluster
from tests.e2e.conftest import expect, proc_environ, wait_for

from .hosts import Host
from .netns import PREFIX, Network, NetworkError, dead_tag, ip, new_tag

T = TypeVar("T")
CONTROL = "control"
DATA_PREFIX = "vendue-hosts-"  # + the tag (pid in hex + 2 random hex digits) + "-" + mkdtemp's suffix
OUR_DATA_DIR = re.compile(r"^vendue-hosts-([0-9a-f]+)-")


@functools.cache
def unavailable_reason() -> str | None:
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
    """Remove the data dirs of clusters whose process is gone (killed before its teardown)."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{DATA_PREFIX}*"):
        match = OUR_DATA_DIR.match(path.name)
        if match and dead_tag(match[1]):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class MultiHostCluster(LocalCluster):
    def __init__(
        self,
        cells: int = 3,
        zones: int = 1,
        *,
        separate_auctioneers: bool = False,
        transport: str = "http",
        bbs_args: Sequence[str] = (),
        auctioneer_args: Sequence[str] = (),
        rep_args: Sequence[str] = (),
        **options: Any,
    ) -> None:
        """Two BBS replicas and two auctioneers on an embedded PostgreSQL, and `cells` reps in `zones`
        zones (round-robin); `options`: the rest of LocalCluster's (cell sizes, env, encryption)."""
        sweep_data_dirs()
        data_dir = Path(tempfile.mkdtemp(prefix=f"{DATA_PREFIX}{new_tag()}-"))
        data_dir.chmod(0o755)  # PostgreSQL's own user must reach its files (the server runs as it under root)
        try:
            super().__init__(data_dir, cells=cells, zones=zones, executor="process", bbs_args=bbs_args,
                             auctioneer_args=auctioneer_args, rep_args=rep_args, transport=transport, ha=True,
                             **options)
        except BaseException:
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        self.separate_auctioneers = separate_auctioneers
        self.network: Network | None = None
        self.hosts: dict[str, Host] = {}

    # --- the layout -------------------------------------------------------------------------------------

    def host_names(self) -> list[str]:
        auctioneers = ["auctioneer-1", "auctioneer-2"] if self.separate_auctioneers else []
        return [CONTROL, *auctioneers, *(f"cell-{i}" for i in range(self.cells))]

    def host_of(self, component: str) -> str:
        """The host a component runs on: "bbs", "bbs-2", "auctioneer", "auctioneer-2", "postgres",
        "nats" or a cell id."""
        name = FIRST_OF.get(component, component)
        if name.startswith("cell-"):
            return name
        if name in ("auctioneer", "auctioneer-2") and self.separate_auctioneers:
            return "auctioneer-1" if name == "auctioneer" else "auctioneer-2"
        if name in ("bbs", "bbs-2", "auctioneer", "auctioneer-2", "postgres", "nats"):
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
            started = time.monotonic()
            super().start(timeout)
            self._await_election(max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:
            self.close()
            raise
        return self

    def _await_election(self, timeout: float) -> None:
        """Wait until both auctioneers name one leader. Until then a start request the BBS sends to a
        standby that knows no leader yet waits there until that standby leads, or convergence re-sends it
        30 s later (stale unclaimed): a test would see its first app take that long."""
        auctioneers = {name: url for name, url in self.control_plane().items() if not name.startswith("bbs")}

        def elected() -> bool:
            named = {name: httpx.get(f"{url}/v1/stats", verify=self.verify, timeout=2.0).json()["leader_url"]
                     for name, url in auctioneers.items()}
            return expect(len(set(named.values())) == 1 and all(named.values()), f"leaders named: {named}")

        wait_for(elected, timeout, "both auctioneers to name one leader")

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
            if self.network is not None:
                leftovers = self.network.close()
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
        """LocalCluster's, and "postgres" and "nats" too."""
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
        """LocalCluster's, and "postgres" (its data kept) and "nats" too, on their host."""
        if component == "postgres" and self.postgres is not None:
            server = self.postgres.server
            server.stop()
            self._on_host("postgres", server.start_again)
        elif component == "nats" and self.nats_server is not None:
            nats = self.nats_server
            nats.stop()
            self._on_host("nats", lambda: nats.start(timeout=timeout))
        else:
            super().restart(component, timeout)

    def _server(self, component: str) -> Any:
        """The PostgreSQL or NATS server behind `component` (None for the Vendue components)."""
        if component == "postgres":
            if self.postgres is None:
                raise ClusterError("no PostgreSQL in this cluster")
            return self.postgres.server
        if component == "nats":
            if self.nats_server is None:
                raise ClusterError("no NATS server in this cluster (transport http)")
            return self.nats_server
        return None

    # --- the real processes ---------------------------------------------------------------------------

    def host_pids(self, host: str) -> list[int]:
        """Every live process on the host (its namespace's, `ip netns pids`)."""
        return self._net().pids(host)

    def instance_processes(self, process_guid: str) -> dict[str, dict[int, list[int]]]:
        """host -> INSTANCE_INDEX -> pids of the live processes whose environment says they are an instance
        of `process_guid`: what really runs, read from every namespace, whatever the BBS or a rep says."""
        found: dict[str, dict[int, list[int]]] = {}
        for host in self.hosts:
            for pid in self.host_pids(host):
                env = proc_environ(pid)
                if env.get("PROCESS_GUID") == process_guid and "INSTANCE_INDEX" in env:
                    found.setdefault(host, {}).setdefault(int(env["INSTANCE_INDEX"]), []).append(pid)
        return found
