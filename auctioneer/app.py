"""The auctioneer's HTTP API and the composition of its parts.

    POST /v1/lrps  [LRPStartRequest]  -> 202 {"accepted": n}   (n: requests queued)
    POST /v1/tasks [TaskStartRequest] -> 202 {"accepted": n}
    GET  /ping -> {"ok": true, "insecure": false};  GET /livez -> 200;  GET /readyz -> 200, or 503 and why
    GET  /metrics (Prometheus);  GET /v1/stats (JSON counters)

Requests are only queued here; the batch loop (batcher.py) runs the auctions.

Security (docs/security.md): served over HTTPS with the auctioneer's certificate (server.py), every request
checked against the table in policy.py before it runs (common/auth.py; bearer tokens are checked by the
BBS). Every client here (to the BBS, to the leader, to the reps) presents the auctioneer's certificate and
trusts only the cluster CA: one TLS context, built once. Without TLS files (`--insecure`, or loopback
only) it serves plain HTTP with authorization off, and says so.

Any number of auctioneers may run: the holder of the "auctioneer" lease (leadership.py, taken through the
BBS) auctions and fences its work with the lease's token; a standby forwards the POSTs above to the
holder's URL (forward.py), and hands them back to the BBS (503) when it knows no holder or cannot reach
it: it never keeps work it may not auction. /v1/stats says `leader`, `fencing_token`, `forwarded` and
`handed_back`.

With `transport="nats"` the same batcher is also fed from `vendue.auctioneer.lrps`/`.tasks`, bids come
from a request per rep process on `vendue.cells.state.<rep_id>` and work goes out on
`vendue.rep.<rep_id>.work`; /ping answers 503 {"ok": false, "ready": false} while NATS is unreachable.
The cell list and the failure reports stay HTTP calls to the BBS (its REST API).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from common.auth import add_auth, bbs_token_verifier
from common.failover import AsyncFailoverTransport, split_urls
from common.http_metrics import add_http_metrics
from common.limits import add_limits
from common.models import LRPStartRequest, TaskStartRequest
from common.request_id import add_request_id
from common.tls import INSECURE_WARNING, client_context
from common.validation import add_validation_handler

from .auction import Auction, AuctionConfig
from .batcher import Batcher
from .cells import CellFetcher
from .clients import RepClients, tls_context
from .dispatch import Dispatcher
from .forward import FORWARDED_HEADER, Forwarder
from .leadership import Leadership
from .metrics import DiegoAuctioneerMetrics, Metrics
from .policy import POLICY
from .reporter import FailureReporter
from .settings import AuctioneerSettings
from .transport import CellStateSource, WorkSender

if TYPE_CHECKING:  # imported when used: nats (jetstream and all) costs an auctioneer on HTTP 0.2 s at startup
    from common.transport.nats_connection import NatsConnection

    from .nats_intake import NatsAuctionIntake

log = logging.getLogger("auctioneer")


class AuctioneerService:
    """Every part of one auctioneer, wired together; `start` and `stop` run inside the event loop."""

    def __init__(self, settings: AuctioneerSettings) -> None:
        self.settings = s = settings
        self.metrics = Metrics()
        # None: plain HTTP, authorization off (--insecure, or no TLS files on loopback; else this raises).
        self.tls_files = s.serving_files(s.listen)
        # One client context for every peer: our certificate, only the cluster CA trusted.
        client_tls: ssl.SSLContext = client_context(self.tls_files) if self.tls_files else tls_context()
        # trust_env=False: the control plane talks to its peers directly, never through an HTTP proxy.
        # Several BBS URLs (comma-separated): requests go to the one that answers (common/failover.py).
        bbs_urls = split_urls(s.bbs_url)
        self.bbs = httpx.AsyncClient(
            base_url=bbs_urls[0], timeout=s.bbs_timeout, trust_env=False,
            transport=AsyncFailoverTransport(
                bbs_urls, verify=client_tls, trust_env=False,
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
            ),
        )
        scheme = "https" if self.tls_files else "http"
        self.leadership = Leadership(
            self.bbs, s.advertise_url or f"{scheme}://{s.listen}:{s.port}", s.lease_ttl, timeout=s.bbs_timeout
        )
        leadership = self.leadership
        self.metrics.registry.register(DiegoAuctioneerMetrics(self.metrics, lambda: leadership.leader))
        self.forwarder = Forwarder(timeout=s.bbs_timeout, verify=client_tls)
        self.reps = RepClients(
            s.max_concurrency, timeout=max(s.cell_state_timeout, s.work_timeout), ssl_context=client_tls
        )
        http_cells = CellFetcher(
            self.bbs, self.reps, self.metrics, timeout=s.cell_state_timeout, bbs_timeout=s.bbs_timeout,
            max_concurrency=s.max_concurrency,
        )
        self.nats: NatsConnection | None = None
        self.fetcher: CellStateSource = http_cells
        self.dispatcher: WorkSender = Dispatcher(
            self.reps, self.metrics, timeout=s.work_timeout, max_concurrency=s.max_concurrency,
            fencing_token=self.fencing_token,
        )
        if s.transport == "nats":
            from common.transport.nats_connection import NatsConnection

            from .nats_cells import NatsCellStateSource
            from .nats_dispatch import NatsWorkSender

            self.nats = NatsConnection(
                s.nats_url, name="vendue-auctioneer", token=s.nats_token, tls=self.tls_files
            )
            self.fetcher = NatsCellStateSource(
                self.nats, http_cells.present_cells, self.metrics, timeout=s.cell_state_timeout
            )
            self.dispatcher = NatsWorkSender(
                self.nats, self.metrics, timeout=s.work_timeout, max_concurrency=s.max_concurrency,
                fencing_token=self.fencing_token,
            )
        self.reporter = FailureReporter(
            self.bbs, self.metrics, timeout=s.bbs_timeout, fencing_token=self.fencing_token
        )
        self.auction = Auction(
            self.fetcher, self.dispatcher, self.reporter, self.metrics,
            AuctionConfig(
                strategy=s.strategy, engine=s.engine, max_inflight_starts=s.max_inflight_starts,
                max_attempts=s.max_attempts, thread_threshold=s.thread_threshold, explanations=s.explanations,
                cache_weight=s.cache_weight,
            ),
        )
        self.batcher = Batcher(self.auction.run, auction_timeout=s.auction_timeout, gate=self.leadership)
        self.intake: NatsAuctionIntake | None = None
        self._tasks: set[asyncio.Future] = set()
        if self.nats is not None:
            from .nats_intake import NatsAuctionIntake

            self.intake = NatsAuctionIntake(
                self.nats, self.batcher.add_lrps, self.batcher.add_tasks, self.metrics
            )

    def fencing_token(self) -> int:
        return self.leadership.token

    @property
    def insecure(self) -> bool:
        return self.tls_files is None

    def not_ready(self) -> str | None:
        """Why this auctioneer cannot do its work now (GET /readyz), or None."""
        if self.nats is not None and not self.nats.connected:
            return "NATS is not connected"
        return self.leadership.problem

    def start(self) -> None:
        if self.insecure:
            log.warning(INSECURE_WARNING)
        self.batcher.start()
        if self.nats is not None and self.intake is not None:
            # Only the leader takes requests off NATS (the queue group would hand a standby its share).
            intake, leadership, nats = self.intake, self.leadership, self.nats

            async def on_connect(_: object) -> None:
                if leadership.leader:
                    await intake.open()

            def on_leadership(leader: bool) -> None:
                if leader and nats.connected:
                    self._background(intake.open())
                elif not leader:
                    self._background(intake.close())

            nats.on_connect(on_connect)
            self.leadership.on_change(on_leadership)
            nats.start()
        self.leadership.start()
        log.info("auctioneer started", extra={"data": {
            "bbs_url": self.settings.bbs_url, "strategy": self.settings.strategy,
            "transport": self.settings.transport, "insecure": self.insecure,
        }})

    def _background(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        timeout = self.settings.shutdown_timeout
        if self.intake is not None:
            await self.intake.close()
        # The running auction finishes under the lease (renewals go on), then the lease is released so a
        # standby takes over at once rather than after the TTL.
        await self.batcher.stop(timeout)
        await self.leadership.stop(release=True)
        if self.nats is not None:
            await self.nats.close()
        await self.reporter.drain(timeout / 2)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.forwarder.aclose()
        await self.reps.aclose()
        await self.bbs.aclose()
        log.info("auctioneer stopped")


def create_app(settings: AuctioneerSettings | None = None) -> FastAPI:
    service = AuctioneerService(settings or AuctioneerSettings())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    # No /docs or /openapi.json: routes the authorization table does not list.
    app = FastAPI(
        title="vendue auctioneer", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.service = service
    add_validation_handler(app)

    async def not_here(request: Request) -> Response | None:
        """None: this auctioneer leads, the request is queued here. Else a standby's answer: the leader's,
        once forwarded to the holder it knows; or, when it knows none or cannot reach it, 503, handing the
        request back (forward.py): the BBS asks the lease for the leader again and retries at once."""
        leadership = service.leadership
        if leadership.leader:
            return None
        holder = leadership.holder_url
        if holder and holder != leadership.url and not request.headers.get(FORWARDED_HEADER):
            forwarded = await service.forwarder.forward(holder, request.url.path, await request.body())
            if forwarded is not None:
                return Response(forwarded.content, status_code=202, media_type="application/json")
        leadership.wake()  # the lease may be free (a released or expired one): try for it now
        return service.forwarder.hand_back(holder if holder != leadership.url else "")

    @app.post("/v1/lrps", status_code=202)
    async def start_lrps(requests: list[LRPStartRequest], request: Request) -> Response:
        if (answer := await not_here(request)) is not None:
            return answer
        service.batcher.add_lrps(requests)
        return JSONResponse({"accepted": len(requests)}, status_code=202)

    @app.post("/v1/tasks", status_code=202)
    async def start_tasks(requests: list[TaskStartRequest], request: Request) -> Response:
        if (answer := await not_here(request)) is not None:
            return answer
        service.batcher.add_tasks(requests)
        return JSONResponse({"accepted": len(requests)}, status_code=202)

    @app.get("/ping")
    async def ping() -> JSONResponse:
        insecure = service.insecure
        if service.nats is None:
            return JSONResponse({"ok": True, "insecure": insecure})
        if not service.nats.connected:
            return JSONResponse(
                {"ok": False, "ready": False, "insecure": insecure, "nats": service.nats.status()},
                status_code=503,
            )
        return JSONResponse({"ok": True, "ready": True, "insecure": insecure})

    @app.get("/livez")
    async def livez() -> JSONResponse:
        return JSONResponse({"ok": True})

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        reason = service.not_ready()
        if reason is not None:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/v1/stats")
    async def stats() -> dict:
        extra = {"nats": service.nats.status()} if service.nats is not None else {}
        leadership = service.leadership
        election = {
            "leader": leadership.leader,
            "fencing_token": leadership.token,
            "owner": leadership.owner,
            "leader_url": leadership.url if leadership.leader else leadership.holder_url,
            "terms": leadership.terms,
            "lease_attempts": leadership.attempts,
            "lease_problem": leadership.problem,
            "auctions_abandoned": service.batcher.auctions_abandoned,
            "forwarded": service.forwarder.forwarded,
            "handed_back": service.forwarder.handed_back,
        }
        return {**service.metrics.stats(), **election, "pending": service.batcher.pending,
                "auction_running": service.batcher.auction_running, "transport": service.settings.transport,
                # New connections to reps (over HTTPS each a handshake): the benchmark divides by auctions.
                "rep_connections_opened": service.reps.connections_opened, **extra}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    add_auth(app, POLICY, verify_token=bbs_token_verifier(service.bbs), insecure=service.insecure,
             service="auctioneer")
    # The BBS's start requests are batches (5,000 LRPs' start requests are ~4 MB): common/limits.py.
    add_limits(app, service.settings, bulk={("POST", "/v1/lrps"), ("POST", "/v1/tasks")})
    add_http_metrics(app, service.metrics.http)
    add_request_id(app)
    return app
