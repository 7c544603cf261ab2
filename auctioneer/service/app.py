"""The auctioneer's HTTP API and the composition of its parts.

    POST /v1/lrps  [LRPStartRequest]  -> 202 {"accepted": n}   (n: requests queued)
    POST /v1/tasks [TaskStartRequest] -> 202 {"accepted": n}
    GET  /ping -> {"ok": true};  GET /metrics (Prometheus);  GET /v1/stats (JSON counters)

Requests are only queued here; the batch loop (batcher.py) runs the auctions.

With `transport="nats"` the same batcher is also fed from `vendue.auctioneer.lrps`/`.tasks`, bids come
from one scatter-gather on `vendue.cells.state` and work goes out on `vendue.cell.<id>.work`; /ping
answers 503 {"ok": false, "ready": false} while NATS is unreachable. The cell list and the failure
reports stay HTTP calls to the BBS (its REST API).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from common.models import LRPStartRequest, TaskStartRequest
from common.transport.nats_connection import NatsConnection

from .auction import Auction, AuctionConfig
from .batcher import Batcher
from .cells import CellFetcher
from .clients import RepClients, tls_context
from .dispatch import Dispatcher
from .metrics import Metrics
from .nats_cells import NatsCellStateSource
from .nats_dispatch import NatsWorkSender
from .nats_intake import NatsAuctionIntake
from .reporter import FailureReporter
from .settings import AuctioneerSettings
from .transport import CellStateSource, WorkSender

log = logging.getLogger("auctioneer")


class AuctioneerService:
    """Every part of one auctioneer, wired together; `start` and `stop` run inside the event loop."""

    def __init__(self, settings: AuctioneerSettings) -> None:
        self.settings = s = settings
        self.metrics = Metrics()
        # trust_env=False: the control plane talks to its peers directly, never through an HTTP proxy.
        self.bbs = httpx.AsyncClient(
            base_url=s.bbs_url, timeout=s.bbs_timeout, trust_env=False, verify=tls_context(),
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
        )
        self.reps = RepClients(s.max_concurrency, timeout=max(s.cell_state_timeout, s.work_timeout))
        http_cells = CellFetcher(
            self.bbs, self.reps, self.metrics, timeout=s.cell_state_timeout, bbs_timeout=s.bbs_timeout,
            max_concurrency=s.max_concurrency,
        )
        self.nats: NatsConnection | None = None
        self.fetcher: CellStateSource = http_cells
        self.dispatcher: WorkSender = Dispatcher(
            self.reps, self.metrics, timeout=s.work_timeout, max_concurrency=s.max_concurrency
        )
        if s.transport == "nats":
            self.nats = NatsConnection(s.nats_url, name="vendue-auctioneer", token=s.nats_token)
            self.fetcher = NatsCellStateSource(
                self.nats, http_cells.present_cells, self.metrics, timeout=s.cell_state_timeout
            )
            self.dispatcher = NatsWorkSender(
                self.nats, self.metrics, timeout=s.work_timeout, max_concurrency=s.max_concurrency
            )
        self.reporter = FailureReporter(self.bbs, self.metrics, timeout=s.bbs_timeout)
        self.auction = Auction(
            self.fetcher, self.dispatcher, self.reporter, self.metrics,
            AuctionConfig(
                strategy=s.strategy, engine=s.engine, max_inflight_starts=s.max_inflight_starts,
                max_attempts=s.max_attempts, thread_threshold=s.thread_threshold,
            ),
        )
        self.batcher = Batcher(self.auction.run, auction_timeout=s.auction_timeout)
        self.intake: NatsAuctionIntake | None = None
        if self.nats is not None:
            self.intake = NatsAuctionIntake(self.nats, self.batcher.add_lrps, self.batcher.add_tasks, self.metrics)

    @property
    def ready(self) -> bool:
        return self.nats is None or self.nats.connected

    def start(self) -> None:
        self.batcher.start()
        if self.nats is not None and self.intake is not None:
            # Until a lease decides otherwise every auctioneer is active: take requests once connected.
            intake = self.intake
            self.nats.on_connect(lambda _: intake.open())
            self.nats.start()
        log.info("auctioneer started", extra={"data": {
            "bbs_url": self.settings.bbs_url, "strategy": self.settings.strategy,
            "transport": self.settings.transport,
        }})

    async def stop(self) -> None:
        timeout = self.settings.shutdown_timeout
        if self.intake is not None:
            await self.intake.close()
        await self.batcher.stop(timeout)
        if self.nats is not None:
            await self.nats.close()
        await self.reporter.drain(timeout / 2)
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

    app = FastAPI(title="vendue auctioneer", lifespan=lifespan)
    app.state.service = service

    @app.post("/v1/lrps", status_code=202)
    async def start_lrps(requests: list[LRPStartRequest]) -> JSONResponse:
        service.batcher.add_lrps(requests)
        return JSONResponse({"accepted": len(requests)}, status_code=202)

    @app.post("/v1/tasks", status_code=202)
    async def start_tasks(requests: list[TaskStartRequest]) -> JSONResponse:
        service.batcher.add_tasks(requests)
        return JSONResponse({"accepted": len(requests)}, status_code=202)

    @app.get("/ping")
    async def ping() -> JSONResponse:
        if service.nats is None:
            return JSONResponse({"ok": True})
        if not service.nats.connected:
            return JSONResponse({"ok": False, "ready": False, "nats": service.nats.status()}, status_code=503)
        return JSONResponse({"ok": True, "ready": True})

    @app.get("/v1/stats")
    async def stats() -> dict:
        extra = {"nats": service.nats.status()} if service.nats is not None else {}
        return {**service.metrics.stats(), "pending": service.batcher.pending,
                "auction_running": service.batcher.auction_running, "transport": service.settings.transport,
                **extra}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app
