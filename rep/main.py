"""Assemble a rep process from its settings and run it: bind, serve, announce, wait, shut down.

With TLS files (docs/security.md) the rep serves HTTPS with its certificate and authorizes every request
(rep/api.py, rep/policy.py); its name (rep_id) is the certificate's CN, and each of its cells must be one
the certificate names. Its one BBS client presents that certificate and trusts only the cluster CA.
Without them it serves plain HTTP with authorization off (only on loopback,
or with --insecure), and says so: a warning at start, `"insecure": true` in /ping and in every presence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from common import runtime, serving
from common.auth import bbs_token_verifier, uvicorn_tls_options
from common.config_check import ServingTLS, serving_tls
from common.failover import AsyncFailoverTransport, URLListError, split_urls
from common.models.image import IMAGE_STACK
from common.procutil import write_ready_file
from common.tls import INSECURE_WARNING

from .api import create_app
from .artifact_cache import ArtifactCache
from .capacity import CapacityError, cell_capacity
from .cell import CachedBlobs, CellConfig, RepCell
from .config_check import artifact_ca_problem
from .executor import Executor
from .fencing import FENCING_FILE, Fencing, lease_token_from
from .health_monitor import HealthMonitor
from .host import HostLifecycleSender, RepHost
from .isolation import NONE_WARNING, Isolation, IsolationError, instances_dir_of, prepare_isolation, rep_key
from .process_executor import MIB, ProcessExecutor
from .settings import SIM_DEFAULT_DISK_MB, SIM_DEFAULT_MEMORY_MB, RepSettings, default_cell_id
from .sim_executor import SimExecutor

if TYPE_CHECKING:
    from .nats_bus import RepNatsBus

log = logging.getLogger("rep")

STARTUP_TIMEOUT_S = 30.0
REP_KEEPALIVE_S = 75


class ConfigError(ValueError):
    """A combination of settings that cannot work (reported as a usage error)."""


class _Server(serving.Server):
    """uvicorn without its own signal handling: the rep drains on SIGTERM instead of just exiting."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind_socket(listen: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((listen, port))
    sock.set_inheritable(False)
    return sock


def rep_id_of(settings: RepSettings, tls: ServingTLS | None) -> str:
    """The process's name: its certificate's CN, else `--rep-id`, else the cell id of a one-cell rep, else
    the `--cell-id` prefix of a sim host (or the hostname-derived default)."""
    if tls is not None:
        return tls.identity.name
    return settings.rep_id or settings.cell_id or default_cell_id()


def instances_root(settings: RepSettings) -> Path:
    """Where the process executor's instance directories live (each cell's below it): its filesystem is
    the disk a cell offers by default."""
    return instances_dir_of(settings) if settings.isolation == "cgroups" else settings.data_dir


def cell_configs(settings: RepSettings, base_url: str, rep_id: str, *, insecure: bool,
                 isolation: str = "") -> list[CellConfig]:
    """Every cell's configuration; all share the process's root URL and name (one rep API). `isolation`:
    how its instances are isolated, as advertised (`isolation_name`)."""
    sim = settings.executor == "sim"
    if settings.cells > 1 and not sim:
        raise ConfigError("--cells: only the sim executor can host more than one cell in a process")
    if sim:
        memory = settings.memory_mb or SIM_DEFAULT_MEMORY_MB
        disk = settings.disk_mb or SIM_DEFAULT_DISK_MB
    else:
        try:
            memory, disk = cell_capacity(
                memory_mb=settings.memory_mb,
                disk_mb=settings.disk_mb,
                instances_dir=instances_root(settings),
                cells=settings.cells,
                memory_reserve_mb=settings.memory_reserve_mb,
                disk_reserve_mb=settings.disk_reserve_mb,
            )
        except CapacityError as exc:
            raise ConfigError(str(exc)) from None
    configs = []
    for i in range(settings.cells):
        if settings.cells == 1:
            cell_id = settings.cell_id or default_cell_id()
        else:
            cell_id = f"{settings.cell_id}-{i}" if settings.cell_id else f"cell-{i}"
        zone = f"z{i % settings.zones}" if settings.zones else settings.zone
        configs.append(
            CellConfig(
                cell_id=cell_id,
                zone=zone,
                rep_url=base_url,
                host=settings.advertise_host,
                memory_mb=memory,
                disk_mb=disk,
                containers=settings.containers,
                stacks=tuple(stacks_of(settings)),
                placement_tags=tuple(settings.placement_tags),
                optional_placement_tags=tuple(settings.optional_placement_tags),
                volume_drivers=tuple(settings.volume_drivers),
                labels=dict(settings.labels),
                report_host_metrics=not sim,
                report_linger_s=settings.report_linger,
                rep_id=rep_id,
                insecure=insecure,
                isolation=isolation,
            )
        )
    return configs


