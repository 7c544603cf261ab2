"""Running a BBS: the runtime (store, outbound calls, events, convergence) and the HTTP(S) server.

async with running_bbs(settings) as bbs:      # what tests use, with or without HTTP
    app = create_app(bbs)
await serve(settings)                          # `vendue bbs`: runtime + uvicorn until SIGTERM/SIGINT

With TLS files (`--tls-cert/--tls-key/--tls-ca`) the BBS serves HTTPS, asks callers for a certificate from
the cluster CA, authorizes every request (bbs/policy.py), and presents its own certificate on every call
it makes. Without them it serves plain HTTP with authorization off: only on a loopback address, or with
`--insecure` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

from common import runtime, serving
from common.auth import uvicorn_tls_options
from common.config_check import serving_tls
from common.procutil import write_ready_file
from common.tls import INSECURE_WARNING, CertError, client_context

from .api import create_app
from .blob_collector import BlobCollector
from .converger import Converger
from .core import BBS
from .events import EventHub
from .images import registry_problem
from .metrics import BBSMetrics
from .outbound import Outbound, rep_checked_transport
from .records import AUCTIONEER_LEASE
from .settings import BBSSettings
from .store import Store

if TYPE_CHECKING:  # imported when used: nats (and the aiohttp it loads) cost a BBS on HTTP 0.3 s at startup
    from common.transport.nats_connection import NatsConnection

    from .nats_transport import EventPublisher

log = logging.getLogger("bbs")

STARTUP_TIMEOUT_S = 30.0
ENCRYPTION_OFF_WARNING = ("encryption at rest is off: desired LRP and task command and env are stored in the "
                          "clear (give --encryption-keys-file or VENDUE_ENCRYPTION_KEYS)")
DRAIN_TIMEOUT_S = 2.0


@contextlib.asynccontextmanager
async def running_bbs(
    settings: BBSSettings, *, converge: bool = True, client: httpx.AsyncClient | None = None,
    callback_client: httpx.AsyncClient | None = None,
) -> AsyncIterator[BBS]:
    """A started BBS: the database migrated, the auctioneer sender and (unless `converge=False`,
    for tests that step convergence themselves) the convergence loop running. `client`: what the BBS
    calls the auctioneer and the reps with (default: outbound_client(settings)); `callback_client`: what it
    POSTs completion callbacks with (default: outbound.callback_http_client, no client certificate)."""
    # Both raise encryption.KeyRingError (one line) before anything starts: a ring that cannot be used,
    # or a database holding records sealed with a key it lacks.
    keys = settings.key_ring()
    if (problem := registry_problem(settings.insecure_registry, settings.registry_ca)) is not None:
        raise CertError(problem)  # a one-line refusal, as a TLS file that cannot be loaded
    store = await Store.open(settings.resolved_database_url(), keys=keys,
                             sqlite_synchronous=settings.sqlite_synchronous)
    if keys is None:
        log.warning(ENCRYPTION_OFF_WARNING)
    client = client or outbound_client(settings)
    metrics = BBSMetrics()
    hub = EventHub()
    nats: NatsConnection | None = None
    options: dict[str, Any] = {
        "timeout": settings.http_timeout, "attempts": settings.send_attempts, "client": client,
        "callback_client": callback_client, "callback_ca": settings.callback_ca,
        # Long enough for a standby to take over the lease of an auctioneer that died (see Outbound).
        "retry_window_s": settings.lease_ttl + 1.0,
    }
    if settings.transport == "nats":
        from common.transport.nats_connection import NatsConnection

        from .nats_transport import NatsOutbound

        # With TLS files, the BBS's certificate is its NATS identity too (docs/security.md, "NATS").
        nats = NatsConnection(settings.nats_url, name="vendue-bbs", token=settings.nats_token,
                              tls=settings.client_files())
        outbound: Outbound = NatsOutbound(nats, settings.auctioneer_url, metrics, **options)
    else:
        outbound = Outbound(settings.auctioneer_url, metrics, **options)
    bbs = BBS(settings, store, outbound, hub, metrics)
    outbound.set_find_auctioneer(functools.partial(elected_auctioneer_url, store))
    converger = Converger(bbs, settings.convergence_interval, settings.lease_ttl)
    events: EventPublisher | None = None
    if nats is not None:
        from .nats_transport import EventPublisher

        events = EventPublisher(nats)
        events.attach(hub)
        nats.start()
        bbs.transport_ready = lambda: nats.connected
    outbound.start()
    if converge:
        converger.start()
    if settings.rebalance_interval:
        bbs.rebalancer.start()
    blob_collector = BlobCollector(bbs)
    if converge:
        blob_collector.start()
        bbs.rollout_driver.start()  # acts only while this replica holds the convergence lease
    try:
        yield bbs
    finally:
        hub.close()
        await blob_collector.stop()
        await bbs.rebalancer.stop()
        await bbs.rollout_driver.stop()
        await converger.stop()
        await bbs.convergence.probes.close()
        await bbs.images.close()
        with contextlib.suppress(TimeoutError):
            await outbound.drain(DRAIN_TIMEOUT_S)
        await outbound.close()
        if events is not None and nats is not None:
            await events.close()
            await nats.close()
        await store.close()


def outbound_client(settings: BBSSettings) -> httpx.AsyncClient:
    """One pooled client (connections kept alive) for the calls the BBS makes as itself: with TLS it
    presents the BBS's certificate and trusts only the cluster CA, and a request to a rep checks that the
    server's certificate is that rep's. Completion callbacks have their own (callback_http_client)."""
    files = settings.client_files()
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=50)
    if files is None:
        return httpx.AsyncClient(timeout=settings.http_timeout, verify=True, limits=limits)
    # Requests to reps reach only the rep of their cells (outbound.rep_checked_transport).
    return httpx.AsyncClient(timeout=settings.http_timeout,
                             transport=rep_checked_transport(client_context(files), limits))


async def elected_auctioneer_url(store: Store) -> str | None:
    """The URL of the auctioneer holding an unexpired lease (by the database's clock), None when none does."""
    async with store.read() as tx:
        lease = await tx.held_lease(AUCTIONEER_LEASE)
    return lease.url if lease is not None and lease.url else None


class _Server(serving.Server):
    """uvicorn, with SIGTERM/SIGINT handled on the loop: begin a graceful shutdown, end the event
    streams (open SSE responses would hold it up), and return normally so our cleanup runs."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_exit)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def request_exit(self) -> None:
        if self.should_exit:
            self.force_exit = True  # a second signal: stop waiting for connections
        self.should_exit = True
        self._on_exit()


async def serve(settings: BBSSettings) -> None:
    """Raises common.tls.CertError (InsecureRefused among them) before anything starts when the TLS
    settings cannot be served with."""
    served = serving_tls(settings, settings.listen, "bbs")  # a certificate of the role bbs, or plain HTTP
    tls = served.server if served is not None else None
    if served is None:
        log.warning(
            INSECURE_WARNING, extra={"data": {"listen": settings.listen, "insecure": settings.insecure}}
        )
    async with running_bbs(settings) as bbs:
        runtime.tune_gc()  # every actual LRP lives in memory: rarer cycle collections
        config = serving.Config(
            create_app(bbs, insecure=served is None),
            limits=settings,
            host=settings.listen,
            port=settings.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            **uvicorn_tls_options(tls),
        )
        diego: _Server | None = None
        server = _Server(config, on_exit=lambda: _exit_all(bbs, diego))
        served_task = asyncio.create_task(server.serve())
        url = await _started(server, served_task, "the BBS HTTP server", tls is not None)
        log.info("serving", extra={"data": {"url": url, "database": _safe_url(settings)}})
        if bbs.uow.converger is not None:
            bbs.uow.converger.serving_at(url)
        diego_url, diego_task = None, None
        address = settings.diego_address()
        if address is not None:
            from .diego.app import create_diego_app  # protobuf: loaded only where Diego's API is served

            diego = _Server(serving.Config(
                create_diego_app(bbs, insecure=served is None), limits=settings, host=address[0],
                port=address[1], log_config=None, access_log=False, lifespan="off",
                timeout_graceful_shutdown=5,
                **uvicorn_tls_options(tls)), on_exit=lambda: _exit_all(bbs, server))
            diego_task = asyncio.create_task(diego.serve())
            diego_url = await _started(diego, diego_task, "the Diego API server", tls is not None)
            log.info("serving Diego's API", extra={"data": {"url": diego_url}})
        print(url, flush=True)
        if settings.ready_file is not None:
            write_ready_file(settings.ready_file, url, **({"diego_url": diego_url} if diego_url else {}))
        await served_task
        if diego_task is not None:
            await diego_task
        log.info("stopped")


def _exit_all(bbs: BBS, other: _Server | None) -> None:
    """A signal to one server stops both (and the event streams)."""
    bbs.hub.close()
    if other is not None:
        other.should_exit = True


async def _started(server: _Server, task: asyncio.Task[None], what: str, https: bool) -> str:
    """The URL `server` serves on, once it does (raises what stopped it first)."""
    deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
    while not server.started:
        if task.done():
            await task  # raises what stopped it (e.g. the port is taken)
            raise SystemExit(f"{what} stopped before it started")
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{what} did not start within {STARTUP_TIMEOUT_S}s")
        await asyncio.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    scheme = "https" if https else "http"
    return f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"


def _safe_url(settings: BBSSettings) -> str:
    from sqlalchemy.engine import make_url

    return make_url(settings.resolved_database_url()).render_as_string(hide_password=True)