def stacks_of(settings: RepSettings) -> list[str]:
    """The cell's stacks; a container cell adds the image stack ("docker"), keeping its own: work without
    an image still runs there (as a process)."""
    stacks = list(settings.stacks)
    if settings.executor == "container" and IMAGE_STACK not in stacks:
        stacks.append(IMAGE_STACK)
    return stacks


def isolation_name(settings: RepSettings, isolation: Isolation | None) -> str:
    """What the cells advertise (CellPresence.isolation): cgroup-v1 or cgroup-v2, none, or sim (simulated
    containers isolate nothing, and run nothing)."""
    if settings.executor == "sim":
        return "sim"
    if settings.executor == "container" and isolation is not None:
        from .container_executor import detect_runtime, userns_allowed

        runtime = detect_runtime()
        user = "userns" if userns_allowed() else "no-userns"
        return f"{runtime.title if runtime is not None else 'runc'} {user} {isolation.name}"
    return isolation.name if isolation is not None else "none"


# Connections to the BBS: what the process says there is host-level (one lifecycle request in flight, a
# heartbeat request per HOST_BATCH_CELLS cells), besides rare questions (a fencing token, a bearer token).
BBS_CONNECTIONS = 16


def bbs_urls(settings: RepSettings) -> list[str]:
    """The BBS replicas (`--bbs-url` may list several, comma-separated); requests name the first."""
    try:
        return split_urls(settings.bbs_url)
    except URLListError as exc:
        raise ConfigError(f"bbs_url: {exc}") from None


def bbs_client(settings: RepSettings, tls: ServingTLS | None) -> httpx.AsyncClient:
    """The process's one pooled client to the BBS, based on its URL: heartbeats, lifecycle reports, the
    auctioneer lease's fencing token, whom a bearer token stands for. It fails over between the BBS
    replicas (common/failover.py), presenting the rep's certificate and trusting the cluster CA (without
    TLS files: the default CA bundle)."""
    urls = bbs_urls(settings)
    verify = tls.client if tls is not None else httpx.create_ssl_context()
    limits = httpx.Limits(max_connections=BBS_CONNECTIONS, max_keepalive_connections=BBS_CONNECTIONS)
    return httpx.AsyncClient(
        base_url=urls[0], timeout=httpx.Timeout(settings.http_timeout),
        transport=AsyncFailoverTransport(urls, verify=verify, limits=limits),
    )


def build_host(
    settings: RepSettings, base_url: str, tls: ServingTLS | None, bbs: httpx.AsyncClient
) -> RepHost:
    rep_id = rep_id_of(settings, tls)
    try:  # before anything runs: a rep that cannot isolate as asked says so and exits 2
        isolation = prepare_isolation(settings)
        configs = cell_configs(settings, base_url, rep_id, insecure=tls is None,
                               isolation=isolation_name(settings, isolation))
        if isolation is not None:
            for config in configs:
                isolation.open_cell(config.cell_id)
    except IsolationError as exc:
        raise ConfigError(str(exc)) from None
    if settings.executor == "process" and isolation is None:
        log.warning(NONE_WARNING, extra={"data": {"uid": os.geteuid()}})
    if tls is not None:
        foreign = [c.cell_id for c in configs if not tls.identity.speaks_for(c.cell_id)]
        if foreign:  # the BBS would refuse every heartbeat of these: say so now, not as a silent outage
            raise ConfigError(f"cell_id: the certificate {tls.files.cert} does not name cell {foreign[0]} "
                              "(vendue certs issue --role rep --cell ID, or --cell-prefix P)")
    bbs_url = bbs_urls(settings)[0]
    executors: list[Executor] = []
    cells: list[RepCell] = []
    if settings.executor == "sim":
        sim = SimExecutor(start_delay_s=settings.sim_start_delay, crash_rate_per_s=settings.sim_crash_rate)
        executors.append(sim)
    # The cells' reports share one request per round (see HostLifecycleSender).
    reports = HostLifecycleSender(bbs, bbs_url)
    if (problem := artifact_ca_problem(settings)) is not None:
        raise ConfigError(problem)
    # One cache for every cell of the host: a blob is fetched once however many of its cells start it.
    cache = None if settings.executor == "sim" else ArtifactCache(
        settings.cache_dir or Path(settings.data_dir) / "cache", settings.cache_mb * MIB,
        bbs_client=bbs, bbs_url=bbs_url, url_ca=settings.artifact_ca)
    blobs = cache.recent if cache is not None else sim_blobs(settings.sim_cached_blobs)
    health = HealthMonitor()  # one scheduler for every instance of the host (rep/health_monitor.py)
    for config in configs:
        if settings.executor == "sim":
            executor: Executor = executors[0]
        else:
            options: dict[str, Any] = {
                "isolation": isolation, "stop_grace_s": settings.stop_grace,
                "memory_limit": settings.memory_limit, "log_cap_bytes": settings.log_cap_mb * MIB,
                "disk_check_interval_s": settings.disk_check_interval, "artifacts": cache, "health": health,
            }
            if settings.executor == "container":
                assert cache is not None
                executor = container_executor(settings, config.cell_id, cache, options)
            else:
                executor = ProcessExecutor(settings.data_dir, config.cell_id, **options)
            executors.append(executor)
        cells.append(RepCell(config, executor, reports.for_cell(config.cell_id), cached_blobs=blobs))
    return RepHost(
        cells,
        executors,
        bbs,
        bbs_url,
        rep_id=rep_id,
        presence_ttl_s=settings.presence_ttl,
        evacuation_timeout_s=settings.evacuation_timeout,
    )


def container_executor(settings: RepSettings, cell_id: str, cache: ArtifactCache,
                       options: dict[str, Any]) -> Executor:
    """The container executor of a cell (rep/container_executor.py): its network named after the rep's
    key, its addresses leased under the data dir."""
    from . import cni
    from .container_executor import ContainerExecutor, detect_runtime
    from .image_store import ImageStore

    runtime = detect_runtime()
    if runtime is None:
        raise ConfigError("--executor container: missing an OCI runtime (runc or crun)")
    key = rep_key(settings.data_dir)
    network = cni.Network(name=f"vendue-{key}", bridge=cni.bridge_of(key), subnet=settings.container_subnet,
                          ipam_dir=Path(settings.data_dir) / cell_id / "cni",
                          egress=settings.container_egress == "allow", plugin_dir=settings.cni_path)
    images = ImageStore(cache, insecure_registries=tuple(settings.insecure_registries),
                        registry_ca=settings.registry_ca)
    return ContainerExecutor(settings.data_dir, cell_id, runtime=runtime, network=network, images=images,
                             init=settings.container_init, **options)


def sim_blobs(digests: list[str]) -> CachedBlobs:
    """A sim host's stand-in for a cache: the digests given, once each, the first given as the most
    recently used."""
    held = list(dict.fromkeys(digests))
    return lambda limit: held[:limit]


def connect_nats(
    settings: RepSettings, host: RepHost, fencing: Fencing, tls: ServingTLS | None
) -> RepNatsBus:
    """Start connecting to NATS in the background (retrying while unreachable); subscribe once connected.
    With TLS files the rep's certificate is its NATS user (its subjects: vendue.rep.<rep_id>.>)."""
    # Imported here: the NATS client (and the aiohttp it pulls in) costs a rep on HTTP ~0.4 s of CPU to
    # import.
    from common.transport.nats_connection import NatsConnection

    from .nats_bus import RepNatsBus

    nats = NatsConnection(settings.nats_url, name=f"vendue-rep-{host.rep_id}", token=settings.nats_token,
                          tls=tls.files if tls is not None else None)
    bus = RepNatsBus(host, nats, fencing)
    nats.on_connect(bus.subscribe)
    nats.start()
    return bus


async def serve(settings: RepSettings) -> int:
    """Run the rep until it is told to stop (signal or /evacuate); returns the exit status."""
    # CertError (a usage error) before anything is bound or started.
    tls = serving_tls(settings, settings.listen, "rep")
    sock = bind_socket(settings.listen, settings.port)
    port = sock.getsockname()[1]
    base_url = f"{'https' if tls else 'http'}://{settings.advertise_host}:{port}"
    bbs = bbs_client(settings, tls)
    host = build_host(settings, base_url, tls, bbs)
    if tls is None:
        log.warning(INSECURE_WARNING)
    fencing = Fencing(settings.data_dir / FENCING_FILE, lease_token_from(bbs))
    for cell in host.cells.values():  # what a previous run accepted (the cell state's debug field)
        cell.fencing_token = fencing.highest
    # What the imports and the setup built lives as long as the process: frozen out of the cyclic
    # collector (whose exit walk alone held a stopping rep up for about a second on a busy 2-core
    # machine); and rarer collections: with the defaults they took about 30% of the CPU per instance of
    # the work route, sim starts and lifecycle reports (micro benchmark).
    runtime.tune_gc()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, host.on_signal, signum)
    bus: RepNatsBus | None = None
    server: _Server | None = None

    def answers_auctions() -> bool:  # the first heartbeat waits for this (rep/host.py)
        return server is not None and server.started and (bus is None or bus.ready)

    await host.start(answers_auctions)
    if settings.transport == "nats":
        bus = connect_nats(settings, host, fencing, tls)
    app = create_app(
        host, fencing, insecure=tls is None, verify_token=bbs_token_verifier(bbs),
        not_ready=(lambda: "" if bus is None or bus.ready else "NATS not connected"), limits=settings,
    )
    server = _Server(
        serving.Config(
            app, limits=settings,
            log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=5,
            # The auctioneer comes back every auction: keep its connections (it drops them after
            # KEEPALIVE_S in auctioneer/clients.py, before this server would); over TLS each
            # new one is a handshake.
            timeout_keep_alive=REP_KEEPALIVE_S,
            **uvicorn_tls_options(tls.server if tls is not None else None),
        )
    )
    served = asyncio.create_task(server.serve(sockets=[sock]), name="uvicorn")
    try:
        deadline = loop.time() + STARTUP_TIMEOUT_S
        while not server.started:
            if served.done():
                served.result()
                raise RuntimeError("the HTTP server stopped during startup")
            if loop.time() > deadline:
                raise RuntimeError(f"the HTTP server did not start within {STARTUP_TIMEOUT_S}s")
            await asyncio.sleep(0.01)
        log.info(
            "rep serving",
            extra={
                "data": {
                    "url": base_url,
                    "port": port,
                    "executor": settings.executor,
                    "rep_id": host.rep_id,
                    "insecure": tls is None,
                    "cells": list(host.cells)[:5],
                    "cell_count": len(host.cells),
                }
            },
        )
        if settings.ready_file is not None:
            write_ready_file(settings.ready_file, base_url, cells=len(host.cells))
        shutdown = asyncio.create_task(host.wait_shutdown())
        await asyncio.wait([shutdown, served], return_when=asyncio.FIRST_COMPLETED)
        shutdown.cancel()
    finally:
        await host.close()
        if bus is not None:
            await bus.nats.close()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(served, timeout=10)
        await bbs.aclose()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("rep stopped")
    return 0
